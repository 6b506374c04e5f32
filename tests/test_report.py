"""The sweep report: numbers straight from MLflow, diverged runs kept, a clear error when empty.

Most tests write runs with MlflowClient following the tracking schema (fast, exact values); the
`tiny_sweep` fixture makes real ones with `python -m src.train -m` in a subprocess, once per session.
"""

from __future__ import annotations

import functools
import html
import math
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import EXPERIMENT, TinySweep, unwrapped
from mlflow.tracking import MlflowClient

from src.core import paths
from src.core.paths import ConfigError
from src.core.terminal import WIDTH
from src.report.__main__ import main as report_main
from src.report.analysis import analyze
from src.report.figures.speed import plot_speed
from src.report.generate import generate_report
from src.report.judge.pairs import PAIRS, Margins, pairs_for
from src.report.judge.stability import by_learning_rate, largest_stable_lr
from src.report.read.published import SETTING, TABLE
from src.report.read.runs import ReportError, SpeedCheck
from src.report.read.settings import ReportSettings, check_pairs
from src.report.read.table import parse_variant, summarize
from src.report.render.sections import table_rows
from src.report.render.terminal import terminal_text
from src.report.words.headline import HEADING as HEADLINE
from src.report.words.pairs import comparisons_frame, section_sentences
from src.report.words.speed import speed_section, step_time_text
from src.report.words.study import claim_line, claim_reason, written
from src.report.words.table import CHECK_SPEED_HEADER, ONE_AFTER_ANOTHER, SEQUENTIAL_SPEED_HEADER
from src.tracking.sweep import SWEEP_TAG
from src.tracking.tags import DEVICE_TAG

# The study's numbers (src/report/read/published.py): one seed per variant, no_norm NaN by step 530.
STUDY = {k: (r.train_time_s, r.tokens_per_sec, r.test_loss) for k, r in TABLE.items() if r.nan_from_step is None}


# --- runs written with MlflowClient --------------------------------------------------------------


@functools.cache
def family_of(norm: str) -> str:
    """The family training would tag the run with: `family` of conf/norm/<norm>.yaml."""
    return str(paths.compose([f"norm={norm}"]).norm.family)


_LAST_START_MS = [0]


def next_start_ms() -> int:
    """A start time later than every run logged before: the latest run of a (variant, seed) is the
    one that counts, so runs logged within one millisecond must still be ordered."""
    _LAST_START_MS[0] = max(int(time.time() * 1000), _LAST_START_MS[0] + 1)
    return _LAST_START_MS[0]


def log_run(
    client: MlflowClient,
    experiment_id: str,
    norm: str,
    seed: int,
    metrics: Mapping[str, float],
    outcome: str | None = "finished",
    lr: float | None = None,
    params: Mapping[str, object] | None = None,
) -> str:
    tags = {"norm": norm, "norm_family": family_of(norm), "seed": str(seed), "model": "cpu_small"}
    if outcome:
        tags["outcome"] = outcome
    run_id = client.create_run(experiment_id, run_name=f"{norm}-s{seed}", tags=tags, start_time=next_start_ms()).info.run_id
    if lr is not None:
        client.log_param(run_id, "optim.lr", lr)
    for key, value in (params or {}).items():
        client.log_param(run_id, key, value)
    for key, value in metrics.items():
        client.log_metric(run_id, key, value, step=int(metrics.get("steps_done", 0)))
    client.set_terminated(run_id, "FINISHED" if outcome == "finished" else "FAILED")
    return run_id


def finished(time_s: float, tokens_per_sec: float, test_loss: float) -> dict[str, float]:
    return {"train_time_s": time_s, "avg_tokens_per_sec": tokens_per_sec, "test_loss": test_loss, "steps_done": 100.0}


@pytest.fixture
def client(migrated_store: dict[str, str]) -> MlflowClient:
    return MlflowClient(migrated_store["uri"])


def test_single_seed_table_matches_the_study(client: MlflowClient, store: dict[str, str], tmp_path: Path) -> None:
    exp = client.create_experiment("study")
    # The study's setting, as a run at it records it: on CUDA, GPT-2 small, 20 tokens per parameter, fp16.
    setting = {"cluster.accelerator": "gpu", "n_params": SETTING.n_params, "budget.total_tokens": SETTING.tokens,
               "precision.name": "fp16_mixed", "precision.matmul_precision": "high"}  # fmt: skip
    for norm, values in STUDY.items():
        client.set_tag(log_run(client, exp, norm, 0, finished(*values), params=setting), DEVICE_TAG, "NVIDIA A100-SXM4-40GB")
    no_norm = {"diverged_at_step": TABLE["no_norm"].nan_from_step, "steps_done": 529.0}
    client.set_tag(log_run(client, exp, "no_norm", 0, no_norm, outcome="diverged", params=setting), DEVICE_TAG, "NVIDIA A100-SXM4-40GB")

    analysis = generate_report(analyze("study", store["uri"]), tmp_path / "out")
    table = analysis.table.set_index("variant")
    for norm, (time_s, tps, loss) in STUDY.items():
        assert table.loc[norm, ["train_time_s", "tokens_per_sec", "test_loss"]].tolist() == [time_s, tps, loss]
        assert math.isnan(table.loc[norm, "tokens_per_sec_ci"])  # one seed: no interval
    assert table.loc["torch_layernorm", "speed_vs_hand"] == pytest.approx(391659 / 348364)
    assert table.loc["torch_rmsnorm", "speed_vs_hand"] == pytest.approx(393294 / 356899)
    assert table.loc["hand_rmsnorm", "test_loss_vs_torch_layernorm"] == pytest.approx(3.601292 - 3.571158)
    assert table.loc["no_norm", "notes"] == "diverged at step 530"
    assert list(table.index) == [*STUDY, "no_norm"]

    text = terminal_text(analysis)
    assert max(map(len, text.splitlines())) <= WIDTH  # it fits a terminal: read it here with its wrapped lines joined
    text = unwrapped(text)
    # The answer at a glance first: at most five lines, each a question's answer and what would sharpen it.
    glance = text.split("\n\n")[1].splitlines()
    assert glance[0] == f"{HEADLINE}:" and 1 < len(glance) <= 6, glance
    speed, loss, real, reproduced = (line.strip() for line in glance[1:])
    assert speed.startswith("Speed: not measured: the jobs, run one after another") and "report.speed_rounds=20" in speed
    # One run each: the lower mean is printed, never called the lowest (no pair could test it).
    assert loss.startswith("Loss: lowest test loss undecided: torch_layernorm 3.5712 (the one seed every variant here finished); against it torch_rmsnorm +0.0012")
    assert "(one run each: no interval)" in loss and loss.endswith("no_norm diverged (1/1 runs, step 530).")
    assert real.startswith("Is it real? One seed per variant") and "make sweep-seeds" in real
    assert reproduced.startswith("Reproduced? 7 of the study's 8 claims tested in this sweep's domain (inconclusive: claims 1, 2, 3")
    # The same lines head report.md, report.html and the sweep run's description.
    # report.html shows a code span as code: its text, read without the tags, is the line without backticks.
    for page, shown in (("report.md", str), ("report.html", lambda line: line.replace("`", ""))):
        text = (tmp_path / "out" / page).read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", text)) if page.endswith(".html") else text
        assert all(shown(line) in text for line in (speed, reproduced)), page
    note = client.get_run(analysis.report_run_id).data.tags["mlflow.note.content"]
    assert note.splitlines()[2:6] == [f"- {line}" for line in (speed, loss, real, reproduced)]
    assert "+12.4%" in text  # nn.LayerNorm vs hand-rolled, the study's headline
    # ...in a column that says what one run per variant, one after another, can support.
    assert SEQUENTIAL_SPEED_HEADER in text
    # One seed: the untested pairs are named in one sentence that says what would settle them.
    untested = [s for s in section_sentences(analysis) if s.startswith("Not tested")]
    assert len(untested) == 1 == len(section_sentences(analysis))
    assert "torch_layernorm vs hand_layernorm" in untested[0] and "experiment=norm_sweep_seeds" in untested[0]
    assert "not tested: 1 seed(s) with both variants finished; needs ≥2" not in text
    comparisons = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    assert set(comparisons.verdict.str.startswith("not tested")) == {True}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| no_norm | 0/1 | — | — | — |" in md and "diverged at step 530" in md
    csv = pd.read_csv(tmp_path / "out" / "table.csv")
    assert csv.set_index("variant").loc["hand_layernorm", "tokens_per_sec"] == 348364.0
    assert {p.name for p in analysis.files} >= {"loss_curves.png", "report.md", "table.csv"}
    assert "speed.png" not in {p.name for p in analysis.files}  # no speed check: speed is not drawn
    # Against the published study, its own numbers give back its figures; one run each settles nothing.
    claims = {c.claim.number: c for c in analysis.study.claims}
    assert "LayerNorm -11.1% training time (one run each" in claim_line(claims[1])  # from its tokens/s: 1 / 1.124 - 1
    assert "built-in +0.0012 nats (one run each)" in claim_line(claims[4])
    # Claim 6 too: the normalized runs stopped at step 100, short of the step 530 where no_norm's loss went NaN.
    assert claim_line(claims[6]).startswith("6. inconclusive — without normalization training diverges.")  # the word first
    assert ("1/1 runs diverged (step 530). → none of the normalized variants' runs counts; left out: the "
            "normalized variants' 4 run(s) that finished before step 530, where no_norm diverged.") in claim_line(claims[6])
    assert claims[1].word == claims[5].word == "inconclusive" and "one run each: a ratio without an interval" in claim_reason(claims[1])
    # The study's table beside the sweep's: its own numbers, row for row.
    assert [row[2:5:2] for row in written(analysis).table[1]][:2] == [["9,358", "348,364"], ["8,324", "391,659"]]
    assert [row[3] for row in written(analysis).table[1]][:1] == ["9,358.0"]


def test_multi_seed_statistics_and_bookkeeping(client: MlflowClient, store: dict[str, str], tmp_path: Path) -> None:
    exp = client.create_experiment("seeds")
    speeds = {"hand_rmsnorm": [100.0, 104.0, 102.0], "fast_rmsnorm": [150.0, 149.0, 152.0]}
    for norm, values in speeds.items():
        for seed, tps in enumerate(values):
            log_run(client, exp, norm, seed, finished(10.0 + seed, tps, 5.0 + seed / 100))
    # An older duplicate of hand_rmsnorm seed 0 (replaced by the later run below), a crashed run
    # without an outcome tag, and a diverged one.
    stale = log_run(client, exp, "hand_rmsnorm", 0, finished(99.0, 1.0, 9.0))
    client.set_tag(stale, "seed", "0")
    log_run(client, exp, "hand_rmsnorm", 0, finished(10.0, 100.0, 5.0))
    log_run(client, exp, "torch_rmsnorm", 0, {"steps_done": 7.0}, outcome=None)
    log_run(client, exp, "torch_rmsnorm", 1, finished(9.0, 120.0, 5.0))

    analysis = analyze("seeds", store["uri"])
    assert analysis.superseded == 2  # the stale run and the first hand_rmsnorm seed-0 run
    table = analysis.table.set_index("variant")
    assert table.loc["hand_rmsnorm", "tokens_per_sec"] == pytest.approx(102.0)
    assert table.loc["hand_rmsnorm", "tokens_per_sec_ci"] == pytest.approx(4.303 * 2.0 / math.sqrt(3), rel=1e-3)
    assert table.loc["fast_rmsnorm", "speed_vs_hand"] == pytest.approx(sum(speeds["fast_rmsnorm"]) / 306.0)
    assert table.loc["torch_rmsnorm", "notes"] == "1/2 failed at step 7"
    assert table.loc["torch_rmsnorm", "finished"] == 1

    # Pairs judge test loss; the jobs' tokens/s (one after another) stays in the table.
    (fast,) = [c for c in analysis.comparisons if c.b == "fast_rmsnorm"]
    assert (fast.a, fast.metric, fast.n_a, fast.n_b, fast.primary.test) == ("hand_rmsnorm", "test_loss", 3, 3, "paired_t")
    # torch_rmsnorm has one finished seed (the other failed): its pairs are untested, the run counted.
    untested = section_sentences(analysis)[-1]
    assert untested.startswith("Not tested") and "torch_rmsnorm vs hand_rmsnorm" in untested
    assert not any(s.startswith("torch_rmsnorm vs hand_rmsnorm") for s in section_sentences(analysis))
    pair = comparisons_frame(analysis).set_index("pair").loc["torch_rmsnorm vs hand_rmsnorm"]
    assert set(pair.verdict) == {"not tested: 1 seed(s) with both variants finished; needs ≥2"}  # the CSV keeps why

    # The report's run is reused by a second report and never read back as a result.
    for _ in range(2):
        generate_report(analyze("seeds", store["uri"]), tmp_path / "out")
    summaries = client.search_runs([exp], filter_string=f"tags.`{SWEEP_TAG}` = 'true'")
    assert len(summaries) == 1 and summaries[0].info.run_name == "report"
    artifacts = {a.path for a in client.list_artifacts(summaries[0].info.run_id, "report")}
    assert {f"report/{f}" for f in ("report.html", "report.md", "table.csv", "loss_curves.png")} <= artifacts
    assert len(analyze("seeds", store["uri"]).runs) == 8


def test_a_later_run_cut_short_does_not_hide_a_result(client: MlflowClient, store: dict[str, str]) -> None:
    """A config run again and stopped (pre-empted, Ctrl+C, a crash) keeps its earlier result in the
    report; a later result replaces it. It was hidden: `no finished runs yet (1 preempted)`."""
    exp = client.create_experiment("again")
    first = log_run(client, exp, "hand_rmsnorm", 0, finished(10.0, 100.0, 5.0))
    log_run(client, exp, "hand_rmsnorm", 0, {"steps_done": 3.0}, outcome="preempted")
    log_run(client, exp, "hand_rmsnorm", 0, {"steps_done": 2.0}, outcome=None)  # died before its outcome tag
    log_run(client, exp, "torch_rmsnorm", 0, finished(9.0, 120.0, 5.1))
    latest = log_run(client, exp, "torch_rmsnorm", 0, finished(9.5, 110.0, 5.2))

    analysis = analyze("again", store["uri"])
    rows = analysis.runs.set_index("variant")
    assert (rows.loc["hand_rmsnorm", "run_id"], rows.loc["hand_rmsnorm", "outcome"]) == (first, "finished")
    assert rows.loc["torch_rmsnorm", "run_id"] == latest
    assert analysis.superseded == 3
    assert "3 other runs of a config run more than once were left out" in terminal_text(analysis)


def test_variant_families_come_from_the_tag() -> None:
    keys = ["no_norm", "torch_rmsnorm", "fast_rmsnorm", "hand_rmsnorm", "torch_layernorm", "hand_layernorm"]
    families = {k: family_of(k) for k in keys}
    assert parse_variant("fast_rmsnorm", families).impl == "fast"
    assert parse_variant("hand_layernorm", families).is_reference
    assert not parse_variant("no_norm", families).is_reference


def test_the_pairs_that_matter() -> None:
    keys = ["no_norm", "torch_rmsnorm", "fast_rmsnorm", "hand_rmsnorm", "torch_layernorm", "hand_layernorm"]
    families = {k: family_of(k) for k in keys}
    assert pairs_for(families) == [
        ("hand_layernorm", "torch_layernorm"),
        ("hand_rmsnorm", "torch_rmsnorm"),
        ("hand_rmsnorm", "fast_rmsnorm"),
        ("torch_layernorm", "torch_rmsnorm"),
        ("hand_layernorm", "hand_rmsnorm"),
        *(("no_norm", k) for k in ["hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "fast_rmsnorm"]),
    ]
    assert ("torch_layernorm", "dyt") in PAIRS and ("dyt", "fast_dyt") in PAIRS
    zoo = {k: family_of(k) for k in ("torch_layernorm", "dyt", "fast_dyt")}
    assert pairs_for(zoo) == [("torch_layernorm", "dyt"), ("dyt", "fast_dyt")]
    assert pairs_for(families, [("torch_layernorm", "hand_layernorm")]) == [
        ("torch_layernorm", "hand_layernorm")
    ]
    known = ["hand_layernorm", "torch_layernorm"]
    with pytest.raises(ConfigError, match=r"unknown variant 'nope' .*valid choices: hand_layernorm, torch_layernorm"):
        check_pairs([["hand_layernorm", "nope"]], known)
    with pytest.raises(ConfigError, match="two variants"):
        check_pairs([["hand_layernorm"]], known)
    for bad in (0, -0.01, "x", True):
        with pytest.raises(ConfigError, match="report.margin.test_loss: must be a number > 0"):
            Margins(test_loss=bad)


def test_zoo_is_grouped_by_family_and_compares_dyt(client: MlflowClient, store: dict[str, str], tmp_path: Path) -> None:
    exp = client.create_experiment("zoo")
    zoo = ["dyt", "fast_dyt", "scalenorm", "torch_layernorm", "layernorm_noaffine", "hand_layernorm", "no_norm"]
    for seed in (0, 1):
        for i, norm in enumerate(zoo):
            log_run(client, exp, norm, seed, finished(10.0 + i, 1000.0 + 10 * i + seed, 6.0 + 0.01 * i - 0.02 * seed))
    analysis = generate_report(analyze("zoo", store["uri"]), tmp_path / "out", log_summary=False)
    table = analysis.table
    assert list(table.variant) == [
        "hand_layernorm", "torch_layernorm", "layernorm_noaffine", "dyt", "fast_dyt", "scalenorm", "no_norm"
    ]  # fmt: skip
    assert list(table.family) == ["layernorm"] * 3 + ["dyt"] * 2 + ["scalenorm", "none"]
    compared = {(c.a, c.b) for c in analysis.comparisons}
    assert {("torch_layernorm", "dyt"), ("dyt", "fast_dyt"), ("torch_layernorm", "scalenorm")} <= compared
    assert "fast_dyt vs dyt (paired over 2 seeds)" in terminal_text(analysis)
    assert "dyt vs torch_layernorm (paired over 2 seeds)" in terminal_text(analysis)
    speed = table.set_index("variant").speed_vs_hand
    assert speed["fast_dyt"] == pytest.approx(1010.5 / 1000.5) and math.isnan(speed["no_norm"])
    assert analysis.stability is None  # one learning rate


def test_learning_rate_sweep_report(client: MlflowClient, store: dict[str, str], tmp_path: Path) -> None:
    exp = client.create_experiment("lr")
    grid = [1e-4, 1e-3, 1e-2]
    for lr in grid:
        log_run(client, exp, "torch_layernorm", 0, finished(1.0, 100.0, 6.5 - lr * 10), lr=lr)
        if lr < 1e-2:
            log_run(client, exp, "no_norm", 0, finished(1.0, 100.0, 6.8), lr=lr)
        else:
            log_run(client, exp, "no_norm", 0, {"diverged_at_step": 23.0, "steps_done": 22.0}, outcome="diverged", lr=lr)
    analysis = generate_report(analyze("lr", store["uri"]), tmp_path / "out", log_summary=False)
    assert len(analysis.runs) == 6  # one run per variant, learning rate and seed: none superseded
    stability = analysis.stability
    assert list(stability.lr[stability.variant == "no_norm"]) == grid
    assert largest_stable_lr(stability) == {"torch_layernorm": 1e-2, "no_norm": 1e-3}
    text = terminal_text(analysis)
    assert "no_norm: largest stable learning rate 1.0e-03; did not finish at 1.0e-02 (step 23)." in text
    assert "torch_layernorm: largest stable learning rate 1.0e-02; stable over the whole grid" in text
    assert (tmp_path / "out" / "stability.png").stat().st_size > 0
    assert "## Learning-rate stability" in (tmp_path / "out" / "report.md").read_text()
    page = (tmp_path / "out" / "report.html").read_text()  # the HTML report says the same
    assert "<h2>Learning-rate stability</h2>" in page and "stable over the whole grid" in page
    # Every section of one page is a section of the other, in the same order (renderers drift apart).
    md_sections = re.findall(r"^## (.+)$", (tmp_path / "out" / "report.md").read_text(), re.M)
    html_sections = [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", page)]
    assert len(md_sections) >= 3 and md_sections == html_sections
    assert by_learning_rate(analysis.runs).equals(stability)


def test_summarize_keeps_all_diverged_variants() -> None:
    runs = pd.DataFrame(
        {
            "variant": ["no_norm", "no_norm", "hand_layernorm"],
            "outcome": ["diverged", "diverged", "finished"],
            "stopped_at_step": [12.0, 30.0, math.nan],
            "train_time_s": [1.0, 2.0, 3.0],
            "tokens_per_sec": [1.0, 2.0, 3.0],
            "test_loss": [math.nan, math.nan, 4.0],
        }
    )
    row = summarize(runs).set_index("variant").loc["no_norm"]
    assert row.notes == "diverged (steps 12, 30)" and row.finished == 0 and math.isnan(row.test_loss)


def test_missing_experiment_is_a_clear_message(
    store: dict[str, str], store_template: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report_main(["--experiment-name", "nope", "--tracking-uri", store["uri"]]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no MLflow database at") and "Traceback" not in err
    shutil.copyfile(store_template, store["db"])  # a store (its schema made), without the experiment
    MlflowClient(store["uri"]).create_experiment("other")
    assert report_main(["--experiment-name", "nope", "--tracking-uri", store["uri"]]) == 1
    assert "MLflow experiment 'nope' not found" in capsys.readouterr().err


def test_no_runs_with_a_result_is_a_clear_message(client: MlflowClient, store: dict[str, str]) -> None:
    exp = client.create_experiment("empty")
    with pytest.raises(ReportError, match=r"has no runs with a result \(no training runs\)"):
        analyze("empty", store["uri"])
    log_run(client, exp, "no_norm", 0, {"steps_done": 3.0}, outcome="failed")
    with pytest.raises(ReportError, match=r"has no runs with a result \(1 failed\)"):  # no "yet": waiting brings none
        analyze("empty", store["uri"])


def test_a_sweep_whose_runs_all_diverged_is_reported(
    client: MlflowClient, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every run diverged: `src.report` exited 1 with "has no finished runs yet (3 diverged)". A
    divergence is a result: each variant is listed as diverged at its step."""
    exp = client.create_experiment("all_diverged")
    steps = {"torch_layernorm": 4, "hand_rmsnorm": 3, "no_norm": 2}
    for norm, step in steps.items():
        log_run(client, exp, norm, 0, {"diverged_at_step": float(step), "steps_done": float(step)}, outcome="diverged")
    assert report_main(["--experiment-name", "all_diverged", "--tracking-uri", store["uri"], "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr()
    assert "yet" not in out.out + out.err, out.out
    rows: dict[str, list[str]] = {}  # a variant's lines: its row in each block of a table split to fit
    for line in out.out.splitlines():
        if line.split() and line.split()[0] in steps:
            rows.setdefault(line.split()[0], []).append(line)
    for norm, step in steps.items():
        assert any(f"diverged at step {step}" in row for row in rows[norm]), out.out
    assert (tmp_path / "out" / "report.md").is_file()


def test_paired_comparisons_by_hand(client: MlflowClient, store: dict[str, str], tmp_path: Path) -> None:
    """A known paired difference, a missing seed, a diverged run and disjoint seed sets, in one sweep."""
    exp = client.create_experiment("paired")
    hand_loss, hand_tps = [6.10, 6.20, 6.00, 6.30], [100.0, 110.0, 90.0, 105.0]
    for seed in range(4):
        log_run(client, exp, "hand_layernorm", seed, finished(10.0, hand_tps[seed], hand_loss[seed]))
    # torch_layernorm: seed 3 missing; loss +0.003, +0.001, +0.002 (mean 0.002, sd 0.001); 10-12% faster.
    for seed, (dl, speedup) in enumerate([(0.003, 1.10), (0.001, 1.12), (0.002, 1.11)]):
        log_run(client, exp, "torch_layernorm", seed, finished(9.0, hand_tps[seed] * speedup, hand_loss[seed] + dl))
    # no_norm: seed 0 diverged; seeds 1 and 2 about 0.3 nats worse.
    log_run(client, exp, "no_norm", 0, {"diverged_at_step": 5.0, "steps_done": 4.0}, outcome="diverged")
    for seed, dl in [(1, 0.31), (2, 0.29)]:
        log_run(client, exp, "no_norm", seed, finished(8.0, hand_tps[seed], hand_loss[seed] + dl))
    # hand_rmsnorm ran seeds 10 and 11 only: no shared seed with hand_layernorm -> Welch.
    for seed, loss in [(10, 6.15), (11, 6.25)]:
        log_run(client, exp, "hand_rmsnorm", seed, finished(10.0, 100.0 + seed, loss))

    analysis = generate_report(analyze("paired", store["uri"], ReportSettings(Margins(test_loss=0.01, speed=0.02))), tmp_path)
    by = {(r.a, r.b, r.metric): r for r in analysis.comparisons}
    loss = by["hand_layernorm", "torch_layernorm", "test_loss"]
    se = 0.001 / math.sqrt(3)
    assert (loss.primary.test, loss.primary.n, loss.left_out) == ("paired_t", 3, 1)  # seed 3 has no partner
    assert loss.primary.diff == pytest.approx(0.002) and loss.primary.se == pytest.approx(se)
    assert loss.primary.high == pytest.approx(0.002 + 4.3027 * se, abs=1e-5)
    assert loss.verdict == "equivalent" and loss.tost_p < 0.05
    assert ("hand_layernorm", "torch_layernorm", "tokens_per_sec") not in by  # speed is the speed check's
    worse = by["no_norm", "hand_layernorm", "test_loss"]  # hand_layernorm vs no_norm: -0.30 nats
    assert (worse.primary.n, worse.left_out, worse.primary.diff) == (2, 3, pytest.approx(-0.30))
    assert worse.verdict in ("different", "inconclusive")
    unpaired = by["hand_layernorm", "hand_rmsnorm", "test_loss"]
    assert unpaired.primary.test == "welch" and unpaired.bootstrap is None

    csv = pd.read_csv(tmp_path / "comparisons.csv")
    assert list(csv.columns) == ["pair", "metric", "test", "n", "diff", "ci_low", "ci_high", "p", "p_holm", "tost_p", "margin", "verdict",
                                 "verdict_level", "verdict_low", "verdict_high"]  # fmt: skip
    row = csv[(csv.pair == "torch_layernorm vs hand_layernorm") & (csv.metric == "test_loss")].set_index("test")
    assert set(row.index) == {"paired_t", "paired_bootstrap"}
    assert row.loc["paired_t", "diff"] == pytest.approx(0.002) and row.loc["paired_t", "margin"] == 0.01
    assert row.loc["paired_t", "verdict"] == "equivalent within ±0.01"
    assert set(csv.test) == {"paired_t", "paired_bootstrap", "welch"}
    family = csv[csv.test != "paired_bootstrap"]
    assert (family.p_holm.dropna() >= family.p.dropna().loc[family.p_holm.dropna().index]).all()
    text = terminal_text(analysis)
    assert "torch_layernorm vs hand_layernorm (paired over 3 seeds, 1 run(s) without a partner left out)" in text
    assert "hand_rmsnorm vs hand_layernorm (unpaired (Welch: seed sets differ), n = 2 vs 4)" in text


def test_an_experiment_name_with_separators_stays_inside_the_reports_folder(
    client: MlflowClient, store: dict[str, str], tmp_path: Path
) -> None:
    """`experiment_name=../../evil`: the MLflow experiment keeps its name, folders get a safe one."""
    from src.launch.report_hook import SweepReport

    evil = "../../evil"
    exp = client.create_experiment(evil)
    for norm, values in list(STUDY.items())[:2]:
        log_run(client, exp, norm, 0, finished(*values))
    reports = tmp_path / "root" / "reports"
    overrides = [f"experiment_name={evil}", f"paths.mlflow_db={store['db']}", f"paths.reports_dir={reports}"]
    assert report_main(["--no-summary-run", *overrides]) == 0  # the command-line report
    SweepReport().on_multirun_end(paths.compose(overrides))  # the one a sweep writes at its end
    (folder,) = reports.iterdir()
    assert folder.name.startswith("evil-") and (folder / "report.md").is_file()
    assert not (tmp_path / "evil").exists()  # <reports_dir>/../../evil, where both wrote before


def test_report_cli_rejects_bad_margins_and_pairs(
    client: MlflowClient, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client.create_experiment("x")
    base = ["--experiment-name", "x", "--tracking-uri", store["uri"], "--out", str(tmp_path), "--no-summary-run"]
    for extra, message in [
        (["--margin-loss", "0"], "report.margin.test_loss: must be a number > 0, got 0.0"),
        (["--margin-speed", "-0.02"], "report.margin.speed: must be a number > 0, got -0.02"),
        (["report.margin.test_loss=-1"], "report.margin.test_loss: must be a number > 0, got -1"),
        (["--pair", "hand_layernorm:nope"], "report.pairs: unknown variant 'nope'"),
        (["--pair", "hand_layernorm:torch_layernorm:x"], "--pair: each is A:B (compare variant B against variant A), got 'hand_layernorm:torch_layernorm:x'"),
    ]:
        assert report_main(base + extra) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


# --- real runs: python -m src.train -m ------------------------------------------------------------

@pytest.mark.slow
def test_multirun_with_diverging_jobs_exits_zero_and_records_all(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    assert tiny_sweep.returncodes == [0, 0], tiny_sweep.outputs[-1][-3000:]
    exp = tiny_client.get_experiment_by_name(EXPERIMENT)
    runs = [r for r in tiny_client.search_runs([exp.experiment_id]) if "norm" in r.data.tags]
    assert sorted(r.info.run_name for r in runs) == sorted(
        f"{n}-s{s}" for n in ("hand_layernorm", "torch_layernorm", "no_norm") for s in (0, 1)
    )


@pytest.mark.slow
def test_diverging_run_stops_within_one_step(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    exp = tiny_client.get_experiment_by_name(EXPERIMENT)
    for run in tiny_client.search_runs([exp.experiment_id], filter_string="tags.norm = 'no_norm'"):
        assert run.info.status == "FAILED" and run.data.tags["outcome"] == "diverged"
        at = run.data.metrics["diverged_at_step"]
        assert "test_loss" not in run.data.metrics
        history = [
            m for key in ("train/train_loss", "train/grad_norm") for m in tiny_client.get_metric_history(run.info.run_id, key)
        ]
        first_bad = min(m.step for m in history if not math.isfinite(m.value))
        assert first_bad <= at <= first_bad + 1
        assert max(m.step for m in history) <= at + 1  # nothing trained after the stop
        assert run.data.metrics["steps_done"] <= at


@pytest.mark.slow
def test_report_matches_mlflow_for_real_runs(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    analysis = analyze(EXPERIMENT, tiny_sweep.uri)
    for row in analysis.runs.itertuples():
        stored = tiny_client.get_run(row.run_id).data.metrics
        assert row.train_time_s == stored["train_time_s"]
        assert row.tokens_per_sec == stored["avg_tokens_per_sec"]
        assert (row.test_loss == stored["test_loss"]) if row.outcome == "finished" else math.isnan(row.test_loss)
    table = analysis.table.set_index("variant")
    for variant in ("hand_layernorm", "torch_layernorm"):
        ids = analysis.runs.loc[analysis.runs.variant == variant, "run_id"]
        losses = [tiny_client.get_run(i).data.metrics["test_loss"] for i in ids]
        assert table.loc[variant, "test_loss"] == pytest.approx(sum(losses) / 2)
        assert table.loc[variant, "finished"] == 2
    assert table.loc["no_norm", "finished"] == 0 and table.loc["no_norm", "notes"].startswith("diverged (steps ")
    assert {c.metric for c in analysis.comparisons} == {"test_loss"}
    curves = analysis.curves
    assert set(curves.metric) == {"train/train_loss", "val/val_loss"} and len(curves.run_id.unique()) == 6


@pytest.mark.slow
def test_one_speed_estimate_per_pair_everywhere(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    """The speed check's estimate of a pair is the one number its verdict, the table's speed column,
    speed.png's data, the study's table and the sweep run's metrics show (no second ranking)."""
    analysis = analyze(EXPERIMENT, tiny_sweep.uri)
    assert analysis.speed_verdicts, analysis.speed.check
    headers, rows = table_rows(analysis)
    cells = {row[0]: row[headers.index(CHECK_SPEED_HEADER)] for row in rows}
    assert all(h.endswith(ONE_AFTER_ANOTHER) for h in headers if h.startswith(("tokens/s", "training time")))
    figure = plot_speed(analysis.speed_verdicts, analysis.margins.speed)
    segments = [line.get_xdata() for line in figure.axes[0].lines if len(line.get_xdata()) == 2]
    exp = tiny_client.get_experiment_by_name(EXPERIMENT).experiment_id
    parent = tiny_client.search_runs([exp], f"tags.`{SWEEP_TAG}` = 'true'", order_by=["attributes.start_time DESC"])[0]
    study_headers, study_rows = written(analysis).table
    study_cells = {row[0]: row[study_headers.index("step time vs hand_layernorm (sweep, speed check)")] for row in study_rows}
    for v in analysis.speed_verdicts:
        shown = step_time_text(v.predicted)
        low, high = (math.expm1(x) for x in (v.predicted.low, v.predicted.high))
        assert f"vs {v.a} {shown}" in cells[v.b]  # the table's speed column
        assert any(s.startswith(f"{v.b} vs {v.a}: ") and f"step time {shown} predicted" in s for s in speed_section(analysis))  # its verdict
        assert any(x == pytest.approx([100 * low, 100 * high]) for x in segments), segments  # speed.png
        key = f"sweep/{v.b}_vs_{v.a}.step_time"
        assert parent.data.metrics[f"{key}.ci_low"] == pytest.approx(low) and parent.data.metrics[f"{key}.ci_high"] == pytest.approx(high)
        if v.a == "hand_layernorm":  # the study's table is relative to the hand-rolled LayerNorm
            assert study_cells[v.b] == shown
    assert not any(".tokens_per_sec." in key for key in parent.data.metrics)  # jobs one after another: no ranking


@pytest.mark.slow
def test_sweep_callback_reports_at_the_end(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    last = tiny_sweep.outputs[-1]
    assert "normsweep report: experiment 'tiny_sweep'" in last and "diverged (steps" in last
    assert "warning: sweep report" not in last
    md = (tiny_sweep.report_dir / "report.md").read_text()
    assert "| no_norm | 0/2 |" in md
    exp = tiny_client.get_experiment_by_name(EXPERIMENT)
    parents = tiny_client.search_runs([exp.experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = 'true'")
    assert len(parents) == 2  # one parent run per multirun, every job nested under its own
    jobs = [r for r in tiny_client.search_runs([exp.experiment_id]) if "norm" in r.data.tags]
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs} == {p.info.run_id for p in parents}
    for parent in parents:
        assert parent.data.tags["outcome"] == "finished" and parent.info.status == "FINISHED"
        files = {a.path for a in tiny_client.list_artifacts(parent.info.run_id, "report")}
        assert {"report/report.html", "report/table.csv", "report/loss_curves.png"} <= files


@pytest.mark.slow
def test_cli_on_real_runs(tiny_sweep: TinySweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--experiment-name", EXPERIMENT, "--tracking-uri", tiny_sweep.uri, "--out", str(tmp_path), "--no-summary-run"]
    assert report_main(args) == 0
    out = capsys.readouterr().out
    assert "hand_layernorm" in out and "torch_layernorm vs hand_layernorm (paired over 2 seeds)" in out
    assert (tmp_path / "table.csv").exists() and (tmp_path / "speed.png").stat().st_size > 0
    # comparisons.csv is computed from MLflow's numbers: the per-seed differences, averaged.
    csv = pd.read_csv(tmp_path / "comparisons.csv").set_index(["pair", "metric", "test"])
    client = MlflowClient(tiny_sweep.uri)
    exp = client.get_experiment_by_name(EXPERIMENT).experiment_id

    def stored(norm: str, seed: int) -> dict[str, float]:
        (run,) = client.search_runs([exp], filter_string=f"tags.norm = '{norm}' and tags.seed = '{seed}'")
        return run.data.metrics

    loss_diffs = [stored("torch_layernorm", s)["test_loss"] - stored("hand_layernorm", s)["test_loss"] for s in (0, 1)]
    pair = "torch_layernorm vs hand_layernorm"
    assert csv.loc[(pair, "test_loss", "paired_t"), "diff"] == pytest.approx(sum(loss_diffs) / 2, abs=1e-12)
    assert set(csv.index.get_level_values("metric")) == {"test_loss"}  # the jobs' tokens/s is not judged pair by pair
    assert csv.loc[(pair, "test_loss", "paired_t"), "n"] == 2
    # Both no_norm runs diverged: no pair with it is reported.
    assert not [p for p in csv.index.get_level_values("pair") if "no_norm" in p]


def test_a_dead_running_run_is_lost_in_the_report_as_in_status(
    client: MlflowClient, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A RUNNING run whose process is gone and whose heartbeat is 304 s old: the report said
    'running at step 60', `--status` 'lost'. One judgement (src.tracking.sweep.run_state) for both."""
    import socket
    import subprocess
    import sys

    from src.tracking.tags import FINGERPRINT_TAG, HEARTBEAT_TAG, HOST_TAG, PID_TAG

    exp = client.create_experiment("dead")
    done = log_run(client, exp, "torch_layernorm", 0, finished(10.0, 100.0, 5.0))
    client.set_tag(done, FINGERPRINT_TAG, "fp-done")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    tags = {"norm": "hand_rmsnorm", "norm_family": family_of("hand_rmsnorm"), "seed": "0", FINGERPRINT_TAG: "fp-dead",
            HOST_TAG: socket.gethostname(), PID_TAG: gone.stdout.strip(), HEARTBEAT_TAG: f"{time.time() - 304:.0f}"}  # fmt: skip
    dead = client.create_run(exp, run_name="hand_rmsnorm-s0", tags=tags, start_time=next_start_ms()).info.run_id
    for step in range(1, 61):
        client.log_metric(dead, "train/train_loss", 10.0 - step / 100, step=step)
    assert client.get_run(dead).info.status == "RUNNING"

    common = ["--experiment-name", "dead", "--tracking-uri", store["uri"]]
    assert report_main([*common, "--out", str(tmp_path / "out"), "--no-summary-run"]) == 0
    report = capsys.readouterr().out
    assert "lost at step 60" in report and "running at step" not in report, report
    assert report_main([*common, "--status"]) == 0
    status = capsys.readouterr().out
    assert "lost (no heartbeat; a re-run resumes it)" in status and "running" not in status, status
    # A fresh heartbeat elsewhere is running in both (a process this host cannot see).
    client.set_tag(dead, HOST_TAG, "another-host")
    client.set_tag(dead, HEARTBEAT_TAG, f"{time.time():.0f}")
    assert report_main([*common, "--out", str(tmp_path / "out"), "--no-summary-run"]) == 0
    assert "running at step 60" in capsys.readouterr().out
    assert report_main([*common, "--status"]) == 0
    assert "running (heartbeat" in capsys.readouterr().out


def test_a_partial_report_judges_the_chosen_claims_files(
    client: MlflowClient, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report taken while the sweep runs judges `report.claims`, as the full report does (it judged the
    study's file alone)."""
    import os
    import socket

    from src.tracking.tags import HOST_TAG, PID_TAG

    exp = client.create_experiment("still_running")
    for seed in range(3):
        for norm, loss in (("torch_rmsnorm", 5.0), ("hand_rmsnorm", 5.002)):
            log_run(client, exp, norm, seed, finished(10.0, 100.0, loss + 0.01 * seed))
    # The sweep's run, its process alive on this host (this test's parent, not this process).
    client.create_run(exp, run_name="sweep", tags={SWEEP_TAG: "true", HOST_TAG: socket.gethostname(), PID_TAG: str(os.getppid())})
    (tmp_path / "mine.yaml").write_text(
        "source: {title: my hypothesis}\nclaims:\n  - statement: my norm's loss is nn.RMSNorm's\n    metric: test_loss\n"
        "    parts:\n      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: equivalence, size: [-0.05, 0.05]}\n"
    )
    capsys.readouterr()
    assert report_main(["--experiment-name", "still_running", "--tracking-uri", store["uri"], f"report.claims=[{tmp_path / 'mine.yaml'}]"]) == 0
    out = capsys.readouterr().out
    assert "is still running" in out and "Against my hypothesis" in out and "Against the published study" not in out, out


@pytest.mark.slow  # a three-job sweep in a subprocess
def test_a_real_sweep_that_diverges_everywhere_gets_its_report(token_cache_dir: Path, tmp_path: Path) -> None:
    """The probe's sweep (lr 1e4, no clipping): every run diverges. Before: `sweep report not
    generated: ... has no finished runs yet (3 diverged)`; now the sweep's end writes the report,
    listing each variant as diverged at its step."""
    from helpers import run_sweep

    out = run_sweep(tmp_path, token_cache_dir, "diverged", "norm=torch_layernorm,hand_rmsnorm,no_norm",
                    "optim.lr=1e4", "optim.grad_clip=null", "optim.max_steps=8")  # fmt: skip
    assert "not generated" not in out and " yet" not in out, out[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("diverged").experiment_id], "tags.outcome = 'diverged'")
    assert len(runs) == 3, out[-3000:]
    report = (tmp_path / "reports" / "diverged" / "report.md").read_text()
    for run in runs:
        step = int(run.data.metrics["diverged_at_step"])
        assert re.search(rf"{run.data.tags['norm']}\b.*diverged at step {step}", report), report[:3000]


def test_two_model_sizes_in_one_experiment_fill_the_study_table_and_give_ranges(
    client: MlflowClient, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sweeps of model.emb_dim=64 and =128 into one experiment: the study section's side-by-side
    table printed its header and no rows (no variant has the study's 768), and the setting line gave
    tokens per parameter as one number (the larger model's) beside a range of parameters."""
    exp = client.create_experiment("two_sizes")
    sizes = {64: (100_000, 2_000_000), 128: (400_000, 2_000_000)}  # emb_dim -> (parameters, tokens per run)
    for norm in ("hand_layernorm", "torch_layernorm"):
        for emb_dim, (n_params, tokens) in sizes.items():
            params = {"model.emb_dim": emb_dim, "n_params": n_params, "budget.total_tokens": tokens}
            log_run(client, exp, norm, 0, finished(10.0 + emb_dim / 64, 100.0, 5.0 - emb_dim / 1000), params=params)
    assert report_main(["--experiment-name", "two_sizes", "--tracking-uri", store["uri"], "--out", str(tmp_path / "out"), "--no-summary-run"]) == 0
    out = capsys.readouterr().out
    assert "100,000–400,000 parameters" in out and "2,000,000 (5–20 per parameter)" in out, out
    section = out[out.index("Against the published study"):]
    first_block = section[section.index("\nvariant "):].split("\n\n")[0]  # a table split to fit: its first block
    rows = [line for line in first_block.splitlines() if line.startswith(("hand_layernorm", "torch_layernorm"))]
    assert len(rows) == 4 and all(" / 1 " in r or "1 / 1" in r for r in rows), section


def test_every_swept_variant_is_judged_against_a_reference() -> None:
    """A variant no study pair measures here (dyt beside torch_rmsnorm: its pair is torch_layernorm's) is
    paired with the sweep's reference, so it has a loss verdict and, timed, a speed verdict; the headline
    no longer calls it "not a compared pair"."""
    from made_up_sweeps import CPU

    from src.report.analysis import assemble
    from src.report.words.headline import headline

    assert pairs_for({"torch_rmsnorm": "rmsnorm", "dyt": "dyt", "my_norm": "rmsnorm"}) == [
        ("torch_rmsnorm", "my_norm"), ("torch_rmsnorm", "dyt")]  # fmt: skip
    assert ("torch_layernorm", "dyt") in pairs_for({"torch_layernorm": "layernorm", "dyt": "dyt", "scalenorm": "scalenorm"})
    variants, rng = ["torch_rmsnorm", "dyt", "my_norm"], np.random.default_rng(0)
    rows = [{"run_id": f"{v}-s{s}", "variant": v, "norm": v, "family": {"dyt": "dyt"}.get(v, "rmsnorm"), "seed": s,
             "outcome": "finished", "test_loss": 5.0 + 0.01 * i + rng.normal(0, 1e-3), "tokens_per_sec": 1000.0,
             "train_time_s": 100.0, "stopped_at_step": math.nan, "start_time": pd.Timestamp(0) + pd.Timedelta(seconds=9 * s + i),
             "end_time": pd.Timestamp(0) + pd.Timedelta(seconds=9 * s + i + 5), "dispatch": "fwd=fused bwd=fused",
             "model.norm_placement": "pre", "model.qk_norm": "False", "model.init": "study", "norm_reference": "", **CPU}
            for s in range(3) for i, v in enumerate(variants)]  # fmt: skip
    norms = {v: list(1e-3 * (1 + i) * (1 + rng.normal(0, 0.01, 10))) for i, v in enumerate(variants)}
    check = {"kernel": {"samples_s": norms, "step_s": 0.1, "rounds": 10}, "samples_s": {v: [0.1, 0.1] for v in variants},
             "settings": {"variants": variants, "rounds": 2}}  # fmt: skip
    a = assemble(pd.DataFrame(rows), (), SpeedCheck(check, {}, {}), ReportSettings())
    assert ("torch_rmsnorm", "dyt") in {(r.a, r.b) for r in a.comparisons}
    assert {(v.a, v.b) for v in a.speed_verdicts} == {("torch_rmsnorm", "my_norm"), ("torch_rmsnorm", "dyt")}
    assert "not a compared pair" not in "\n".join(headline(a))
