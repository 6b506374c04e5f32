"""The report's figures stay readable with many variants: a 30-value learning-rate sweep.

Most tests draw from synthetic runs and curves in the shape src.report.read.runs builds them (variants
found by src.tracking.variants, as the report finds them): fast, no training. One real sweep of 30
learning rates checks the files the report writes.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_sweep, seeded_store
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.legend import Legend

from src.report.analysis import analyze
from src.report.figures.axis import file_name, numeric_axis, plot_by_axis
from src.report.figures.losses import plot_losses
from src.report.figures.style import save, variant_styles
from src.report.read.runs import variant_ranks
from src.report.read.table import AXIS_PREFIX
from src.tracking.tags import DIVERGED, FAILED, FINISHED
from src.tracking.variants import LR_KEY, NORM_KEY, SEED_KEY, Axis, find_variants

LRS = [f"{x:.3g}" for x in np.logspace(-5, -1, 30)]
FAMILY = {"hand_rmsnorm": "rmsnorm", "torch_layernorm": "layernorm", "torch_rmsnorm": "rmsnorm"}


def sweep(configs: list[dict[str, str]], outcome: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, tuple[Axis, ...]]:
    """Runs, curves and axes of runs with these flat params, as src.report.read.runs reads them back: one
    row per run (variant, rank, `axis.<name>` values, outcome, test loss) and two metrics per run."""
    params = {f"r{i}": c for i, c in enumerate(configs)}
    variants = find_variants(params)
    outcome = outcome or {}
    rows = []
    for i, (run, p) in enumerate(params.items()):
        lr = float(p.get(LR_KEY, "1e-3"))
        state = outcome.get(run, FINISHED)
        rows.append({
            "run_id": run, "variant": variants.labels[run], "norm": p[NORM_KEY], "family": FAMILY[p[NORM_KEY]],
            "lr": lr, "seed": int(p.get(SEED_KEY, "0")), "outcome": state,
            "test_loss": 6.0 + (np.log10(lr) + 2.5) ** 2 / 10 + 0.01 * i % 3 if state == FINISHED else np.nan,
            "stopped_at_step": 12.0 if state != FINISHED else np.nan,
            **{f"{AXIS_PREFIX}{name}": value for name, value in variants.parts[run].items()},
        })  # fmt: skip
    runs = pd.DataFrame(rows)
    runs["variant_rank"] = variant_ranks(runs, variants)
    curves = pd.DataFrame(
        [(r.run_id, r.variant, r.variant_rank, r.family, r.seed, metric, step, 10.8 - step * r.lr)
         for r in runs.itertuples() for metric, steps in (("train/train_loss", (1, 2, 3, 4)), ("val/val_loss", (4,)))
         for step in steps],
        columns=["run_id", "variant", "variant_rank", "family", "seed", "metric", "step", "value"],
    )  # fmt: skip
    return runs, curves, variants.axes


def lr_configs(lrs: list[str], seeds: tuple[int, ...] = (0,), norms: tuple[str, ...] = ("hand_rmsnorm",)) -> list[dict[str, str]]:
    return [{NORM_KEY: n, LR_KEY: lr, SEED_KEY: str(s)} for n in norms for lr in lrs for s in seeds]


def drawn_quietly(draw: object, *args: object) -> Figure:
    """The figure, drawn (where constrained layout runs) with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = draw(*args)  # type: ignore[operator]
        fig.canvas.draw()
    return fig


def legend_of(fig: Figure) -> Legend:
    assert len(fig.legends) == 1
    return fig.legends[0]


@pytest.mark.parametrize("n", [3, 30, 45])
def test_loss_curves_keep_every_variant_apart_and_the_legend_off_the_panels(n: int, tmp_path: Path) -> None:
    runs, curves, _ = sweep(lr_configs([f"{x:.3g}" for x in np.logspace(-5, -1, n)]))
    fig = drawn_quietly(plot_losses, curves)
    legend = legend_of(fig)
    labels = [t.get_text().rsplit(" (n=", 1)[0] for t in legend.get_texts()]
    assert Counter(labels) == Counter(set(runs.variant)) and len(labels) == n  # each variant once
    styles = [(to_hex(h.get_color()), h.get_linestyle(), h.get_marker()) for h in legend.legend_handles]
    assert len(set(styles)) == n and len({s[:2] for s in styles[:40]}) == min(n, 40)
    for ax in fig.axes:  # the curves as drawn: one style per variant in each panel
        assert len({(to_hex(line.get_color()), line.get_linestyle(), line.get_marker()) for line in ax.lines}) == n
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1  # not cut
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert save(fig, tmp_path / "loss_curves.png").stat().st_size > 0


def test_long_labels_fit_in_fewer_columns() -> None:
    configs = [{NORM_KEY: n, "model.norm_placement": p, "model.qk_norm": q, SEED_KEY: "0"}
               for n in FAMILY for p in ("pre", "post") for q in ("true", "false")]  # fmt: skip
    _, curves, axes = sweep(configs)
    assert len(axes) == 3
    fig = drawn_quietly(plot_losses, curves)
    renderer = fig.canvas.get_renderer()
    box = legend_of(fig).get_window_extent(renderer)
    assert len(legend_of(fig).get_texts()) == 12
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes) and box.x1 <= fig.bbox.x1


def test_styles_are_unique_well_past_forty_variants() -> None:
    styles = variant_styles([f"v{i}" for i in range(200)])
    assert len({(to_hex(s.color), s.linestyle) for s in list(styles.values())[:40]}) == 40
    assert len({(to_hex(s.color), s.linestyle, s.marker) for s in styles.values()}) == 200


def test_an_lr_sweep_is_drawn_along_a_log_axis_with_seeds_and_divergences() -> None:
    configs = lr_configs(LRS, seeds=(0, 1, 2))
    # The top three learning rates diverge for every seed; one failure at the lowest.
    outcome = {f"r{i}": DIVERGED for i, c in enumerate(configs) if c[LR_KEY] in LRS[-3:]} | {"r0": FAILED}
    runs, _, axes = sweep(configs, outcome)
    axis = numeric_axis(runs, axes)
    assert axis is not None and axis.name == LR_KEY and file_name(axis) == "by_optim_lr.png"
    fig = drawn_quietly(plot_by_axis, runs, axis)
    strip, ax = fig.axes
    assert ax.get_xscale() == "log"
    ok = runs[runs.outcome == FINISHED]
    seeds = next(c for c in ax.collections if c.get_label() == "a seed")
    assert len(seeds.get_offsets()) == len(ok)  # every finished seed a dot
    means = next(line for line in ax.lines if len(line.get_xdata()) > 1)
    expected = ok.assign(x=ok.lr).groupby("x").test_loss.mean()
    assert list(means.get_xdata()) == pytest.approx(list(expected.index)) and list(means.get_ydata()) == pytest.approx(list(expected))
    # Not dropped: a row per outcome, a mark per value where a run did not finish, its step beside it.
    assert [t.get_text() for t in strip.get_yticklabels()] == [DIVERGED, FAILED]
    marks = [(line.get_marker(), float(line.get_xdata()[0])) for line in strip.lines]
    assert sorted(marks) == sorted([("x", float(lr)) for lr in LRS[-3:]] + [("s", float(LRS[0]))])
    assert sorted(t.get_text() for t in strip.texts) == ["12", *["12 (3 seeds)"] * 3]


def test_a_narrow_numeric_axis_is_linear_with_its_values_marked() -> None:
    runs, _, axes = sweep(lr_configs(["1e-3", "2e-3", "4e-3"]))
    axis = numeric_axis(runs, axes)
    assert axis is not None
    fig = drawn_quietly(plot_by_axis, runs, axis)
    assert len(fig.axes) == 1 and fig.axes[0].get_xscale() == "linear"  # every run finished: no strip
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0.001", "0.002", "0.004"]


@pytest.mark.parametrize(
    "configs",
    [
        lr_configs(["1e-4", "1e-3", "1e-2"], norms=("torch_layernorm", "torch_rmsnorm")),  # two axes
        lr_configs(["1e-3"], seeds=(0, 1), norms=("torch_layernorm", "torch_rmsnorm")),  # a norm: not a number
        [{NORM_KEY: "torch_layernorm", "model.qk_norm": q, SEED_KEY: "0"} for q in ("true", "false")],  # a flag
        lr_configs(["1e-3"], seeds=(0, 1, 2)),  # seeds alone: no axis
    ],
    ids=["two-axes", "norm", "flag", "seeds-only"],
)
def test_no_axis_figure_without_exactly_one_numeric_axis(configs: list[dict[str, str]]) -> None:
    runs, _, axes = sweep(configs)
    assert numeric_axis(runs, axes) is None


@pytest.mark.slow
def test_a_real_sweep_of_30_learning_rates_writes_readable_figures(
    token_cache_dir: Path, store_template: Path, tmp_path: Path
) -> None:
    seeded_store(tmp_path, store_template)  # the figures are the point here, not a store's creation
    out = run_sweep(tmp_path, token_cache_dir, "lr30", "norm=hand_rmsnorm", f"optim.lr={','.join(LRS)}", "optim.min_lr_ratio=0")
    assert "constrained_layout not applied" not in out
    report = tmp_path / "reports" / "lr30"
    for name in ("loss_curves.png", "by_optim_lr.png"):
        assert (report / name).stat().st_size > 0
        assert f"![{name[:-4]}]({name})" in (report / "report.md").read_text()
        assert f'alt="{name[:-4]}"' in (report / "report.html").read_text()
    # The learning rate alone: its one line is drawn once (stability.csv and its sentences stay).
    assert not (report / "stability.png").exists() and (report / "stability.csv").stat().st_size > 0
    analysis = analyze("lr30", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(analysis.runs) == 30 and numeric_axis(analysis.runs, analysis.axes) is not None
    labels = [t.get_text() for t in legend_of(drawn_quietly(plot_losses, analysis.curves)).get_texts()]
    assert len(labels) == len(set(labels)) == 30


def test_identical_curves_say_so_and_one_seed_promises_no_band() -> None:
    """Variants whose curves lie on one another (hand-rolled and built-in norms at a few steps) each keep a
    marker in view and name the curve they are drawn over; with one seed each no min–max band is promised."""
    configs = [{NORM_KEY: n, SEED_KEY: "0"} for n in ("hand_rmsnorm", "torch_rmsnorm", "torch_layernorm")]
    _, curves, _ = sweep(configs)
    curves["value"] = 10.8 - curves.step * 0.01  # every variant the same curve
    fig = drawn_quietly(plot_losses, curves)
    labels = [t.get_text() for t in legend_of(fig).get_texts()]
    assert sum("'s curve: hollow marks" in label for label in labels) == 2, labels
    assert "band" not in fig.get_suptitle()
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "none"]
    assert len(hollow) == 2  # the first curve's marks show inside theirs
    configs = [{NORM_KEY: n, SEED_KEY: s} for n in ("hand_rmsnorm", "torch_rmsnorm") for s in ("0", "1")]
    _, curves, _ = sweep(configs)
    curves["value"] += 0.1 * (curves.variant == "torch_rmsnorm")
    fig = drawn_quietly(plot_losses, curves)
    assert "band: min–max" in fig.get_suptitle() and not any("hollow marks" in t.get_text() for t in legend_of(fig).get_texts())


def test_speed_png_draws_each_interval_visibly() -> None:
    """A tight interval is thinner than its estimate's dot: its ends are capped and written in its label."""
    from src.report.figures.speed import plot_speed
    from src.report.judge.speed import compare_speed

    rng = np.random.default_rng(0)
    norms = {"a": list(1e-3 * (1 + rng.normal(0, 1e-3, 30))), "b": list(1.2e-3 * (1 + rng.normal(0, 1e-3, 30)))}
    check = {"kernel": {"samples_s": norms, "step_s": 0.1, "rounds": 30}, "samples_s": {"a": [0.1, 0.1], "b": [0.1, 0.1]},
             "settings": {"variants": ["a", "b"], "rounds": 2}}  # fmt: skip
    (v,) = compare_speed(check, [("a", "b")], 0.02)
    fig = drawn_quietly(plot_speed, [v], 0.02)
    ax = fig.axes[0]
    low, high = (100 * np.expm1(x) for x in (v.predicted.low, v.predicted.high))
    caps = [line for line in ax.lines if line.get_marker() == "|"]
    assert caps and list(caps[0].get_xdata()) == pytest.approx([low, high])
    label = ax.get_yticklabels()[0].get_text()
    assert f"[{low:+.2f}, {high:+.2f}]" in label, label
