"""The sequential sweeper: its config, its bad input, the planner, and a real sweep that settles."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import REPO, cli_env, run_train, unwrapped
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError, compose, preset_norms
from src.report.__main__ import main as report_main
from src.report.commands.plan import forecast, pilot_hours, plan_text
from src.report.judge.pairs import Margins
from src.report.read.runs import ReportError
from src.stats.sequential import Design, look_at
from src.stats.settings import check_settings
from src.tracking.looks import read_looks
from src.tracking.store import Store
from src.tracking.sweep import SWEEP_TAG

TARGET = "hydra_plugins.normsweep_sweepers.sequential.SequentialSweeper"


def test_the_sweeper_composes_with_the_basic_and_the_joblib_launchers() -> None:
    for extra, launcher in (([], "BasicLauncher"), (["cluster=cpu_pool"], "PoolLauncher")):
        cfg = compose(["experiment=norm_sweep_settle", *extra], with_hydra=True)
        assert cfg.hydra.sweeper._target_ == TARGET
        assert cfg.hydra.launcher._target_.endswith(launcher)
        assert cfg.hydra.sweeper.params.norm.split(",") == preset_norms("norm_sweep")  # the study's five


def test_hydra_finds_the_sweeper_class() -> None:
    # Hydra instantiates a sweeper only from a plugin it scanned under hydra_plugins.
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    cls = Plugins.instance().class_name_to_class[TARGET]
    assert issubclass(cls, Sweeper)


@pytest.mark.parametrize(
    "settings,field",
    [
        ((1, 2, 6, 0.05, ["test_loss"], "pocock", 0.1), "first_seeds"),
        ((3, 0, 6, 0.05, ["test_loss"], "pocock", 0.1), "seeds_per_round"),
        ((3, 2, 2, 0.05, ["test_loss"], "pocock", 0.1), "max_seeds"),
        ((3, 2, 6, 1.5, ["test_loss"], "pocock", 0.1), "alpha"),
        ((3, 2, 6, 0.05, ["val_loss"], "pocock", 0.1), "metrics"),
        ((3, 2, 6, 0.05, ["test_loss"], "haybittle", 0.1), "spending"),
        ((3, 2, 6, 0.05, ["test_loss"], "pocock", 1.0), "futility"),
    ],
)
def test_bad_settings_name_the_field(settings: tuple, field: str) -> None:
    with pytest.raises(ConfigError, match=f"hydra.sweeper.{field}") as err:
        check_settings(*settings)
    if field == "spending":  # the valid choices are named
        assert str(err.value) == "hydra.sweeper.spending: 'haybittle' not allowed; valid choices: pocock, obrien_fleming"


def test_a_bad_spending_for_the_plan_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main(["--plan", "--experiment-name", "x", "hydra.sweeper.spending=linear"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "config error: hydra.sweeper.spending: 'linear' not allowed; valid choices: pocock, obrien_fleming"


def test_bad_setting_on_the_command_line_is_one_line(tiny_overrides: list[str], store: dict[str, str]) -> None:
    args = ["-m", "norm=hand_layernorm,torch_layernorm", "hydra/sweeper=sequential", "hydra.sweeper.max_seeds=2"]
    proc = run_train(*args, *tiny_overrides)  # the entry point in this process: the refusal is the point, not the process
    assert proc.returncode != 0 and "HYDRA_FULL_ERROR" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "config error: hydra.sweeper.max_seeds: must be an integer >= 3, got 2"
    assert not any(MlflowClient(store["uri"]).search_runs([e.experiment_id for e in MlflowClient(store["uri"]).search_experiments()]))


def _pilot(pairs: dict[str, tuple[float, float]], seeds: int, seconds: float = 36.0) -> pd.DataFrame:
    """Runs of hand_layernorm (the reference) and the given variants: (mean difference, spread)."""
    rng = np.random.default_rng(11)
    base = 5.0 + 0.05 * rng.standard_normal(seeds)
    rows = [("hand_layernorm", "layernorm", s, base[s]) for s in range(seeds)]
    for variant, (delta, sd) in pairs.items():
        family = "rmsnorm" if "rms" in variant else "layernorm"
        rows += [(variant, family, s, base[s] + delta + sd * rng.standard_normal()) for s in range(seeds)]
    frame = pd.DataFrame(rows, columns=["variant", "family", "seed", "test_loss"])
    return frame.assign(outcome="finished", train_time_s=seconds, devices=2.0, lr=1e-3)


def test_the_plan_forecasts_each_design_from_a_pilot() -> None:
    runs = _pilot({"torch_layernorm": (0.0, 1e-5), "hand_rmsnorm": (0.008, 0.02)}, seeds=4)
    design = Design(3, 2, 10, 0.05, "obrien_fleming", 0.1)
    hours = pilot_hours(runs, ["hand_layernorm", "torch_layernorm", "hand_rmsnorm"])
    plan = forecast(runs, Margins(), design, hours, sweeps=2000)
    out = {(f.spending, f.pair): f for f in plan.forecasts}
    assert {s for s, _ in out} == {"pocock", "obrien_fleming"}
    for spending in ("pocock", "obrien_fleming"):
        easy, hard = out[(spending, "torch_layernorm vs hand_layernorm")], out[(spending, "hand_rmsnorm vs hand_layernorm")]
        assert easy.verdicts["equivalent"] > 0.99 and easy.mean_seeds == 3  # decided at the first look
        assert math.isclose(sum(hard.verdicts.values()), 1) and hard.verdicts["undecidable"] > 0.3  # 10 seeds cannot settle it
        assert hard.p90_seeds >= hard.mean_seeds and hard.mean_seeds < 10  # futility stops it before max_seeds
        # 36 s x 2 devices = 0.02 device-hours per seed of each variant, two variants per comparison.
        assert math.isclose(easy.device_hours, 3 * 0.04)
        # The sweep counts hand_layernorm once: at most 10 seeds of three variants.
        assert plan.totals[spending][0] <= 10 * 3 * 0.02 and plan.totals[spending][1] >= plan.totals[spending][0]
    text = plan_text("pilot", plan, Margins())
    assert "P(undecidable)" in text and "hydra/sweeper=sequential" in text and "hydra.sweeper.spending=" in text
    assert "norm=hand_layernorm,hand_rmsnorm,torch_layernorm" in text
    assert "by 2,000 simulated sequential sweeps" in text  # the count this plan ran, not the default's 4,000


def test_a_one_seed_pilot_supports_no_plan() -> None:
    """A pilot of one seed has no spread: refused with the seeds it needs (was: a table of "-" and a
    recommended design and command)."""
    runs = _pilot({"torch_layernorm": (0.0, 1e-5)}, seeds=1)
    with pytest.raises(ReportError) as refused:
        forecast(runs, Margins(), Design(3, 2, 10, 0.05, "obrien_fleming", 0.1), {}, sweeps=200)
    assert str(refused.value) == (
        "the pilot cannot support a plan: a forecast needs >= 2 seeds with both variants of a pair finished (the "
        "spread of their per-seed differences), and it has torch_layernorm vs hand_layernorm: 1; add seeds to the "
        "pilot (seed=0,1 with its other overrides; finished seeds are skipped), then plan again"
    )


def _launch(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The sweep in its own process group, its output in a file (a pipe left unread could fill and stall it)."""
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "src.train", *args], cwd=REPO, env=cli_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _finish(proc: subprocess.Popen[bytes], log: Path) -> str:
    proc.wait(timeout=900)
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    return unwrapped(out)  # each sentence one line, however the terminal report wrapped it


def _kill_during(proc: subprocess.Popen[bytes], log: Path, client: MlflowClient, experiment: str, run_name: str) -> str:
    """SIGKILL the whole sweep once the job `run_name` has logged step 3 (its step-2 checkpoint is on disk)."""
    deadline = time.time() + 600
    while time.time() < deadline:
        assert proc.poll() is None, "the sweep ended before the kill: " + log.read_text()[-3000:]
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}'") if exp else []
        if runs and any(m.step >= 3 for m in client.get_metric_history(runs[0].info.run_id, "train/train_loss")):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=120)
            return log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{run_name} never reached step 3")


@pytest.mark.slow
def test_a_killed_round_is_resumed_and_decides_as_an_uninterrupted_sweep(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 2 is SIGKILLed mid-way; the identical command keeps look 1, trains only the killed job
    (resuming it), and decides what the rule decides on those seeds' results; the report shows seeds
    per verdict. Two seeds at alpha 0.001 keep LayerNorm vs RMSNorm open after look 1 (t with one
    degree of freedom); hand-rolled vs built-in LayerNorm (equal up to float rounding) settles there
    (Pocock-type spending gives look 1 enough of alpha for that)."""
    experiment = "norm_sweep_settle"
    args = ["-m", *tiny_overrides, f"experiment={experiment}", "norm=hand_layernorm,torch_layernorm,hand_rmsnorm",
            "hydra.sweeper.first_seeds=2", "hydra.sweeper.seeds_per_round=1", "hydra.sweeper.max_seeds=3",
            "hydra.sweeper.alpha=0.001", "hydra.sweeper.spending=pocock", "hydra.sweeper.futility=0", "optim.max_steps=8", "checkpoint.every_n_steps=2",
            # GPT-2's init: the two LayerNorms differ by float rounding (from PyTorch's defaults they agree
            # to the last bit on some machines); a tie and rounding noise read alike (equivalent).
            "model.init=gpt2"]  # fmt: skip
    client = MlflowClient(store["uri"])
    log = tmp_path / "sweep.log"
    killed = _kill_during(_launch(args, log), log, client, experiment, "hand_rmsnorm-s2")
    assert "look 2: launching 2 job(s): hand_layernorm-s2, hand_rmsnorm-s2" in killed, killed[-3000:]
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    (parent,) = [r for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) == "true"]
    store_ = Store.connect(store["uri"])
    (look_1,) = read_looks(store_, parent.info.run_id)  # filed before the kill
    eq = "torch_layernorm vs hand_layernorm (test_loss)"
    assert {r["comparison"]: r["decision"] for r in look_1["comparisons"]}[eq] == "equivalent"

    out = _finish(_launch(args, log), log)
    assert "look 1: every seed below 2 of hand_layernorm, hand_rmsnorm, torch_layernorm already has a result" in out
    assert "look 2: launching 1 job(s): hand_rmsnorm-s2" in out and "resuming from its checkpoint" in out
    assert f"{eq}: equivalent within ±0.01 at look 1 with 2 seeds per variant" in out

    def training_runs() -> list[str]:
        return sorted(r.info.run_name for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) != "true")

    expected = sorted([*(f"{v}-s{s}" for v in ("hand_layernorm", "torch_layernorm", "hand_rmsnorm") for s in (0, 1)),
                       "hand_layernorm-s2", "hand_rmsnorm-s2"])  # fmt: skip
    assert training_runs() == expected  # no seed trained twice: one run each, the killed one resumed in place
    (same,) = [r for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) == "true"]
    assert same.info.run_id == parent.info.run_id
    looks = read_looks(store_, parent.info.run_id)
    assert [x["seeds"] for x in looks] == [2, 3] and looks[0] == look_1  # the look taken before the kill, kept

    # An uninterrupted sweep decides as the rule does on these seeds' results: replay it.
    loss = {r.info.run_name: r.data.metrics["test_loss"] for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) != "true"}
    design = Design(2, 1, 3, 0.001, "pocock", 0.0, family=2)
    replayed: dict[str, tuple[str, int]] = {}
    for k, n in enumerate(design.looks()):
        for a, b in (("hand_layernorm", "torch_layernorm"), ("hand_layernorm", "hand_rmsnorm")):
            name = f"{b} vs {a} (test_loss)"
            if replayed.get(name, ("undecided",))[0] == "undecided":
                d = [loss[f"{b}-s{s}"] - loss[f"{a}-s{s}"] for s in range(n)]
                replayed[name] = (look_at(design, k, np.array(d), 0.01).decision, k + 1)
    filed = {r["comparison"]: (r["decision"], r["decided_at_look"] or 2) for r in looks[-1]["comparisons"]}
    assert filed == replayed

    # GPT-2's init is not the study's code: claim 5 says so by name (how a claim reads a sequential
    # decision at the study's setting is tested from recorded looks in test_against_study).
    from src.report.analysis import analyze
    from src.report.words.study import claim_reason

    claim_5 = next(c for c in analyze(experiment, store["uri"]).study.claims if c.claim.number == 5)
    assert "hand_layernorm has model.init=gpt2 (the study model.init=study)" in claim_reason(claim_5), claim_reason(claim_5)

    # Seeds per verdict in the report the sweep ended with: terminal, report.md, comparisons.csv.
    assert "Seeds per verdict" in out and f"{eq}: equivalent at look 1, 2 seeds per variant, level spent" in out
    report_dir = tmp_path / "reports" / experiment
    assert "## Seeds per verdict" in (report_dir / "report.md").read_text()
    csv = pd.read_csv(report_dir / "comparisons.csv")
    row = csv[(csv.pair == "torch_layernorm vs hand_layernorm") & (csv.metric == "test_loss")].iloc[0]
    assert (row.sequential_verdict, row.decided_at_look, row.seeds_used) == ("equivalent", 1, 2)
    assert math.isclose(row.level_spent, looks[0]["comparisons"][0]["spent"])
    # ...and on the sweep run, whose comparisons table carries the same columns.
    table = json.loads(store_.read_text(parent.info.run_id, "report/comparisons.json"))
    assert "sequential_verdict" in table["columns"]

    capsys.readouterr()
    assert report_main(["--plan", "--experiment-name", experiment, *tiny_overrides]) == 0
    assert "P(undecidable)" in capsys.readouterr().out

    out = _finish(_launch(args, log), log)
    assert "launching" not in out, out[-3000:]
    assert training_runs() == expected


def test_the_job_list_is_the_first_round_and_seed_lists_are_refused() -> None:
    from omegaconf import OmegaConf

    from src.launch.sequential import first_round_overrides

    cfg = compose(["experiment=norm_sweep_settle"], with_hydra=True)
    assert first_round_overrides(cfg) == ["seed=0,1,2"]
    assert (
        first_round_overrides(compose(["experiment=norm_sweep_seeds"], with_hydra=True)) == []
    )  # basic sweeper
    OmegaConf.update(cfg, "hydra.sweeper.params.seed", "0,1", force_add=True)
    with pytest.raises(ConfigError, match="seed: the sequential sweeper chooses the seeds"):
        first_round_overrides(cfg)


def test_an_open_comparisons_chance_is_a_lower_bound_in_whole_percent() -> None:
    """A chance of 0.9996 printed "a later look decides with probability ≥ 100%"."""
    from src.launch.sequential import Comparison, describe

    c = Comparison("a", "b", "test_loss", 0.01)
    c.last = {"n": 2, "diff": 0.001, "low": -0.1, "high": 0.1, "p": 0.5, "tost_p": 0.3, "level": 0.0004, "chance": 0.9996}
    assert "(a later look decides with probability ≥ 99%)" in describe(c), describe(c)
    c.last["chance"] = 0.129
    assert "(a later look decides with probability ≥ 12%)" in describe(c), describe(c)


def test_a_comparison_the_budget_cannot_decide_stops_as_undecidable() -> None:
    """The sweeper's own look on seed results: a difference of half the margin with seed noise twice
    the margin cannot be settled by 6 seeds, and the line says what the budget could detect."""
    from hydra_plugins.normsweep_sweepers.sequential import SequentialSweeper
    from src.launch.sequential import Comparison, describe

    sweeper = SequentialSweeper(3, 2, 6, 0.05, ["test_loss"], "obrien_fleming", 0.1)
    design = Design(3, 2, 6, 0.05, "obrien_fleming", 0.1)
    diffs = 0.005 + 0.02 * np.random.default_rng(3).standard_normal(3)
    results = {(v, s): {"test_loss": 5.0 + (diffs[s] if v == "b" else 0.0), "tokens_per_sec": 1.0}
               for v in ("a", "b") for s in range(3)}  # fmt: skip
    c = Comparison("a", "b", "test_loss", 0.01)
    sweeper._decide(c, results, design, 1)
    assert (c.decision, c.look, c.seeds) == ("undecidable", 1, 3) and c.spent == design.spent_by()[0]
    line = describe(c)
    assert line.startswith("b vs a (test_loss): undecidable at this budget at look 1 with 3 seeds per variant")
    assert f"max_seeds=6 detects |Δ| ≥ {c.last['detectable']:.2g}" in line and c.last["chance"] < 0.1
