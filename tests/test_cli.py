"""One command-line style (src/core/cli.py): every entry point's help has the same shape and names the exit
codes, a config error is one `config error: <key>: ...` line with status 2 everywhere, and the old
spelling of a renamed option still works with a one-line hint."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import REPO, cli_env, run_cli, unwrapped

from src.core import cli
from src.data.__main__ import main as data_main
from src.preflight.__main__ import main as preflight_main
from src.report.__main__ import main as report_main
from src.stats.__main__ import main as stats_main
from src.tracking.team_server import main as team_server_main
from src.ui import main as ui_main

MAINS: dict[str, Callable[[list[str]], int]] = {
    "report": report_main,
    "ui": ui_main,
    "preflight": preflight_main,
    "data": data_main,
    "stats": stats_main,
}


@pytest.mark.parametrize("name", list(MAINS))
def test_every_help_has_one_shape(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        MAINS[name](["--help"])
    assert done.value.code == cli.OK
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m src.{name} [-h]")
    assert "key=value" in out  # the training config's overrides, trailing
    assert cli.EPILOG in out  # the exit codes, written once


@pytest.mark.parametrize(
    ("name", "args", "start"),
    [
        ("report", ["report.margin.test_loss=-1"], "config error: report.margin.test_loss: must be a number > 0"),
        ("report", ["--out", "/proc/normsweep"], "config error: --out: /proc is not writable"),  # was: a traceback
        ("report", ["--status", "--sweep-dir", "/nonexistent/sweep"], "config error: --sweep-dir /nonexistent/sweep: no such folder"),
        # was named logger.tracking_uri=..., a key the user had not typed
        ("report", ["--tracking-uri", "http://127.0.0.1:1", "--experiment-name", "x"], "config error: --tracking-uri http://127.0.0.1:1: no MLflow tracking server answers there"),
        # ...also with credentials in it (refused), which the line leaves out as every line does
        ("report", ["--tracking-uri", "http://alice:s3cret@127.0.0.1:1", "--experiment-name", "x"], "config error: --tracking-uri http://127.0.0.1:1: credentials in the tracking URI"),
        ("ui", ["logger.ui.nope=1"], "config error: logger.ui.nope: no such key (logger.ui's keys: "),
        ("report", ["logger=none"], "config error: logger: tracking is off (logger=none), so no store holds runs to report"),  # was 'logger.tracking_uri=None: a path without a scheme ...'
        ("stats", ["hydra.sweeper.max_seeds=1"], "config error: hydra.sweeper.max_seeds: must be an integer >= 3, got 1"),  # was a ValueError traceback
        ("ui", ["logger=none"], "config error: logger: tracking is off (logger=none), so there is no store to browse"),  # was OmegaConf's 'Key ui not in ...'
        ("data", ["data.foo=1"], "config error: data.foo: no such key (data's keys: source, cache_dir, "),
        # was Hydra's "To append to your config use +report.margin.tst_loss=1": a key nothing reads
        ("report", ["report.margin.tst_loss=1"], "config error: report.margin.tst_loss: no such key; did you mean report.margin.test_loss? (report.margin's keys: test_loss, speed)"),
        ("preflight", ["seed=abc"], "config error: seed: 'abc' is not an integer"),
        ("preflight", ["-m", "norm=glob(zzz*)"], "config error: norm=glob(zzz*): the sweep has no jobs"),
        ("preflight", ["-m", "hydra/sweeper=nope"], "config error: hydra/sweeper: no option 'nope' (conf/hydra/sweeper/); valid choices: basic, sequential"),
    ],
)
def test_a_config_error_is_one_line_and_status_2(
    name: str, args: list[str], start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAINS[name](args) == cli.USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(start), line


@pytest.mark.parametrize("name", [*MAINS, "tracking.team_server", "launch.local_slurm"])
def test_a_usage_error_is_one_config_error_line_and_status_2(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from src.launch.local_slurm import main as local_slurm_main

    main = MAINS.get(name) or {"tracking.team_server": team_server_main, "launch.local_slurm": local_slurm_main}[name]
    with pytest.raises(SystemExit) as done:
        main(["--no-such-option"])
    assert done.value.code == cli.USAGE
    # argparse printed its usage block (2-9 lines) above the error
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"config error: unrecognized arguments: --no-such-option (python -m src.{name} --help lists the options)"


@pytest.mark.parametrize(
    ("command", "argv", "line"),
    [
        ("bench", ["norms", "--rows", "abc"], "argument --rows: 'abc' is not a whole number"),
        ("bench", ["norms", "--widths", "768,0"], "argument --widths: must be >= 1, got 0"),
        ("bench", ["norms", "--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
        ("bench", ["norms", "--warmup", "-1"], "argument --warmup: must be >= 0, got -1"),
        ("bench", ["train", "--steps", "0"], "argument --steps: must be >= 1, got 0"),
        ("bench", ["variants", "--rounds", "1"], "argument --rounds: must be >= 2, got 1"),
        ("bench", ["variants", "--kernel-seconds", "nan"], "argument --kernel-seconds: must be a finite number >= 0, got nan"),
        ("bench", ["norms", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
        ("ui", ["--port", "99999"], "argument --port: a TCP port is 1-65535, got 99999"),
        ("ui", ["--workers", "0"], "argument --workers: must be >= 1, got 0"),
        ("tracking.team_server", ["--pg-port", "0"], "argument --pg-port: a TCP port is 1-65535, got 0"),
        ("tracking.team_server", ["--dir", "/proc/team"], "--dir /proc/team: /proc is not writable (No such file or directory)"),
        ("launch.local_slurm", ["--dir", "/proc/slurm"], "--dir /proc/slurm: /proc is not writable (No such file or directory)"),
        ("tracking.team_server", ["--port", "5100", "--pg-port", "5100"], "--port and --pg-port are both 5100: the MLflow server and PostgreSQL need a port each"),
    ],
)  # fmt: skip
def test_a_bad_option_value_is_one_line_before_anything_runs(
    command: str, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `--widths 0` a ZeroDivisionError, `--rows abc` a ValueError, `--port 99999` an
    OverflowError (tracebacks); `--repeats 0`, `--steps 0` the default run; `--pg-port 0` a server
    that did not start, saying why in its log."""
    from src.bench.__main__ import main as bench_main
    from src.launch.local_slurm import main as local_slurm_main

    mains = {"bench": bench_main, "ui": ui_main, "tracking.team_server": team_server_main, "launch.local_slurm": local_slurm_main}
    main = mains[command]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == cli.USAGE
    prog = f"python -m src.{command}" + (f" {argv[0]}" if command == "bench" else "")
    assert capsys.readouterr().err.strip().splitlines() == [f"config error: {line} ({prog} --help lists the options)"]


@pytest.mark.parametrize(("override", "line"), [
    ("logger.ui.port=70000", "config error: logger.ui.port: a TCP port is 1-65535, got 70000"),
    ("logger.ui.workers=-1", "config error: logger.ui.workers: must be >= 1 (or null: one per two cores), got -1"),
])  # fmt: skip
def test_the_uis_config_values_are_checked_too(
    override: str, line: str, store: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert ui_main([override, f"paths.mlflow_db={store['db']}"]) == cli.USAGE
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_the_team_servers_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        team_server_main(["--help"])
    assert done.value.code == cli.OK
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m src.tracking.team_server [-h]") and cli.EPILOG in out


@pytest.mark.slow  # two CLIs in a subprocess (~4 s each)
def test_trains_help_names_the_exit_codes_and_an_unknown_option_is_one_line() -> None:
    """Hydra's help and its argparse: no exit codes, and an 8-line usage block for `--bogus-opt`."""
    helped = run_cli("src.train", "--help", timeout=300)
    assert helped.returncode == cli.OK and helped.stdout.rstrip().endswith(cli.EPILOG), helped.stdout[-500:]
    refused = run_cli("src.train", "--bogus-opt", "seed=1", timeout=300)
    assert refused.returncode == cli.USAGE
    assert refused.stdout + refused.stderr == (
        "config error: unrecognized arguments: --bogus-opt (python -m src.train --help lists the options)\n"
    )


def test_the_old_experiment_flag_works_with_a_hint(store: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # --experiment named the MLflow experiment, beside the experiment= preset group: now --experiment-name.
    assert report_main(["--experiment", "nope", "--tracking-uri", store["uri"]]) == cli.FAILED  # no such store
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("hint: --experiment is now --experiment-name") and err[1].startswith("error: ")


def test_the_exit_codes_are_documented_once() -> None:
    """docs/configuration.md's table of exit codes is src/core/cli.py's EXIT_CODES, row for row, and it is
    the only one: no other page, nor cli.py's docstring, writes them out again."""
    header = "| status | meaning |\n|---|---|\n"
    pages = {p.name: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
    assert [name for name, text in pages.items() if header in text] == ["configuration.md"]
    table = pages["configuration.md"].partition(header)[2].partition("\n\n")[0]
    assert table.splitlines() == [f"| {code} | {meaning} |" for code, meaning in cli.EXIT_CODES.items()]
    assert not any(f"{code}  {meaning.split()[0]}" in (cli.__doc__ or "") for code, meaning in cli.EXIT_CODES.items())


@pytest.mark.slow  # a CLI in a subprocess
def test_train_refused_by_hydra_is_status_2(store: dict[str, str]) -> None:
    """Hydra's own refusal (an option the `norm` group lacks) ends `python -m src.train` with 2, as a
    `config error:` does, not with Hydra's 1 (a failed run's)."""
    proc = run_cli("src.train", "norm=nope", f"paths.mlflow_db={store['db']}", timeout=300)
    assert proc.returncode == cli.USAGE, proc.stderr[-2000:]
    assert "config error: norm: no option 'nope' (conf/norm/); valid choices: dyt," in proc.stderr
    assert "Traceback" not in proc.stderr


def test_hydras_options_may_follow_the_overrides() -> None:
    """`python -m src.train norm=x -m seed=0,1` (was: `config error: unrecognized arguments: norm=x
    seed=0,1`): Hydra reads its options first, as every other command takes them in any order."""
    from src.train import hydra_argv

    assert hydra_argv(["norm=x", "-m", "seed=0,1"]) == ["-m", "norm=x", "seed=0,1"]
    assert hydra_argv(["a=1", "--cfg", "job", "b=2", "--multirun"]) == ["--cfg", "job", "--multirun", "a=1", "b=2"]
    assert hydra_argv(["-m", "norm=x"]) == ["-m", "norm=x"]
    with pytest.raises(SystemExit, match=r"^config error: unrecognized arguments: --bogus-opt \(python -m src.train --help"):
        hydra_argv(["a=1", "--bogus-opt"])


def test_on_another_hydra_the_command_line_goes_to_hydra_as_typed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The fallback of reading Hydra's options with its internal parser (src/core/patches.py)."""
    from src.core import patches
    from src.train import hydra_argv

    monkeypatch.setattr(patches, "_said", set())
    monkeypatch.setenv(patches.UNPATCHED_ENV, "1")
    assert hydra_argv(["norm=x", "-m", "seed=0,1"]) == ["norm=x", "-m", "seed=0,1"]
    assert unwrapped(capsys.readouterr().err) + "\n" == f"[normsweep] warning: {patches.ARGV_PATCH} left out: {patches.UNPATCHED_ENV} is set; {patches.ARGV_INSTEAD}\n"


@pytest.mark.slow  # a CLI in a subprocess
def test_a_sweep_preset_without_m_says_it_is_one_run(store: dict[str, str]) -> None:
    """`python -m src.train experiment=norm_sweep` (no -m) trains one job, norm=torch_layernorm, into
    the preset's experiment; it said nothing, so one run passed for the study's sweep. Now a note says
    what -m would sweep and which job this is; under -m there is none (nor for a config without a
    sweep: every other command-line test's output). The runs are refused by a bad optim.lr after the
    note, so nothing trains."""
    one = run_cli("src.train", "experiment=norm_sweep_seeds", "optim.lr=-1", f"paths.mlflow_db={store['db']}", timeout=300)
    assert one.returncode == cli.USAGE, one.stderr[-2000:]
    assert max(map(len, one.stdout.splitlines())) <= 120
    assert unwrapped(one.stdout).strip() == (
        "[normsweep] note: this config sweeps norm=hand_layernorm,torch_layernorm,hand_rmsnorm,torch_rmsnorm,no_norm, "
        "seed=0,1,2 (hydra.sweeper.params) under -m; without -m this is one run, norm=torch_layernorm, seed=0: "
        "add -m for the sweep"
    ), one.stdout
    assert one.stderr.strip() == "config error: optim.lr: must be > 0, got -1", one.stderr  # the refusal still one line
    swept = run_cli("src.train", "-m", "experiment=norm_sweep_seeds", "optim.lr=-1", f"paths.mlflow_db={store['db']}", timeout=300)
    assert swept.returncode == cli.USAGE and "note:" not in swept.stdout + swept.stderr, swept.stdout + swept.stderr


def test_the_node_workers_help_is_usage_not_a_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`python -m src.launch.node_job --help` took `--help` for the job's folder: a traceback, exit 1."""
    from src.launch.node_job import main as node_job_main

    with pytest.raises(SystemExit) as done:
        node_job_main(["--help"])
    assert done.value.code == cli.OK
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m src.launch.node_job [-h] folder") and cli.EPILOG in out
    with pytest.raises(SystemExit) as done:  # a folder without a job: one line, not a traceback
        node_job_main([str(tmp_path)])
    assert done.value.code == cli.USAGE
    assert capsys.readouterr().err.strip().splitlines() == [
        f"config error: {tmp_path}: no job.pkl there (the node launcher writes it before starting the workers) "
        "(python -m src.launch.node_job --help lists the options)"
    ]


@pytest.mark.parametrize(("argv", "prog"), [(["--bogus-opt"], "python -m src.bench"), (["variants", "--bogus-opt"], "python -m src.bench variants")])
def test_the_benchs_unknown_option_is_named_before_a_missing_command(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `python -m src.bench --bogus-opt` said `the following arguments are required: command`."""
    from src.bench.__main__ import main as bench_main

    with pytest.raises(SystemExit) as done:
        bench_main(argv)
    assert done.value.code == cli.USAGE
    line = f"config error: unrecognized arguments: --bogus-opt ({prog} --help lists the options)"
    assert capsys.readouterr().err.strip().splitlines() == [line]


@pytest.mark.slow  # a fresh interpreter: what the command imports
def test_the_overhead_bench_imports_no_torch_of_its_own() -> None:
    """Before: `python -m src.bench overhead` imported torch (and every benchmark) before it started
    timing its subprocesses. Its own process now parses, checks and starts them without torch."""
    probe = (
        "import sys; from src.bench.__main__ import build_parser; "
        "build_parser(['overhead'])[0].parse_known_args(['overhead']); import src.bench.overhead; "
        "print(sorted(m for m in ('torch', 'lightning', 'mlflow') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
