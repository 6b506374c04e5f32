"""Plan a sequential sweep before launching it: seeds and device-hours per comparison, from a pilot.

    python -m src.report --plan --experiment NAME

The pilot is the experiment's finished runs (at least two seeds with both variants of a pair).
For each comparison (the report's pairs on test loss) the planner simulates `SWEEPS` sequential
sweeps under the sweeper's own rule (`src.report.sequential_stats`, the design of
conf/hydra/sweeper/sequential.yaml, the family being every planned comparison) with the look
schedule run out to `PLAN_MAX_SEEDS` so that the forecast is not cut short. Each simulated sweep
draws its true difference and spread from what the pilot allows (σ² ~ (n−1)s²/χ²(n−1),
Δ ~ N(mean, σ²/n)), so a pilot of three seeds gives a wide forecast rather than a confident one.
The seeds to decide are the median and 90th percentile of the simulated stopping points; the cost is
seeds × the pair's two variants × the pilot's mean recorded train time × devices per run.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from src.report.comparisons import Margins, comparison_pairs
from src.report.runs import ReportError
from src.report.sequential_stats import CODES, UNDECIDED, Design, simulate
from src.report.stats import MIN_SEEDS
from src.report.table import AXIS_PREFIX
from src.tracking.variants import Axis, override_of

PLAN_MAX_SEEDS = 1000  # the look schedule the forecast runs out to (per variant)
SWEEPS = 4000  # simulated sweeps per comparison
PLAN_METRIC = "test_loss"  # speed is measured by interleaving (python -m src.bench variants), not by seeds


@dataclass(frozen=True)
class Forecast:
    a: str
    b: str
    pilot_seeds: int
    diff: float  # the pilot's mean difference b - a
    sd: float  # the pilot's spread of per-seed differences
    median_seeds: float  # per variant, to decide (NaN when the pilot cannot say)
    p90_seeds: float
    decided: float  # share of simulated sweeps decided within PLAN_MAX_SEEDS
    equivalent: float  # share decided equivalent
    device_hours_median: float
    device_hours_p90: float
    note: str = ""

    @property
    def pair(self) -> str:
        return f"{self.b} vs {self.a}"


def _pilot_differences(runs: pd.DataFrame, a: str, b: str) -> np.ndarray:
    done = runs[runs.outcome == "finished"]
    va = done[done.variant == a].set_index("seed")[PLAN_METRIC].astype(float)
    vb = done[done.variant == b].set_index("seed")[PLAN_METRIC].astype(float)
    common = sorted(set(va.dropna().index) & set(vb.dropna().index))
    return (vb.loc[common] - va.loc[common]).to_numpy()


def _hours_per_seed(runs: pd.DataFrame, variants: Sequence[str]) -> float:
    """Device-hours one seed of every variant costs: mean train time x devices, summed."""
    total = 0.0
    for v in variants:
        rows = runs[(runs.variant == v) & (runs.outcome == "finished")]
        devices = rows.devices.dropna() if "devices" in rows else pd.Series(dtype=float)
        total += float(rows.train_time_s.mean()) * (float(devices.mean()) if len(devices) else 1.0) / 3600
    return total


def forecast(
    runs: pd.DataFrame,
    margins: Margins,
    first_seeds: int,
    seeds_per_round: int,
    alpha: float,
    pairs: Sequence[tuple[str, str]] | None = None,
    max_seeds: int = PLAN_MAX_SEEDS,
    sweeps: int = SWEEPS,
    reference: Mapping[str, str] | None = None,
) -> list[Forecast]:
    """One forecast per pair present in the pilot (the report's pairs: see the module's docstring)."""
    chosen = [(a, b) for a, b, _ in comparison_pairs(runs, pairs, reference)]
    if not chosen:
        raise ReportError(
            "no pair of variants with finished runs to plan; run a pilot of at least two seeds first"
        )
    margin = margins.test_loss
    design = Design(first_seeds, seeds_per_round, max(max_seeds, first_seeds), alpha, family=len(chosen))
    rng = np.random.default_rng(0)  # seeded: a plan read twice gives the same numbers
    out = []
    for a, b in chosen:
        d = _pilot_differences(runs, a, b)
        d = d[np.isfinite(d)]
        n = len(d)
        hours = _hours_per_seed(runs, (a, b))
        if n < MIN_SEEDS:
            out.append(Forecast(a, b, n, math.nan, math.nan, math.nan, math.nan, 0.0, 0.0, math.nan, math.nan,
                                f"needs ≥{MIN_SEEDS} seeds with both variants finished in the pilot"))  # fmt: skip
            continue
        mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
        # Posterior draws of the spread and the true difference (flat prior on both, normal seeds).
        sigma = sd * np.sqrt((n - 1) / rng.chisquare(n - 1, sweeps)) if sd > 0 else np.zeros(sweeps)
        delta = mean + sigma / math.sqrt(n) * rng.standard_normal(sweeps)
        sim = simulate(design, delta, sigma, margin, sweeps, seed=int(rng.integers(2**31)))
        decided = sim.decision != CODES[UNDECIDED]
        # An undecided sweep counts at the schedule's end: the percentiles then say "at least".
        med, p90 = (float(np.percentile(sim.seeds, q)) for q in (50, 90))
        out.append(
            Forecast(a, b, n, mean, sd, med, p90, float(decided.mean()), sim.rate(CODES["equivalent"]),
                     med * hours, p90 * hours)
        )  # fmt: skip
    return out


def sweep_overrides(runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """The overrides that sweep the pilot's axes again, values in the order they were run."""
    ordered = runs.sort_values("start_time", kind="stable")
    return [override_of(a, list(dict.fromkeys(ordered[AXIS_PREFIX + a.name]))) for a in axes]


def _seeds(value: float, max_seeds: int) -> str:
    if not math.isfinite(value):
        return "-"
    return f">{max_seeds}" if value >= max_seeds else f"{math.ceil(value)}"


def _hours(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.3g}"


def plan_text(
    experiment: str,
    forecasts: Sequence[Forecast],
    margins: Margins,
    design: Mapping[str, float],
    overrides: Sequence[str] | None = None,
    max_seeds: int = PLAN_MAX_SEEDS,
) -> str:
    """The plan as printed: one line per comparison, then the command that runs it (`overrides`: the
    swept axes, as `sweep_overrides` gives them; default: the norms of the comparisons)."""
    rows = [
        {
            "comparison": f.pair,
            "pilot seeds": f.pilot_seeds,
            "Δ test loss": f"{f.diff:+.4f}" if math.isfinite(f.diff) else "-",
            "sd": f"{f.sd:.4f}" if math.isfinite(f.sd) else "-",
            "seeds p50": _seeds(f.median_seeds, max_seeds),
            "seeds p90": _seeds(f.p90_seeds, max_seeds),
            "decided": f"{f.decided:.0%}",
            "as equivalent": f"{f.equivalent:.0%}",
            "device-h p50": _hours(f.device_hours_median),
            "device-h p90": _hours(f.device_hours_p90),
            "note": f.note,
        }
        for f in forecasts
    ]
    table = pd.DataFrame(rows).to_string(index=False)
    variants = sorted({v for f in forecasts for v in (f.a, f.b)})
    p90 = [f.p90_seeds for f in forecasts if math.isfinite(f.p90_seeds)]
    cap = (
        min(max(math.ceil(max(p90)), int(design["first_seeds"])), max_seeds)
        if p90
        else int(design["first_seeds"])
    )
    command = " ".join(
        [
            "python -m src.train -m",
            *(shlex.quote(o) for o in overrides or [f"norm={','.join(variants)}"]),
            "hydra/sweeper=sequential",
            f"hydra.sweeper.first_seeds={int(design['first_seeds'])}",
            f"hydra.sweeper.seeds_per_round={int(design['seeds_per_round'])}",
            f"hydra.sweeper.max_seeds={cap}",
            shlex.quote(f"experiment_name={experiment}"),
        ]
    )
    return "\n".join(
        [
            f"plan for experiment {experiment!r}: seeds per variant (median, 90th percentile) and device-hours to decide "
            f"each comparison of test loss (equivalence margin ±{margins.test_loss:g} nats, alpha {design['alpha']:g} over the family), "
            f"by {SWEEPS:,} simulated sequential sweeps from the pilot's paired differences",
            table,
            "",
            "run it (with the pilot's other overrides; the pilot's finished seeds count, nothing is trained twice):",
            f"  {command}",
        ]
    )
