"""Plan a sequential sweep before launching it: each design's verdicts, seeds and device-hours per
comparison, from a pilot (docs/sequential.md, "Plan before launch", says what it prints and how).

    python -m src.report --plan --experiment-name NAME [hydra.sweeper.max_seeds=20] [cluster=gpu_node ...]

Each comparison is simulated `SWEEPS` times under the sweeper's own rule and settings, per spending
function, each simulated sweep drawing its true difference and spread from what the pilot allows
(σ² ~ (n−1)s²/χ²(n−1), Δ ~ N(mean, σ²/n)): a pilot of three seeds gives a wide forecast rather than a
confident one. Device-hours per seed are the caller's (the pilot's recorded train time × devices, or
preflight's cost model for another cluster).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from src.core import paths
from src.report.judge.pairs import Margins, comparison_pairs, seed_values
from src.report.read.runs import ReportError, load_sweep, open_store
from src.report.read.table import AXIS_PREFIX
from src.stats.inference import MIN_SEEDS
from src.stats.pairs import pair_label
from src.stats.sequential import (
    CODES,
    DIFFERENT,
    EQUIVALENT,
    SPENDING,
    UNDECIDABLE,
    UNDECIDED,
    Design,
    simulate,
)
from src.stats.settings import check_sweeper
from src.tracking.variants import Axis, override_of

SWEEPS = 4000  # simulated sweeps per comparison and design
PLAN_METRIC = "test_loss"  # speed is measured by interleaving (python -m src.bench variants), not by seeds
VERDICTS = (EQUIVALENT, DIFFERENT, UNDECIDABLE, UNDECIDED)
PILOT_HOURS = "the pilot's recorded train time x devices"  # where a seed's device-hours come from, by default


@dataclass(frozen=True)
class Forecast:
    a: str
    b: str
    spending: str
    pilot_seeds: int
    # NaN where the pilot cannot say (too few seeds of the pair's own: its `note` says so).
    diff: float = math.nan  # the pilot's mean difference b - a
    sd: float = math.nan  # the pilot's spread of per-seed differences
    verdicts: dict[str, float] = field(default_factory=dict)  # verdict -> probability
    mean_seeds: float = math.nan  # per variant, when it stops
    p90_seeds: float = math.nan
    device_hours: float = math.nan  # expected: mean seeds x both variants' device-hours per seed
    note: str = ""

    @property
    def pair(self) -> str:
        return pair_label(self.a, self.b)


@dataclass(frozen=True)
class Plan:
    forecasts: list[Forecast]
    totals: dict[str, tuple[float, float]]  # spending -> the sweep's device-hours (expected, 90th pct)
    design: Design  # the sweeper's settings (its own spending among those planned)
    hours: dict[str, float]  # variant -> device-hours per seed
    hours_source: str
    sweeps: int = SWEEPS  # simulated sweeps per comparison and design, as forecast ran them


def pilot_hours(runs: pd.DataFrame, variants: Sequence[str]) -> dict[str, float]:
    """Device-hours one seed of each variant cost in the pilot: mean train time x devices."""
    out = {}
    for v in variants:
        rows = runs[(runs.variant == v) & (runs.outcome == "finished")]
        devices = rows.devices.dropna() if "devices" in rows else pd.Series(dtype=float)
        out[v] = float(rows.train_time_s.mean()) * (float(devices.mean()) if len(devices) else 1.0) / 3600
    return out


def planned_pairs(
    runs: pd.DataFrame, pairs: Sequence[tuple[str, str]] | None, reference: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The report's pairs (src.report.judge.pairs.comparison_pairs) that have finished runs."""
    chosen = [(a, b) for a, b, _ in comparison_pairs(runs, pairs, reference)]
    if not chosen:
        raise ReportError("no pair of variants with finished runs to plan; run a pilot of at least two seeds first")
    return chosen


def pilot_too_small(pilot: Mapping[tuple[str, str], np.ndarray]) -> str:
    """Why the pilot (each pair's per-seed differences) supports no plan, and the seeds it needs: a
    per-seed difference has a spread only from `MIN_SEEDS` seeds on."""
    have = ", ".join(f"{pair_label(a, b)}: {len(d)}" for (a, b), d in pilot.items())
    return (
        f"the pilot cannot support a plan: a forecast needs >= {MIN_SEEDS} seeds with both variants of a pair "
        f"finished (the spread of their per-seed differences), and it has {have}; add seeds to the pilot "
        f"(seed={','.join(str(s) for s in range(MIN_SEEDS))} with its other overrides; finished seeds are skipped), "
        "then plan again"
    )


def forecast(runs: pd.DataFrame, margins: Margins, design: Design, hours: Mapping[str, float],
             pairs: Sequence[tuple[str, str]] | None = None, sweeps: int = SWEEPS,
             reference: Mapping[str, str] | None = None, hours_source: str = PILOT_HOURS) -> Plan:  # fmt: skip
    """Every spending function's forecast for every pair present in the pilot (see the module's docstring).

    `design` gives the schedule, alpha and futility (its family is replaced by the planned pairs');
    `hours` the device-hours of one seed of each variant."""
    chosen = planned_pairs(runs, pairs, reference)
    out: list[Forecast] = []
    totals: dict[str, tuple[float, float]] = {}
    draws = {}  # pair -> (mean, sd, delta, sigma): per simulated sweep, shared by the designs so they compare like for like
    rng = np.random.default_rng(0)  # seeded: a plan read twice gives the same numbers
    # The pilot's finite per-seed differences b - a, over the seeds both finished (aligned by seed).
    differences = {(a, b): (seed_values(runs, b, PLAN_METRIC) - seed_values(runs, a, PLAN_METRIC)).to_numpy() for a, b in chosen}
    pilot = {pair: d[np.isfinite(d)] for pair, d in differences.items()}
    for (a, b), d in pilot.items():
        if len(d) < MIN_SEEDS:
            continue
        n, mean, sd = len(d), float(np.mean(d)), float(np.std(d, ddof=1))
        # Posterior draws of the spread and the true difference (flat prior on both, normal seeds).
        sigma = sd * np.sqrt((n - 1) / rng.chisquare(n - 1, sweeps)) if sd > 0 else np.zeros(sweeps)
        draws[(a, b)] = (mean, sd, mean + sigma / math.sqrt(n) * rng.standard_normal(sweeps), sigma)
    if not draws:  # no pair has a spread to draw from: a table of "-" and a design chosen from nothing
        raise ReportError(pilot_too_small(pilot))
    for spending in SPENDING:
        planned = replace(design, spending=spending, family=len(chosen))
        per_variant: dict[str, np.ndarray] = {}  # the most seeds any comparison asked of the variant, per sweep
        for i, (a, b) in enumerate(chosen):
            n = len(pilot[(a, b)])
            if (a, b) not in draws:
                out.append(Forecast(a, b, spending, n, note=f"needs ≥{MIN_SEEDS} seeds with both variants finished in the pilot"))
                continue
            mean, sd, delta, sigma = draws[(a, b)]
            cost = hours.get(a, math.nan) + hours.get(b, math.nan)  # device-hours of one seed of both variants
            sim = simulate(planned, delta, sigma, margins.test_loss, sweeps, seed=1000 + i)
            for v in (a, b):
                per_variant[v] = np.maximum(per_variant.get(v, np.zeros(sweeps)), sim.seeds)
            mean_seeds = float(sim.seeds.mean())
            out.append(Forecast(a, b, spending, n, mean, sd, {v: sim.rate(CODES[v]) for v in VERDICTS}, mean_seeds,
                                float(np.percentile(sim.seeds, 90)), mean_seeds * cost))  # fmt: skip
        total = sum((seeds * hours.get(v, math.nan) for v, seeds in per_variant.items()), np.zeros(sweeps))
        totals[spending] = (float(np.mean(total)), float(np.percentile(total, 90))) if per_variant else (math.nan, math.nan)
    return Plan(out, totals, design, dict(hours), hours_source, sweeps)


def _num(value: float, fmt: str) -> str:
    return "-" if not math.isfinite(value) else format(value, fmt)


def sweep_overrides(runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """The overrides that sweep the pilot's axes again, values in the order they were run."""
    ordered = runs.sort_values("start_time", kind="stable")
    return [override_of(a, list(dict.fromkeys(ordered[AXIS_PREFIX + a.name]))) for a in axes]


def variant_overrides(runs: pd.DataFrame, axes: Sequence[Axis]) -> dict[str, list[str]]:
    """variant -> the overrides that make it: its value on each swept axis (its norm when no axis
    but the seed was swept)."""
    return {str(row["variant"]): [override_of(a, [str(row[AXIS_PREFIX + a.name])]) for a in axes] if axes else [f"norm={row['norm']}"]
            for _, row in runs.drop_duplicates("variant").iterrows()}  # each variant's first run


def recommended(plan: Plan) -> str:
    """The design with the larger expected number of verdicts (equivalent or different) over the
    comparisons; within half a point, the cheaper one."""

    def score(spending: str) -> tuple[float, float]:
        rows = [f for f in plan.forecasts if f.spending == spending and f.verdicts]
        decided = sum(f.verdicts[EQUIVALENT] + f.verdicts[DIFFERENT] for f in rows) / max(len(rows), 1)
        return round(decided * 200) / 200, -plan.totals[spending][0] if math.isfinite(plan.totals[spending][0]) else 0.0

    return max(SPENDING, key=score)


def plan_text(
    experiment: str, plan: Plan, margins: Margins, elsewhere: Sequence[str] = (), overrides: Sequence[str] | None = None
) -> str:
    """The plan as printed: per design and comparison the verdicts, seeds and device-hours, the
    sweep's total per design, then the command that runs the recommended design: into the pilot's
    experiment, or, with `elsewhere` (the overrides of another scale, e.g. a cluster), at that scale;
    `overrides`: the swept axes, as `sweep_overrides` gives them (default: the norms of the comparisons)."""
    d = plan.design
    rows = [
        {
            "design": f.spending,
            "comparison": f.pair,
            "pilot seeds": f.pilot_seeds,
            "Δ test loss": _num(f.diff, "+.4f"),
            "sd": _num(f.sd, ".4f"),
            **{label: (f"{f.verdicts[v]:.0%}" if f.verdicts else "-") for v, label in
               zip(VERDICTS, ("P(equiv)", "P(diff)", "P(undecidable)", "P(undecided)"), strict=True)},
            "E seeds": _num(f.mean_seeds, ".1f"),
            "p90 seeds": _num(f.p90_seeds, ".0f"),
            "E device-h": _num(f.device_hours, ".3g"),
            "note": f.note,
        }
        for f in plan.forecasts
    ]  # fmt: skip
    table = pd.DataFrame(rows)
    if not table.note.any():
        table = table.drop(columns="note")
    best = recommended(plan)
    variants = sorted({v for f in plan.forecasts for v in (f.a, f.b)})
    command = " ".join([
        "python -m src.train -m",
        *(shlex.quote(o) for o in overrides or [f"norm={','.join(variants)}"]),
        "hydra/sweeper=sequential",
        f"hydra.sweeper.first_seeds={d.first_seeds}",
        f"hydra.sweeper.seeds_per_round={d.seeds_per_round}",
        f"hydra.sweeper.max_seeds={d.max_seeds}",
        f"hydra.sweeper.spending={best}",
        f"hydra.sweeper.futility={d.futility:g}",
        *(shlex.quote(o) for o in elsewhere),
        *([] if elsewhere else [shlex.quote(f"experiment_name={experiment}")]),
    ])  # fmt: skip
    how = (
        "run it at that scale (check it first: python -m src.preflight -m <the same arguments>):"
        if elsewhere
        else "run it (with the pilot's other overrides; the pilot's finished seeds count, nothing is trained twice):"
    )
    totals = [f"  {s}: {_num(plan.totals[s][0], '.3g')} expected, {_num(plan.totals[s][1], '.3g')} at the 90th percentile"
              for s in SPENDING]  # fmt: skip
    hours = ", ".join(f"{v} {_num(h, '.3g')}" for v, h in plan.hours.items())
    return "\n".join([
        f"plan for experiment {experiment!r}: each design's verdicts, seeds per variant and device-hours per comparison of "
        f"test loss (margin ±{margins.test_loss:g} nats; looks at {d.looks()} seeds, alpha {d.alpha:g} over the family, "
        f"futility below {d.futility:g}), by {plan.sweeps:,} simulated sequential sweeps from the pilot's paired differences",
        table.to_string(index=False),
        "",
        f"device-hours per seed ({plan.hours_source}): {hours}",
        "the sweep's device-hours (a variant shared by several comparisons counted once):",
        *totals,
        "",
        f"recommended: {best} (more verdicts expected{'' if best == d.spending else ', unlike the configured ' + d.spending}); {how}",
        f"  {command}",
    ])  # fmt: skip


def plan_command(experiment: str, uri: str, overrides: list[str], margins: Margins, pairs: list[tuple[str, str]] | None,
                 priced: Callable[[list[str], dict[str, list[str]]], dict[str, float]],
                 reference: dict[str, str] | None = None) -> str:  # fmt: skip
    """`--plan`: each design's forecast from the experiment's runs; device-hours from the pilot's
    train time, or, when the overrides name a cluster, from `priced(overrides, variant -> its
    overrides)` (preflight's cost model, which the command line hands in: it sits above the report)."""
    # The sweeper's settings as `hydra/sweeper=sequential` composes them (with any hydra.sweeper.* override).
    sweeper = paths.compose([*overrides, "hydra/sweeper=sequential"], with_hydra=True).hydra.sweeper
    check_sweeper(sweeper)  # as the sweeper checks them: one line naming the key
    design = Design.of(sweeper)
    sweep = load_sweep(experiment, open_store(uri))
    runs = sweep.runs
    variants = sorted({v for pair in planned_pairs(runs, pairs, reference) for v in pair})
    cluster = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == "cluster"]
    # Priced at another scale: the job's overrides (not where the pilot is stored, not the sweeper's).
    elsewhere = [o for o in overrides if not o.startswith(("hydra.sweeper.", "paths.", "logger."))] if cluster else []
    if cluster:
        made_by = variant_overrides(runs, sweep.axes)
        hours, source = priced(overrides, {v: made_by[v] for v in variants}), f"preflight's cost model, {' '.join(elsewhere)}"
    else:
        hours, source = pilot_hours(runs, variants), PILOT_HOURS
    plan_ = forecast(runs, margins, design, hours, pairs, reference=reference, hours_source=source)
    return plan_text(experiment, plan_, margins, elsewhere, sweep_overrides(runs, sweep.axes))
