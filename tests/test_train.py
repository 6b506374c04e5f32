"""Real training runs: Lightning fit + test on the bundled corpus, tracked in a real MLflow store."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from helpers import REPO, run_cli, run_train, unwrapped
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError, compose, preset_norms
from src.core.process_group import stop_group
from src.core.progress import STEPS
from src.core.terminal import WIDTH
from src.tracking.summary import SUMMARY_STEP
from src.tracking.sweep import SWEEP_TAG
from src.tracking.tags import BENCH_TAG
from src.tracking.team_server import SERVER_ENV
from src.train import train
from src.training.lit_module import GPTLitModule

NORMS = preset_norms("norm_sweep")  # the study's five, as conf/experiment/norm_sweep.yaml lists them
FINAL_METRICS = {"train_time_s", "avg_tokens_per_sec", "peak_memory_mb", "n_params", "test_loss", "final_train_loss"}


def _runs(uri: str, experiment: str) -> list:
    """The training runs of an experiment (not the sweep's run, not the end-of-sweep speed check's)."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = [] if exp is None else client.search_runs([exp.experiment_id])
    return [r for r in runs if r.data.tags.get(SWEEP_TAG) != "true" and BENCH_TAG not in r.data.tags]


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_fit_and_test_every_norm(norm: str, tiny_overrides: list[str], store: dict[str, str]) -> None:
    cfg = compose([*tiny_overrides, f"norm={norm}", "experiment_name=per_norm", "logger.system_metrics_s=1"])
    result = train(cfg)

    (run,) = _runs(store["uri"], "per_norm")
    assert run.info.status == "FINISHED" and run.info.run_name == f"{norm}-s0"
    assert run.info.run_id == result.run_id
    assert run.data.tags["outcome"] == "finished" and run.data.tags["norm"] == norm
    assert {"model", "precision", "cluster", "git_commit"} <= set(run.data.tags)
    m = run.data.metrics
    assert set(m) >= FINAL_METRICS
    assert "system/cpu_utilization_percentage" in m  # MLflow's system metrics, sampled every second here
    assert m["avg_tokens_per_sec"] > 0 and m["train_time_s"] > 0
    assert m["test_loss"] == pytest.approx(result.test_loss) and 0 < m["test_loss"] < 20
    assert m["avg_tokens_per_sec"] == pytest.approx(4 * 4 * 32 / m["train_time_s"])  # steps x batch x T / time
    p = run.data.params
    assert p["norm.norm_type"] == norm and p["optim.lr"] == "0.001" and int(p["n_params"]) == int(m["n_params"])
    client = MlflowClient(store["uri"])
    history = client.get_metric_history(run.info.run_id, "train/train_loss")
    assert [h.step for h in history] == [1, 2, 3, 4]  # one point per optimizer step, no duplicates
    assert [h.step for h in client.get_metric_history(run.info.run_id, "val/val_loss")] == [2, 4]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "config")}
    assert artifacts == {"config/config.yaml", "config/machine_paths.yaml", "config/overrides.txt"}
    # The headline numbers are one value each (the UI draws them as bars), not a point on the step axis.
    assert [h.step for h in client.get_metric_history(run.info.run_id, "test_loss")] == [SUMMARY_STEP]
    # The config another machine can reuse has none of this machine's paths; they are kept apart.
    portable = Path(client.download_artifacts(run.info.run_id, "config/config.yaml")).read_text()
    assert "cache_dir" not in portable and store["db"] not in portable and "paths:" not in portable
    machine = Path(client.download_artifacts(run.info.run_id, "config/machine_paths.yaml")).read_text()
    assert store["db"] in machine
    # What it read: one dataset input per split, with the token count of each.
    inputs = {d.tags[0].value: d.dataset for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "val", "test"}
    assert all(json.loads(d.profile)["num_tokens"] > 0 and len(d.digest) == 12 for d in inputs.values())


@pytest.mark.slow
def test_loss_falls(tiny_overrides: list[str], store: dict[str, str]) -> None:
    cfg = compose([*tiny_overrides, "optim.max_steps=30", "optim.lr=3e-3", "logger=none"])
    result = train(cfg)
    assert result.run_id is None  # logger=none records nothing
    # From the study's init (the default) this tiny model falls ~0.9 nats in 30 steps (1.6 from GPT-2's).
    assert result.final_train_loss < result.first_train_loss - 0.5


@pytest.mark.slow
def test_train_time_ends_with_the_fit(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    """The training clock stops when the fit ends: the end-state checkpoint (saved after the fit, before
    the test) and the result carry the same training time, and MLflow the result's. Before: the result
    was taken after the test, whose seconds counted as training (7 s instead of 1 s for a tiny run)."""
    ckpt = tmp_path / "ckpt"
    result = train(compose([*tiny_overrides, "checkpoint.enabled=true", f"checkpoint.dir={ckpt}"]))
    state = torch.load(ckpt / "last.ckpt", weights_only=True)["callbacks"]["RunTracking"]
    assert state["train_time_s"] == result.train_time_s
    run = MlflowClient(store["uri"]).get_run(result.run_id)
    assert run.data.metrics["train_time_s"] == pytest.approx(result.train_time_s)


@pytest.mark.slow
def test_failed_run_is_marked_failed(
    tiny_overrides: list[str], store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault injected at the second training step: the run was open and had logged a step.
    original = GPTLitModule.training_step

    def failing_step(self: GPTLitModule, batch: object, batch_idx: int) -> object:
        if batch_idx == 1:
            raise RuntimeError("injected failure")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(GPTLitModule, "training_step", failing_step)
    cfg = compose([*tiny_overrides, "experiment_name=crash"])
    with pytest.raises(RuntimeError, match="injected failure"):
        train(cfg)
    (run,) = _runs(store["uri"], "crash")
    assert run.info.status == "FAILED" and run.data.tags["outcome"] == "failed"
    # What was recorded before the failure is kept.
    assert len(MlflowClient(store["uri"]).get_metric_history(run.info.run_id, "train/train_loss")) == 1


@pytest.mark.slow
def test_multirun_all_norms_one_experiment(tiny_overrides: list[str], store: dict[str, str]) -> None:
    proc = run_cli("src.train", "-m", "norm=" + ",".join(NORMS), "experiment_name=sweep", *tiny_overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(store["uri"], "sweep")
    assert sorted(r.info.run_name for r in runs) == sorted(f"{n}-s0" for n in NORMS)
    assert all(r.info.status == "FINISHED" for r in runs)
    assert sorted(r.data.tags["hydra_job_num"] for r in runs) == ["0", "1", "2", "3", "4"]
    assert proc.stdout.count("| mlflow run ") == 5  # one result line per job
    assert proc.stdout.count("[normsweep] sweep run ") == 1
    # The end-of-sweep report lists every variant.
    report = proc.stdout[proc.stdout.rindex("| mlflow run ") :]  # after the last job's line
    assert all(n in report for n in NORMS)


@pytest.mark.slow
def test_experiment_config_runs_the_sweep(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    # The experiment's five norms at two seeds, its own end-of-sweep speed check shortened to two rounds.
    proc = run_cli(
        "src.train", "-m", "experiment=norm_sweep", "seed=0,1", "optim.max_steps=1", "report.speed_rounds=2",
        "report.speed_kernel_s=1", "report.share_rounds=0", *tiny_overrides,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_runs(store["uri"], "norm_sweep")) == 10
    assert max(map(len, proc.stdout.splitlines())) <= WIDTH  # it fits a terminal; read below with wrapped lines joined
    proc.stdout = unwrapped(proc.stdout)
    assert "predicted from the norms' own cost" in proc.stdout
    # The check's progress comes through as it measures (its last round always says so).
    assert f"[normsweep] speed: {STEPS} round 2/2, " in proc.stdout
    # ...and ends with the published study's claims (judged in src/report/judge/study.py, written in src/report/words/study.py): a tiny fp32 model on a
    # CPU is outside every claim's domain, and each line says why and still gives this sweep's figure.
    out = proc.stdout
    section = out[out.index("Against the published study — ") : out.index("report written to")]
    assert out.index("Kernels that ran") < out.index("Against the published study")
    claims = {line.split(".", 1)[0]: line for line in section.splitlines() if line[:2] in {f"{n}." for n in range(1, 8)}}
    assert sorted(claims) == ["1", "2", "3", "4", "5", "6", "7"]
    # The setting's difference is said once, above the claims; each claim names which of its facts.
    setting = next(line for line in section.splitlines() if line.startswith("Outside the study's domain here: "))
    assert "CPU run: the study's figure comes from its CUDA kernels" in setting
    assert "tokens per parameter, below the study's 20 / 2" in setting and "not within 2× of the study's 163,009,536" in setting
    for n in "123456":
        assert claims[n].startswith(f"{n}. not applicable here — ") and "→ outside its domain: " in claims[n], claims[n]
    for n in "1237":
        assert "→ outside its domain: CPU run" in claims[n] and re.search(r"\(speed check, \d+ kernel rounds\)", claims[n])
    for n in "45":
        assert "(paired over 2 seeds" in claims[n] and "tokens per parameter" in claims[n]  # ", every seed alike: no interval)" if no spread
    assert "This sweep cannot settle it" in section and "In fp32 the hand-rolled and built-in norms compute the same function" in section
    assert "2/2 runs finished" in claims["6"]
    assert (tmp_path / "reports" / "norm_sweep" / "claims.png").is_file()  # the forest plot, from the real sweep (tiny_overrides' reports_dir)


@pytest.mark.slow
def test_multi_device_job_inside_multirun_is_refused(tiny_overrides: list[str], store: dict[str, str]) -> None:
    # Lightning's DDP launcher would re-run `-m ...` in every rank: each would restart the sweep.
    # A process of its own: the sweep's run opens before the job refuses, and is closed as its process ends.
    proc = run_cli("src.train", "-m", "cluster.devices=2", "cluster.strategy=ddp", *tiny_overrides)
    assert proc.returncode != 0
    assert "inside a multirun" in proc.stderr and "torchrun" in proc.stderr
    assert not _runs(store["uri"], "normsweep")


@pytest.mark.fresh_store  # asserts that no store file is written
def test_unknown_norm_lists_options_and_records_nothing(tiny_overrides: list[str], store: dict[str, str]) -> None:
    # In this process: test_cli's test_train_refused_by_hydra_is_status_2 runs this refusal as a process.
    proc = run_train("norm=foo", *tiny_overrides)
    assert proc.returncode != 0
    for norm in NORMS:
        assert norm in proc.stderr
    assert not Path(store["db"]).exists()


@pytest.mark.parametrize(
    "override,field",
    [
        ("optim.lr=-1e-3", "optim.lr"),
        ("seq_len=64", "seq_len"),
        ("norm.eps=-1", "eps"),
        ("data=text_files data.paths=/nonexistent/*.txt", "data.paths"),
        ("data.num_workers=-1", "data.num_workers"),  # was: the DataLoader's ValueError, the run recorded FAILED
        ("data.test_offset=-1", "data.test_offset"),
        ("data.order=in_order optim.max_steps=100000", "data.order=in_order"),  # the split read once holds fewer windows
        ("paths.cache_dir=/proc/normsweep", "data.cache_dir"),  # was: FileNotFoundError from mkdir, exit 1
        ("paths.mlflow_artifacts=/proc/normsweep", "logger.artifact_location"),  # was: likewise
    ],
)
@pytest.mark.fresh_store  # asserts that no store file is written
def test_invalid_value_fails_before_training(
    override: str, field: str, tiny_overrides: list[str], store: dict[str, str]
) -> None:
    with pytest.raises(ConfigError, match=field):
        train(compose([*tiny_overrides, *override.split()]))
    assert not Path(store["db"]).exists()  # nothing recorded


@pytest.mark.fresh_store  # asserts that no store file is written
@pytest.mark.slow  # a CLI in a subprocess: a fresh interpreter imports torch, Lightning, Hydra and MLflow
def test_invalid_value_on_the_command_line_is_one_line(tiny_overrides: list[str], store: dict[str, str]) -> None:
    # The command line turns every ConfigError above into the same single line (one process is enough).
    proc = run_cli("src.train", "optim.lr=-1e-3", *tiny_overrides)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "config error: optim.lr: must be > 0, got -0.001"
    assert "Epoch" not in proc.stderr + proc.stdout
    assert not Path(store["db"]).exists()  # nothing recorded


@pytest.mark.slow  # a CLI in a subprocess
def test_a_run_that_checkpoints_says_its_one_line_and_nothing_else(tiny_overrides: list[str], tmp_path: Path) -> None:
    """Without the progress bar, the console holds the run's summary line alone (MLflow's lines as it
    creates a new store aside): the checkpoints written, the test and the close add nothing."""
    ck = tmp_path / "ck"
    proc = run_cli("src.train", *tiny_overrides, "progress_bar=false", "checkpoint.enabled=true",
                   "checkpoint.every_n_steps=2", f"checkpoint.dir={ck}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = unwrapped(proc.stdout + proc.stderr)  # a line wrapped to fit a terminal is read whole
    lines = [ln for ln in said.splitlines() if ln.strip() and " INFO mlflow.store.db.utils: " not in ln]
    # The summary, and the run's id on a line of its own (src.tracking.record.RunResult.line).
    assert len(lines) == 2 and lines[0].startswith("[normsweep] torch_layernorm-s0 ok | train "), lines
    assert re.fullmatch(r"  \| mlflow run [0-9a-f]{32}", lines[1]), lines
    assert (ck / "last.ckpt").is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_mlflow_server_lists_the_run(tiny_overrides: list[str], store: dict[str, str]) -> None:
    """What a user browsing `make ui` sees: the real server, over its REST API."""
    cfg = compose([*tiny_overrides, "norm=hand_rmsnorm", "experiment_name=ui"])
    result = train(cfg)
    port = _free_port()
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    # One worker and no job runner, as `make ui` serves (src/ui.py): MLflow's defaults (four workers, eight
    # job-runner processes) cost ~15 s of CPU on two cores and change nothing that the API answers.
    server = subprocess.Popen(
        [str(mlflow_bin), "server", "--backend-store-uri", store["uri"], "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=REPO,
        env={**os.environ, **SERVER_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the server and its workers, stopped together
    )
    base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
    try:
        for _ in range(120):
            try:
                exp = _get(f"{base}/experiments/get-by-name?experiment_name=ui")["experiment"]
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not answer within 60 s")
        runs = _get(f"{base}/runs/search", {"experiment_ids": [exp["experiment_id"]]})["runs"]
        assert [r["info"]["run_id"] for r in runs] == [result.run_id]
        assert runs[0]["info"]["run_name"] == "hand_rmsnorm-s0" and runs[0]["info"]["status"] == "FINISHED"
        metrics = {m["key"]: m["value"] for m in runs[0]["data"]["metrics"]}
        assert metrics["test_loss"] == pytest.approx(result.test_loss)
    finally:
        stop_group(server)


@pytest.mark.parametrize(
    "override,message",
    [
        ("precision=fp16_mixed", "needs a CUDA GPU"),
        ("cluster=gpu", "no CUDA device is visible"),
        ("cluster.strategy=ddp_spawn", "cluster.strategy"),
    ],
)
@pytest.mark.fresh_store  # asserts that no store file is written
def test_device_and_precision_errors_before_training(
    override: str, message: str, tiny_overrides: list[str], store: dict[str, str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only refusals")
    cfg = compose([*tiny_overrides, override])
    with pytest.raises(ConfigError, match=message):
        train(cfg)
    assert not Path(store["db"]).exists()  # refused before any run was opened


@pytest.mark.slow
def test_compile_trains_the_same_model(tiny_overrides: list[str], store: dict[str, str]) -> None:
    """compile=true: regional torch.compile, same losses, first (compiling) step reported apart."""
    results = {}
    for compiled in (False, True):
        cfg = compose([*tiny_overrides, f"compile={compiled}", f"experiment_name=compile_{compiled}"])
        results[compiled] = train(cfg)
    assert results[True].final_train_loss == pytest.approx(results[False].final_train_loss, rel=1e-4)
    assert results[True].test_loss == pytest.approx(results[False].test_loss, rel=1e-4)
    (run,) = _runs(store["uri"], "compile_True")
    m = run.data.metrics
    assert run.data.params["compile"] == "True"
    assert 0 < m["first_step_s"] < m["train_time_s"]
    # The steady rate leaves the compiling first step out: the other steps' tokens over the other steps' time
    # (which of the two rates is higher is the machine's business, not a correctness fact).
    tokens_per_step = float(run.data.params["budget.tokens_per_step"])
    steady = (m["steps_done"] - 1) * tokens_per_step / (m["train_time_s"] - m["first_step_s"])
    assert m["avg_tokens_per_sec_after_first_step"] == pytest.approx(steady, rel=1e-6)
    assert m["avg_tokens_per_sec"] == pytest.approx(m["steps_done"] * tokens_per_step / m["train_time_s"], rel=1e-6)
