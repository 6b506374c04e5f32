"""Paired comparisons of the variants that matter, with a verdict per pair. Every variant of one seed
starts from the same initial weights and data order, so two variants are compared seed by seed on test
loss (Welch's where their seed sets share fewer than two seeds): the tests, the margin, Holm and the
verdict rule are docs/statistics.md's ("Paired by seed"). Speed is the speed check's
(src.report.judge.speed). Data only: src.report.words.pairs writes the words.

Which pairs: `PAIRS` and `comparison_pairs` (several swept axes: docs/sweeps.md, "which pairs are compared").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from src.core.norm_yamls import builtin_variants
from src.core.schema import USER_NORM_REFERENCE
from src.report.read.settings import METRICS, Margins, reference_values
from src.report.read.table import AXIS_PREFIX, families_of, order_of
from src.stats.inference import ALPHA, MIN_SEEDS, Interval, paired_bootstrap, paired_t, welch
from src.stats.pairs import pair_label
from src.stats.verdicts import Decision, Estimate, PairWord, decide_family, pair_word
from src.tracking.tags import FINISHED
from src.tracking.variants import NORM_AXIS, reference_of

# (a, b): b is measured against a. Hand-rolled vs built-in, LayerNorm vs RMSNorm, the additions
# against the usual LayerNorm; every variant is also compared with NO_NORM (added by `pairs_for`).
PAIRS: tuple[tuple[str, str], ...] = (
    ("hand_layernorm", "torch_layernorm"),
    ("hand_rmsnorm", "torch_rmsnorm"),
    ("hand_rmsnorm", "fast_rmsnorm"),
    ("torch_layernorm", "torch_rmsnorm"),
    ("hand_layernorm", "hand_rmsnorm"),
    ("torch_layernorm", "dyt"),
    ("dyt", "fast_dyt"),
    ("torch_layernorm", "scalenorm"),
    ("torch_layernorm", "torch_layernorm_nobias"),
    ("torch_layernorm", "layernorm_noaffine"),
)
NO_NORM = "no_norm"


def paired_difference(metric: str, a: Any, b: Any) -> Any:
    """b measured against a on `metric`, seed by seed (scalars or arrays): b - a (nats of test loss),
    or b / a - 1 for a relative metric (tokens/s)."""
    return b / a - 1 if METRICS[metric][2] else b - a


def finished_variants(runs: pd.DataFrame) -> dict[str, str]:
    """Variants with at least one finished run, with their family: one that always diverged has nothing to pair."""
    return families_of(runs[runs.outcome == FINISHED])


@dataclass(frozen=True)
class Unmatched:
    """A requested pair not compared: the side(s) without finished runs in this experiment."""

    a: str
    b: str
    missing: tuple[str, ...]


def unmatched_pairs(runs: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> list[Unmatched]:
    """Each requested pair that is not compared, with the side(s) that have no finished runs."""
    have = set(finished_variants(runs))
    return [Unmatched(a, b, tuple(v for v in (a, b) if v not in have)) for a, b in pairs if not {a, b} <= have]


def pairs_for(present: Mapping[str, str], pairs: Sequence[tuple[str, str]] | None = None,
              references: Mapping[str, str] | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """The pairs whose both sides are `present` (variant -> family); by default, in this order: `PAIRS`; each
    variant no conf/norm YAML names (a norm of the user's, `_target_`) against a built-in: the reference its
    YAML names (`references`, from its runs' tags) when swept, else the first built-in of its family, else
    torch_layernorm, else the first built-in in the table's order; each variant still in no pair (no study
    pair has both its sides here: `dyt` beside `torch_rmsnorm`) against the sweep's reference among the
    built-ins (src.tracking.variants.reference_of, in the table's order), so that every swept variant has a
    loss verdict and, timed, a speed verdict; then every variant against no_norm."""
    have = set(present)
    if pairs is not None:
        return [p for p in pairs if set(p) <= have]
    known = set(builtin_variants())
    order = order_of(present)
    builtins = [v for v in order if v in known]
    out = [p for p in PAIRS if set(p) <= have]
    for variant in (v for v in order if v not in known and builtins):
        kin = [b for b in builtins if present.get(b) and present.get(b) == present.get(variant)]
        fallback = [USER_NORM_REFERENCE] if USER_NORM_REFERENCE in builtins else builtins
        chosen = (references or {}).get(variant)
        out.append((chosen if chosen in builtins else (kin or fallback)[0], variant))
    others = [v for v in order if v != NO_NORM]
    reference = reference_of([v for v in others if v in known] or others)
    paired = {v for pair in out for v in pair}
    out += [(reference, v) for v in others if v not in paired and v != reference] if reference else []
    if NO_NORM in have:
        # Sorted like the table (LayerNorms, RMSNorms, others) so the report reads in one order.
        out += [(NO_NORM, v) for v in order if v != NO_NORM]
    return out


def reference_pairs(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(reference, variant, ""): every variant with a finished run against the report's one loss
    reference (the table's `test loss vs` column's: src.tracking.variants.reference_of, in the table's order)."""
    order = order_of(finished_variants(runs))
    reference = reference_of(order)
    return [(reference, v, "") for v in order if v != reference] if reference else []


def user_references(runs: pd.DataFrame) -> dict[str, str]:
    """variant -> the reference its runs recorded (norms of the user's; src.tracking.tags NORM_REFERENCE_TAG)."""
    if "norm_reference" not in runs:
        return {}
    named = runs[runs.norm_reference != ""]
    return dict(zip(named.variant, named.norm_reference, strict=True))


@dataclass(frozen=True)
class Result:
    """One pair on one metric: the primary test, the bootstrap check, TOST, Holm and the verdict."""

    a: str
    b: str
    metric: str
    primary: Interval  # paired_t, or welch when the seed sets do not overlap enough
    bootstrap: Interval | None  # the paired bootstrap (None for welch)
    margin: float
    n_a: int  # finished runs of a with a value
    n_b: int
    left_out: int  # runs of a or b (any outcome) not in the comparison
    sd: float  # the spread of one paired difference (Welch: of one run's), what the decision's power reads
    axis: str = ""  # the swept axis the pair differs in, when the sweep varied several (or not the norm)
    p_holm: float = math.nan
    decision: Decision | None = None  # src.stats.verdicts' readings (None: no spread to test with)
    family: int = 0  # the tests Holm adjusted `p_holm` over (src.stats.verdicts.Family), the same for every pair

    @property
    def pair(self) -> str:
        return pair_label(self.a, self.b)

    @property
    def reason(self) -> str:
        """Why the pair has no interval to test, or "" when it has one."""
        if self.primary.test == "paired_t" and self.primary.n < MIN_SEEDS:
            return f"{self.primary.n} seed(s) with both variants finished; needs ≥{MIN_SEEDS}"
        if not math.isfinite(self.primary.low):
            return f"needs ≥{MIN_SEEDS} finished seeds per variant (n = {self.n_b} vs {self.n_a})"
        return ""

    @property
    def verdict(self) -> PairWord:
        return pair_word(self.decision)

    @property
    def tost_p(self) -> float:
        return self.decision.tost_p if self.decision else math.nan

    @property
    def seeds(self) -> int | None:
        """Inconclusive: the seeds (pairs) that would settle it at 80% power."""
        return self.decision.settle if self.decision else None


def seed_values(runs: pd.DataFrame, variant: str, metric: str) -> pd.Series:
    """The metric of each finished run of one variant, indexed by seed (NaNs dropped)."""
    rows = runs[(runs.variant == variant) & (runs.outcome == FINISHED)]
    return rows.set_index("seed")[metric].astype(float).dropna()


def compare_one(runs: pd.DataFrame, a: str, b: str, metric: str, margin: float, axis: str = "") -> Result:
    """b against a on `metric` over seeds, not yet judged (`compare_family` adds Holm and the decision)."""
    va, vb = seed_values(runs, a, metric), seed_values(runs, b, metric)
    total = int(((runs.variant == a) | (runs.variant == b)).sum())
    common = sorted(set(va.index) & set(vb.index))
    relative = METRICS[metric][2]
    if len(common) >= MIN_SEEDS or min(len(va), len(vb)) < MIN_SEEDS:
        xa, xb = va.loc[common].to_numpy(), vb.loc[common].to_numpy()
        if relative:  # per-seed relative change, tested against 0
            xa, xb = np.zeros(len(common)), paired_difference(metric, xa, xb)
        primary, boot = paired_t(xa, xb), paired_bootstrap(xa, xb)
        used, sd = 2 * len(common), primary.sd
    else:  # the seed sets barely overlap: compare the groups unpaired
        primary, boot = welch(va.to_numpy(), vb.to_numpy()), None
        if relative:
            scale = float(va.mean())
            primary = Interval("welch", primary.n, primary.diff / scale, primary.low / scale, primary.high / scale,
                               primary.p_value, primary.se / scale, primary.df)  # fmt: skip
        used, sd = len(va) + len(vb), primary.se * math.sqrt(min(len(va), len(vb)))
    return Result(a, b, metric, primary, boot, margin, len(va), len(vb), total - used, sd, axis)


def comparison_pairs(runs: pd.DataFrame, pairs: Sequence[tuple[str, str]] | None = None,
                     reference: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:  # fmt: skip
    """(a, b, axis): the pairs of variants to compare, b against a, and the axis they differ in.
    Without a swept axis other than the norm: the norms' pairs (`pairs_for`), axis "". Otherwise, per
    axis, every two variants that differ in that axis alone: for the norm its pairs (families), for
    any other axis each value against the reference (`reference`, else the first value run)."""
    axes = [c.removeprefix(AXIS_PREFIX) for c in runs.columns if c.startswith(AXIS_PREFIX)]  # an `axis.<name>` column each
    # axis -> reference value, checked against the values run, in the order run (none: a ConfigError).
    ordered = runs.sort_values("start_time", kind="stable") if reference else runs
    refs = reference_values(reference, {a: list(dict.fromkeys(ordered[AXIS_PREFIX + a])) for a in axes})
    if axes in ([], [NORM_AXIS]) and NORM_AXIS not in refs:
        return [(a, b, "") for a, b in pairs_for(finished_variants(runs), pairs, user_references(runs))]
    finished = runs[runs.outcome == FINISHED].sort_values("start_time", kind="stable")
    columns = [AXIS_PREFIX + a for a in axes]
    labels = dict(zip(map(tuple, finished[columns].to_numpy()), finished.variant, strict=True))
    families = dict(zip(finished.norm, finished.family, strict=True)) if "norm" in finished else {}
    out: list[tuple[str, str, str]] = []
    for i, axis in enumerate(axes):
        groups: dict[tuple, dict[str, str]] = {}  # the other axes' values -> this axis's value -> label
        for values, label in labels.items():
            groups.setdefault(values[:i] + values[i + 1 :], {})[values[i]] = label
        shown = axis.rsplit(".", 1)[-1] if len(axes) > 1 else axis
        for by_value in groups.values():
            out += [(by_value[a], by_value[b], shown) for a, b in _value_pairs(axis, by_value, families, pairs, refs)]
    return out


def _value_pairs(axis: str, by_value: Mapping[str, str], families: Mapping[str, str],
                 pairs: Sequence[tuple[str, str]] | None, refs: Mapping[str, str]) -> list[tuple[str, str]]:  # fmt: skip
    """Pairs of one axis's values present together: the norms' pairs, else each against the reference."""
    values = list(by_value)
    if axis == NORM_AXIS and axis not in refs:
        chosen = pairs_for({v: families.get(v, "unknown") for v in values}, pairs)
        if chosen or pairs is not None:
            return chosen
    ref = refs.get(axis, values[0])
    return [(ref, v) for v in values if v != ref] if ref in by_value else []


def compare(runs: pd.DataFrame, margins: Margins | None = None, pairs: Sequence[tuple[str, str]] | None = None,
            reference: Mapping[str, str] | None = None) -> list[Result]:  # fmt: skip
    """Every pair with runs on both sides (`comparison_pairs`), on test loss; Holm over the whole family."""
    return compare_family(runs, comparison_pairs(runs, pairs, reference), margins or Margins())


def compare_family(runs: pd.DataFrame, chosen: Sequence[tuple[str, str, str]], margins: Margins) -> list[Result]:
    """`chosen` (a, b, axis) on test loss, one family: Holm over these pairs alone."""
    items = [compare_one(runs, a, b, "test_loss", margins.of("test_loss"), axis) for a, b, axis in chosen]
    # A pair with no interval (`Result.reason`) has no finite standard error either: decide_pair decides nothing.
    estimates = [Estimate.of(r.primary, r.margin, r.sd) for r in items]
    # Holm runs once: its p-values, their count and the decisions read them
    found, adjusted, family = decide_family(estimates, ALPHA)
    return [replace(r, p_holm=p, decision=d, family=family) for r, p, d in zip(items, adjusted, found, strict=True)]


def family_of(results: Sequence[Result]) -> int:
    """The tests Holm adjusted the report's pairs over (0 with no pair)."""
    return results[0].family if results else 0
