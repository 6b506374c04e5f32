"""A run's variant is what its sweep varied: any axis, several axes, or only the seed.

One real 2 norms x 2 placements x 3 seeds sweep (shared by the module) checks every consumer: the
terminal report, report.md, table.csv, comparisons.csv, the sweep run's metrics, the runs' tags, the
UI's grouping, --status and --plan; two small sweeps check an axis normsweep has never heard of and
a sweep of the seed alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_sweep, seeded_store, unwrapped
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError
from src.tracking.variants import find_axes, find_variants, metric_key

PLACEMENT = ["norm=torch_layernorm,torch_rmsnorm", "model.norm_placement=pre,post", "seed=0,1,2"]
VARIANTS = ["torch_layernorm · pre", "torch_layernorm · post", "torch_rmsnorm · pre", "torch_rmsnorm · post"]
ONE_AXIS_PAIRS = {  # the four pairs that differ in exactly one axis, with that axis
    "torch_rmsnorm · pre vs torch_layernorm · pre": "norm",
    "torch_rmsnorm · post vs torch_layernorm · post": "norm",
    "torch_layernorm · post vs torch_layernorm · pre": "norm_placement",
    "torch_rmsnorm · post vs torch_rmsnorm · pre": "norm_placement",
}


# --- the axes, from configs alone -----------------------------------------------------------------


def _params(norm: str, seed: int, **more: str) -> dict[str, str]:
    family = norm.split("_")[-1]
    return {"norm.norm_type": norm, "norm.family": family, "seed": str(seed), "data.seed": str(seed),
            "optim.lr": "0.0003", "model.norm_placement": "pre", **more}  # fmt: skip


def test_keys_that_change_together_are_one_axis_and_the_seed_is_none() -> None:
    runs = {f"{n}{p}{s}": _params(n, s, **{"model.norm_placement": p}) for n in ("torch_layernorm", "torch_rmsnorm")
            for p in ("pre", "post") for s in (0, 1)}  # fmt: skip
    found = find_variants(runs)
    # norm.family changes with the norm: one axis; data.seed is the seed under another name.
    assert [(a.name, a.keys) for a in found.axes] == [
        ("norm", ("norm.norm_type", "norm.family")),
        ("model.norm_placement", ("model.norm_placement",)),
    ]
    assert set(found.labels.values()) == set(VARIANTS)
    assert found.parts["torch_rmsnorm" + "post" + "1"] == {"norm": "torch_rmsnorm", "model.norm_placement": "post"}
    assert metric_key("torch_rmsnorm · post") == "torch_rmsnorm-post" and metric_key("torch_rmsnorm") == "torch_rmsnorm"


def test_a_key_that_follows_the_norm_adds_no_variant_and_a_seed_sweep_has_none() -> None:
    # The study's diverging no_norm runs at another learning rate: still three variants, by norm.
    runs = {f"{n}{s}": _params(n, s) for n in ("hand_layernorm", "torch_layernorm") for s in (0, 1)}
    runs |= {f"no{s}": _params("no_norm", s, **{"optim.lr": "1000000.0", "optim.warmup_fraction": "0"}) for s in (0, 1)}
    found = find_variants(runs)
    assert [a.name for a in found.axes] == ["norm"]
    assert set(found.labels.values()) == {"hand_layernorm", "torch_layernorm", "no_norm"}
    assert find_axes({str(s): _params("torch_layernorm", s) for s in range(3)}) == ()
    assert set(find_variants({str(s): _params("dyt", s) for s in range(3)}).labels.values()) == {"dyt"}


def test_any_key_is_an_axis_and_flags_and_numbers_carry_their_name() -> None:
    runs = {f"{w}{q}{s}": _params("torch_layernorm", s, **{"optim.weight_decay": w, "model.qk_norm": q})
            for w in ("0.0", "0.1") for q in ("False", "True") for s in (0, 1)}  # fmt: skip
    for run in runs.values():  # what a run logs beside its config changes with the axis, never names it
        run |= {"n_params": "7" if run["model.qk_norm"] == "True" else "6", "budget.tokens": "9"}
    found = find_variants(runs)
    assert {a.name for a in found.axes} == {"optim.weight_decay", "model.qk_norm"}
    assert set(found.labels.values()) == {
        f"{a} · {b}" for a in ("qk_norm=false", "qk_norm=true") for b in ("weight_decay=0.0", "weight_decay=0.1")
    }


@pytest.mark.parametrize(
    ("group", "options"),
    [("model", ("cpu_small", "gpt2_small")), ("precision", ("fp32", "bf16_mixed")), ("optim", ("adamw", "adamw_study"))],
)
def test_a_config_group_swept_is_an_axis_named_by_the_group_and_its_options(group: str, options: tuple[str, str]) -> None:
    """`-m model=cpu_small,gpt2_small` was labelled `context_length=128` / `context_length=1024` (the first
    of the keys the option changed, by name), `precision=...` `lightning=32-true` / `bf16-mixed`, and
    `optim=adamw,adamw_study` `betas=[0.9, 0.95]`, its decay and clip unsaid; the override rebuilt from
    the axis (`--plan`, the report's next command) set that key alone, not the option."""
    from src.core.paths import compose
    from src.tracking.identity import fingerprint, flatten, identity_config
    from src.tracking.variants import naming_keys, override_of

    configs = {f"{o}-{n}": compose([f"{group}={o}", f"norm={n}"]) for o in options for n in ("hand_layernorm", "torch_rmsnorm")}
    found = find_variants({run: flatten(identity_config(cfg)) for run, cfg in configs.items()})
    assert [a.name for a in found.axes] == ["norm", group]
    assert found.labels[f"{options[1]}-torch_rmsnorm"] == f"torch_rmsnorm · {options[1]}"
    assert override_of(found.axes[1], found.values(group)) == f"{group}={','.join(options)}"
    # The report finds the key that named it again from the name the sweep tagged its runs with; a
    # top-level key swept (`test_weights=...`) is still found as itself.
    assert found.axes[1].primary in naming_keys(group) and "test_weights" in naming_keys("test_weights")
    # The option's name labels values the fingerprint already holds: naming it changed no recorded run's.
    if group == "optim":
        from omegaconf import OmegaConf

        for option in options:
            named = OmegaConf.to_container(compose([f"optim={option}", "norm=hand_layernorm"]), resolve=True)
            unnamed = {**named, "optim": {k: v for k, v in named["optim"].items() if k != "name"}}
            assert fingerprint(unnamed) == fingerprint(named)


# --- real sweeps ------------------------------------------------------------------------------------


@dataclass
class Sweeps:
    root: Path
    uri: str
    outputs: dict[str, str]  # experiment -> the multirun's stdout + stderr, its wrapped lines joined (helpers.unwrapped)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory, token_cache_dir: Path, store_template: Path) -> Sweeps:
    root = tmp_path_factory.mktemp("variants")
    seeded_store(root, store_template)  # the variants are the point here, not a store's creation
    outputs = {
        "placement": run_sweep(root, token_cache_dir, "placement", *PLACEMENT),
        # The seed alone (at the default weight decay, 0.1), then the weight decay in the same
        # experiment: its 0.1 jobs are the seed sweep's runs (skipped), so two jobs train.
        "seeds": run_sweep(root, token_cache_dir, "decay", "seed=0,1"),
        "decay": run_sweep(root, token_cache_dir, "decay", "optim.weight_decay=0.1,0.0", "seed=0,1"),
    }
    return Sweeps(root, f"sqlite:///{root / 'mlflow.db'}", {name: unwrapped(out) for name, out in outputs.items()})


def _sentences(text: str) -> dict[str, str]:
    """pair -> its sentence, for the lines that compare two variants."""
    return {line.split(" (", 1)[0].lstrip("- "): line for line in text.splitlines() if " vs " in line and "Δ" in line}


@pytest.mark.slow
def test_a_placement_sweep_reports_four_variants_and_the_four_one_axis_comparisons(sweeps: Sweeps) -> None:
    out = sweeps.outputs["placement"]
    assert "experiment 'placement' (12 runs)" in out
    assert "older runs" not in out  # nothing superseded: another config never replaces a run
    assert "[normsweep] torch_rmsnorm · post-s1 ok | train" in out  # each job's line names its variant and seed
    table = out[out.index("\nvariant ") :].split("\n\n")[0]  # the report's table (its first block, when split to fit)
    rows = [line for line in table.splitlines() if line.startswith(tuple(VARIANTS)) and " vs " not in line]
    assert [r.split("  ")[0] for r in rows] == VARIANTS and all("3/3" in r for r in rows)
    assert "Holm-adjusted over 4 comparisons" in out  # test loss alone: the jobs' tokens/s is in the table, not judged
    for text in (out, (sweeps.root / "reports" / "placement" / "report.md").read_text()):
        said = _sentences(text)
        assert set(said) == set(ONE_AXIS_PAIRS)
        for pair, axis in ONE_AXIS_PAIRS.items():
            assert f"({axis}; paired over 3 seeds)" in said[pair]
            assert "test loss " in said[pair] and "Δ " in said[pair]
    table = pd.read_csv(sweeps.root / "reports" / "placement" / "table.csv")
    assert list(table.variant) == VARIANTS and list(table.finished) == [3] * 4
    comparisons = pd.read_csv(sweeps.root / "reports" / "placement" / "comparisons.csv")
    primary = comparisons[comparisons.test == "paired_t"]
    assert dict(zip(primary.pair, primary.axis, strict=True)) == ONE_AXIS_PAIRS and primary.verdict.notna().all()


@pytest.mark.slow
def test_against_the_study_a_placement_sweep_counts_its_pre_norm_variants(sweeps: Sweeps) -> None:
    from src.report.analysis import analyze
    from src.report.words.study import claim_line, claim_reason, written
    from src.stats.verdicts import ClaimWord

    NOT_APPLICABLE = ClaimWord.NOT_APPLICABLE

    analysis = analyze("placement", sweeps.uri)
    claims = {c.claim.number: c for c in analysis.study.claims}
    assert sorted(claims) == [3, 4]  # the built-ins only: no hand-rolled norm, no no_norm
    assert claims[3].word == NOT_APPLICABLE and claim_reason(claims[3]).startswith("outside its domain: CPU run")
    assert claims[3].findings[0].outside[0] == "CPU run: the study's figure comes from its CUDA kernels"
    # The study's model is pre-norm: claim 4 reads the `pre` pair, paired over the three seeds, at its own scale.
    pre = next(r for r in analysis.comparisons if r.metric == "test_loss" and r.pair == "torch_rmsnorm · pre vs torch_layernorm · pre")
    assert claims[4].word == NOT_APPLICABLE and "(paired over 3 seeds)" in claim_line(claims[4])
    assert f"built-in {pre.primary.diff:+.4f} [" in claim_line(claims[4]) and "hand-rolled not swept" in claim_line(claims[4])
    assert any("not within 2× of the study's 163,009,536" in why for why in claims[4].findings[0].outside)
    # A sweep of one study norm alone (the weight-decay sweep of torch_layernorm) says so in one line.
    decay = written(analyze("decay", sweeps.uri))
    claim_lines = [line for line in decay.lines() if line[:2] in {f"{n}." for n in range(1, 8)}]
    assert len(claim_lines) == 7  # every claim has its line, none vanishes
    assert all(line.startswith(f"{n}. not tested here — ") and "→ needs " in line for n, line in enumerate(claim_lines, 1))


@pytest.mark.slow
def test_the_runs_the_sweep_run_and_the_ui_view_carry_the_variant(sweeps: Sweeps) -> None:
    client = MlflowClient(sweeps.uri)
    experiment = client.get_experiment_by_name("placement")
    runs = client.search_runs([experiment.experiment_id])
    jobs = [r for r in runs if "norm" in r.data.tags]
    assert len(jobs) == 12
    assert {r.data.tags["variant"] for r in jobs} == set(VARIANTS)
    one = next(r for r in jobs if r.data.tags["variant"] == "torch_rmsnorm · post")
    assert one.data.tags["variant.axes"] == "norm,model.norm_placement"
    assert one.data.tags["variant.model.norm_placement"] == "post" and one.data.tags["variant.norm"] == "torch_rmsnorm"
    assert one.info.run_name.startswith("torch_rmsnorm · post-s")  # run names tell placements apart
    (parent,) = [r for r in runs if r.data.tags.get("normsweep.sweep") == "true"]
    for label in VARIANTS:
        assert parent.data.metrics[f"sweep/{metric_key(label)}.n_seeds"] == 3
        assert f"sweep/{metric_key(label)}.test_loss.mean" in parent.data.metrics
    assert "| torch_rmsnorm · post |" in parent.data.tags["mlflow.note.content"]  # its row in the per-variant table
    view = json.loads(experiment.tags["mlflow.sharedViewState.normsweep"])
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "variant"}]
    assert "tags.`variant`" in view["selectedColumns"]


@pytest.mark.slow
def test_status_plan_and_the_reference_follow_the_axes(sweeps: Sweeps) -> None:
    from src.report.analysis import analyze
    from src.report.commands.plan import forecast, pilot_hours, plan_text, sweep_overrides
    from src.report.commands.status import status_text
    from src.report.judge.pairs import Margins
    from src.report.read.runs import load_sweep, open_store
    from src.report.read.settings import ReportSettings
    from src.stats.sequential import Design

    status = status_text("placement", sweeps.uri, None, 600.0)
    assert "12 jobs, 12 done" in status and sum("torch_rmsnorm · post" in line for line in status.splitlines()) == 3
    sweep = load_sweep("placement", open_store(sweeps.uri))  # what `--plan` reads
    design = Design(2, 2, 6, 0.05, "obrien_fleming", 0.1)
    hours = pilot_hours(sweep.runs, sorted(set(sweep.runs.variant)))
    plan = forecast(sweep.runs, Margins(), design, hours, sweeps=200)
    text = plan_text("placement", plan, Margins(), (), sweep_overrides(sweep.runs, sweep.axes))
    assert "norm=torch_layernorm,torch_rmsnorm model.norm_placement=pre,post hydra/sweeper=sequential" in text
    assert sum(pair in text for pair in ONE_AXIS_PAIRS) == 4
    # report.reference turns a pair around; a value no run has is one line naming what exists.
    flipped = analyze("placement", sweeps.uri, ReportSettings(reference={"norm_placement": "post"}))
    assert "torch_layernorm · pre vs torch_layernorm · post" in {r.pair for r in flipped.comparisons}
    with pytest.raises(ConfigError, match=r"no run has model.norm_placement=mid; its values: pre, post"):
        analyze("placement", sweeps.uri, ReportSettings(reference={"model.norm_placement": "mid"}))


def test_a_bad_reference_stops_a_sweep_before_anything_trains() -> None:
    """The sweep-start check (src.launch.callbacks) on the axes of the sweep's own job configs."""
    from src.core.paths import compose
    from src.launch.callbacks import check_reference

    runs = {f"{p}{s}": _params("torch_layernorm", s, **{"model.norm_placement": p}) for p in ("pre", "post") for s in (0, 1)}
    found = find_variants(runs)
    check_reference(compose(["report.reference={norm_placement:post}"]), found)
    with pytest.raises(SystemExit, match=r"^config error: report.reference: no run has model.norm_placement=mid; its values: pre, post$"):
        check_reference(compose(["report.reference={norm_placement:mid}"]), found)
    with pytest.raises(SystemExit, match=r"report.reference: 'width' is not an axis of this sweep; its axes: \['model.norm_placement'\]"):
        check_reference(compose(["report.reference={width:64}"]), found)


@pytest.mark.slow
def test_an_axis_normsweep_does_not_know_is_compared_too(sweeps: Sweeps) -> None:
    out = sweeps.outputs["decay"]
    assert "experiment 'decay' (4 runs)" in out and "older runs" not in out
    assert "weight_decay=0.1 " in out and "weight_decay=0.0 " in out
    said = _sentences(out)
    assert list(said) == ["weight_decay=0.0 vs weight_decay=0.1"]
    assert "(optim.weight_decay; paired over 2 seeds)" in said["weight_decay=0.0 vs weight_decay=0.1"]
    # The seed sweep's runs were tagged by norm; the report re-tags them with what now varies.
    client = MlflowClient(sweeps.uri)
    runs = client.search_runs([client.get_experiment_by_name("decay").experiment_id], "tags.norm = 'torch_layernorm'")
    assert sorted(r.data.tags["variant"] for r in runs) == ["weight_decay=0.0"] * 2 + ["weight_decay=0.1"] * 2


@pytest.mark.slow
def test_a_sweep_of_the_seed_alone_is_one_variant_with_nothing_to_compare(sweeps: Sweeps) -> None:
    out = sweeps.outputs["seeds"]
    assert "experiment 'decay' (2 runs)" in out
    assert "No pairs to compare: every run is one variant (torch_layernorm); nothing but the seed varied." in out
    table = out[: out.index("Against the published study")]  # the report's own table (the study's follows)
    table = table[table.index("\nvariant ") :].split("\n\n")[0]  # its first block, when split to fit a terminal
    assert [line.split()[:2] for line in table.splitlines() if line.startswith("torch_layernorm ")] == [["torch_layernorm", "2/2"]]


def test_the_speed_check_times_each_swept_variant_from_its_overrides(tmp_path: Path) -> None:
    from src.launch.speed_check import bench_command

    jobs = [
        {"overrides": [f"norm={n}", f"model.norm_placement={p}", f"seed={s}", "model.n_layers=1"], "variant": f"{n} · {p}"}
        for n in ("torch_layernorm", "torch_rmsnorm") for p in ("pre", "post") for s in (0, 1)
    ]  # fmt: skip
    command = bench_command(jobs, 4, tmp_path)
    assert command is not None and command[command.index("--variant-overrides") - 1] == "variants"
    assert json.loads(command[command.index("--variant-overrides") + 1]) == {
        label: [f"norm={label.split(' · ')[0]}", f"model.norm_placement={label.split(' · ')[1]}"] for label in VARIANTS
    }
    assert command[-1] == "model.n_layers=1"  # the sweep's fixed overrides, not its swept ones or seeds
