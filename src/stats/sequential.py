"""Decisions on paired seed differences that stay honest when a sweep looks after every round.

α is split evenly over the family's comparisons and each share spent over a look schedule fixed
before launch (`Design`): at each look equivalent by TOST, else different by the paired t-test, else
open, or undecidable (futility). The rule, its references and why it keeps its error rate (the union
bound; a non-binding futility check): docs/sequential.md, "The stopping rule and why it keeps its
error rate".

Why not the fixed-n level at every look: paired t-tests at 0.05 after 2, 4, 6, 8 and 10 seeds say
"different" 16.1% of the time under no effect (`naive_looks_error`, 200,000 simulated sweeps; the
14% usually quoted is for z-tests with a known variance at five equally spaced looks, which the
small-n t-tests exceed). `simulate` measures how conservative the union bound is.

Torch-free and MLflow-free: numbers in, decisions out. `python -m src.stats` (its `__main__`)
prints the operating characteristics (error rates, seeds, power) that docs/sequential.md quotes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from scipy import stats

from src.stats.inference import MIN_SEEDS, RESOLUTION, at_level, paired_t
from src.stats.settings import OBRIEN_FLEMING, POCOCK, SPENDING
from src.stats.verdicts import SequentialWord, first_seeds, least_detectable, look_word, shown_without_spread

EQUIVALENT, DIFFERENT, UNDECIDED, UNDECIDABLE = (SequentialWord.EQUIVALENT, SequentialWord.DIFFERENT, SequentialWord.UNDECIDED,
                                                 SequentialWord.UNDECIDABLE)  # fmt: skip


def spent(alpha: float, fraction: float, spending: str = POCOCK) -> float:
    """Error spent by information fraction `fraction` (0..1), Lan–DeMets' function of the given type."""
    t = min(max(fraction, 0.0), 1.0)
    if spending == POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    if spending == OBRIEN_FLEMING:
        return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(t))) if t else 0.0
    raise ValueError(f"spending must be one of {SPENDING}, got {spending!r}")


@dataclass(frozen=True)
class Design:
    """The look schedule, error budget and futility threshold of a sequential sweep (fixed before
    the first seed)."""

    first_seeds: int
    seeds_per_round: int
    max_seeds: int
    alpha: float
    spending: str  # POCOCK | OBRIEN_FLEMING
    futility: float  # stop as undecidable when the chance of a later decision is below this; 0: never
    family: int = 1  # comparisons (pairs x metrics) sharing alpha

    def __post_init__(self) -> None:
        # Callers validate user input (ConfigError naming hydra.sweeper.*); this guards the math.
        if not (MIN_SEEDS <= self.first_seeds <= self.max_seeds and self.seeds_per_round >= 1):
            raise ValueError(f"invalid look schedule: {self}")
        if not (0 < self.alpha < 1 and self.family >= 1 and self.spending in SPENDING and 0 <= self.futility < 1):
            raise ValueError(f"invalid error budget: {self}")

    @classmethod
    def of(cls, settings: Mapping[str, Any], family: int = 1) -> Design:
        """The design a sequential sweeper's settings fix (`hydra.sweeper`, checked first: src.stats.settings)."""
        return cls(**{f.name: settings[f.name] for f in fields(cls) if f.name != "family"}, family=family)

    def looks(self) -> list[int]:
        """Seeds per variant at each look: first_seeds, +seeds_per_round, ..., max_seeds."""
        return [*range(self.first_seeds, self.max_seeds, self.seeds_per_round), self.max_seeds]

    def spent_by(self) -> list[float]:
        """The level spent per comparison by each look, cumulatively (the last is alpha / family)."""
        share = self.alpha / self.family
        return [spent(share, n / self.max_seeds, self.spending) for n in self.looks()]

    def levels(self) -> list[float]:
        """The level each look tests at, per comparison (they sum to alpha / family)."""
        return np.diff([0.0, *self.spent_by()]).tolist()


@dataclass(frozen=True)
class LookResult:
    """One comparison at one look: the mean paired difference, its (1 - level) interval, the tests."""

    n: int
    diff: float
    low: float
    high: float
    p: float  # paired t-test, H0: no difference
    tost_p: float  # TOST, H0: |difference| >= margin
    level: float
    decision: SequentialWord  # equivalent | different | undecided | undecidable
    chance: float = math.nan  # predictive probability that a later look decides (when it was computed)
    detectable: float = math.nan  # for an open or undecidable comparison: the least |Δ| the budget detects


def decision_chance(design: Design, look: int, mean: np.ndarray | float, sd: np.ndarray | float,
                    margin: float) -> np.ndarray:  # fmt: skip
    """Predictive probability (a lower bound) that a look after `look` (0-based) decides, given the
    mean and spread of the differences at `look` (docs/sequential.md, "Futility"). 1 at the last look."""
    looks, levels = design.looks(), design.levels()
    n = looks[look]
    m = np.abs(np.asarray(mean, dtype=float))  # the rule is symmetric in the sign of the difference
    s = np.asarray(sd, dtype=float)
    best = np.full(np.broadcast(m, s).shape, float(look == len(looks) - 1))
    for n_j, a_j in zip(looks[look + 1 :], levels[look + 1 :], strict=True):
        se = s / math.sqrt(n_j)
        far = stats.t.ppf(1 - a_j / 2, n_j - 1) * se  # |mean| beyond this: different
        near = margin - stats.t.ppf(1 - a_j, n_j - 1) * se  # |mean| within this: equivalent
        spread = s * math.sqrt((n_j - n) / (n_j * n))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = [stats.t.cdf((x - m) / spread, n - 1) for x in (-far, far, -near, near)]
            beyond = np.where(spread > 0, z[0] + 1 - z[1], (m >= far).astype(float))
            within = np.where(spread > 0, z[3] - z[2], (m <= near).astype(float))
        chance = np.where(near >= far, 1.0, beyond + np.where(near > 0, within, 0.0))
        best = np.maximum(best, chance)
    return best


def detectable(design: Design, look: int, sd: float) -> float:
    """The least |Δ| that one of the looks after `look` (the last look, at the end) detects as
    different with 80% power at its own level, when the seed differences spread by `sd` (the same
    power calculation as a fixed-n pair's "would settle it": src.stats.verdicts.least_detectable)."""
    looks, levels = design.looks(), design.levels()
    later = range(min(look + 1, len(looks) - 1), len(looks))
    return min(least_detectable(looks[j], sd, levels[j]) for j in later)


def look_at(design: Design, look: int, differences: np.ndarray, margin: float) -> LookResult:
    """The sweeper's decision at look `look` (0-based) on the finite per-seed differences (b - a), at
    that look's level; then, for a comparison still open before the last look, the futility check."""
    level = design.levels()[look]
    t = paired_t(np.zeros(len(differences)), differences)  # the non-finite ones dropped there
    if t.n < MIN_SEEDS:
        return LookResult(t.n, t.diff, math.nan, math.nan, math.nan, math.nan, level, UNDECIDED)
    p = t.p_value if math.isfinite(t.p_value) else 1.0  # every seed at exactly 0: nothing to detect
    tost_p, decision = look_word(t.diff, t.se, t.df, p, margin, level)
    result = LookResult(t.n, t.diff, *at_level(t, level), p, tost_p, level, decision)
    if decision != UNDECIDED:
        return result
    last = look == len(design.looks()) - 1
    chance = math.nan if last else float(decision_chance(design, look, t.diff, t.sd, margin))  # NaN: never futile
    return replace(result, decision=UNDECIDABLE if chance < design.futility else UNDECIDED, chance=chance,
                   detectable=detectable(design, look, t.sd))  # fmt: skip


# --- simulation: error rates, seeds used, and the planner's forecasts ---------------------------


@dataclass(frozen=True)
class Simulated:
    """Outcomes of simulated sequential comparisons: decision code and seeds used per sweep."""

    decision: np.ndarray  # CODES: 0 undecided at max_seeds, 1 equivalent, 2 different, 3 undecidable
    seeds: np.ndarray  # seeds per variant when it stopped (max_seeds when undecided)

    def rate(self, code: int) -> float:
        return float(np.mean(self.decision == code))


CODES = {UNDECIDED: 0, EQUIVALENT: 1, DIFFERENT: 2, UNDECIDABLE: 3}


def simulate_differences(design: Design, differences: np.ndarray, margin: float,
                         levels: Sequence[float] | None = None) -> Simulated:  # fmt: skip
    """Run the sequential rule on many sweeps at once; `differences` is (sweeps, max_seeds). Vectorised
    over sweeps: per look, the t and TOST statistics of every open sweep's first n_k values, then the
    futility check (`decision_chance`) of those still open. `levels` replaces the design's per-look
    levels (to show what naive repeated testing does)."""
    d = np.asarray(differences, dtype=float)
    sweeps = d.shape[0]
    decision = np.zeros(sweeps, dtype=np.int8)
    seeds = np.full(sweeps, design.max_seeds)
    csum, csq = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    largest = np.maximum.accumulate(np.abs(d), axis=1)  # rounding's scale, as `alike` takes it
    looks = design.looks()
    for k, (n, level) in enumerate(zip(looks, levels or design.levels(), strict=True)):
        rows = np.flatnonzero(decision == 0)  # the sweeps still looking
        if not len(rows):
            break
        mean = csum[rows, n - 1] / n
        sd = np.sqrt(np.maximum(csq[rows, n - 1] - n * mean * mean, 0.0) / (n - 1))
        sd = np.where(sd <= RESOLUTION * largest[rows, n - 1], 0.0, sd)  # the cumulative sums' cancellation is no spread
        se = sd / math.sqrt(n)
        # p < level as critical values: |t| beyond t(1 - level/2) for the t-test; for TOST both
        # one-sided statistics beyond t(1 - level).
        q_two, q_one = stats.t.ppf(1 - level / 2, n - 1), stats.t.ppf(1 - level, n - 1)
        # No spread reads as `look_at` reads it (src.stats.verdicts.look_word): inside the margin
        # equivalent (the t statistics are infinite there), a difference by the sign-flip test's p.
        with np.errstate(divide="ignore", invalid="ignore"):
            equivalent = ((mean + margin) / se > q_one) & ((mean - margin) / se < -q_one)
            shown = np.where(se > 0, np.abs(mean) / se > q_two, (mean != 0) & shown_without_spread(n, level))
            different = ~equivalent & shown
        decision[rows[equivalent]], decision[rows[different]] = CODES[EQUIVALENT], CODES[DIFFERENT]
        seeds[rows[equivalent | different]] = n
        if design.futility > 0 and k < len(looks) - 1:
            open_ = ~(equivalent | different)
            futile = decision_chance(design, k, mean[open_], sd[open_], margin) < design.futility
            stopped = rows[open_][futile]
            decision[stopped], seeds[stopped] = CODES[UNDECIDABLE], n
    return Simulated(decision, seeds)


def simulate(design: Design, delta: float | np.ndarray, sd: float | np.ndarray, margin: float, sweeps: int,
             seed: int = 0) -> Simulated:  # fmt: skip
    """`sweeps` sequential comparisons with normal seed differences of mean `delta` and spread `sd`
    (scalars, or one value per sweep)."""
    rng = np.random.default_rng(seed)
    delta = np.broadcast_to(np.asarray(delta, dtype=float), (sweeps,))[:, None]
    sd = np.broadcast_to(np.asarray(sd, dtype=float), (sweeps,))[:, None]
    return simulate_differences(design, delta + sd * rng.standard_normal((sweeps, design.max_seeds)), margin)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of a rate (Clopper & Pearson 1934)."""
    found = stats.binomtest(successes, trials).proportion_ci(confidence, method="exact")
    return float(found.low), float(found.high)


def correct_code(delta: float, margin: float) -> int:
    """The right verdict for a true difference: equivalent within the margin, else different."""
    return CODES[EQUIVALENT] if abs(delta) < margin else CODES[DIFFERENT]


def fixed_seeds_for_power(power: float, delta: float, sd: float, margin: float, alpha: float, sweeps: int,
                          most: int = 1000, seed: int = 0) -> int | None:  # fmt: skip
    """The fewest seeds a fixed design (one look at level alpha, simulated like `simulate`) needs to
    decide correctly (`correct_code`) as often as `power` (None if `most` is not enough)."""

    def reaches(n: int) -> bool:
        one_look = Design(n, 1, n, alpha, POCOCK, 0.0)  # one look spends all of alpha, whatever the function
        return simulate(one_look, delta, sd, margin, sweeps, seed).rate(correct_code(delta, margin)) >= power

    return first_seeds(reaches, most)


# --- operating characteristics: the tables of docs/sequential.md --------------------------------

MARGIN, SD, SWEEPS = 0.01, 0.01, 10_000  # the tables' margin and seed spread (nats), sweeps per case


def _row(design: Design, delta: float, sd: float, seed: int) -> dict[str, float]:
    sim = simulate(design, delta, sd, MARGIN, SWEEPS, seed)
    return {
        "mean seeds": float(sim.seeds.mean()),
        "p90 seeds": float(np.percentile(sim.seeds, 90)),
        **{name: sim.rate(code) for name, code in CODES.items()},
        "correct": sim.rate(correct_code(delta, MARGIN)),
    }


def tables(default: Design) -> str:
    """Markdown: error rates with futility on, seeds with and without futility at half the margin,
    and both spending functions at three effect sizes, for `default`'s schedule (10,000 sweeps each)."""
    out = [f"Schedule {default.looks()} seeds, alpha {default.alpha}, margin {MARGIN} nats, {SWEEPS:,} sweeps per row.", ""]
    out += ["| spending | futility | truth | error counted | rate | 95% Clopper–Pearson |", "|---|---|---|---|---|---|"]
    for spending in SPENDING:
        design = replace(default, spending=spending)
        for delta, wrong in ((0.0, DIFFERENT), (MARGIN, EQUIVALENT)):
            errors = int(np.sum(simulate(design, delta, SD, MARGIN, SWEEPS, seed=1).decision == CODES[wrong]))
            low, high = clopper_pearson(errors, SWEEPS)
            out.append(f"| {spending} | {design.futility:g} | Δ = {delta:g}, σ = {SD:g} | false *{wrong}* | "
                       f"{errors / SWEEPS:.4f} | [{low:.4f}, {high:.4f}] |")  # fmt: skip
    out += ["", "| spending | futility | Δ | σ | mean seeds | p90 | equivalent | different | undecidable | undecided |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for spending in SPENDING:
        for delta in (MARGIN / 2, 0.0, 2 * MARGIN):
            for futility in (0.0, default.futility):
                r = _row(replace(default, spending=spending, futility=futility), delta, SD, seed=2)
                out.append(f"| {spending} | {futility:g} | {delta:g} | {SD:g} | {r['mean seeds']:.2f} | {r['p90 seeds']:.0f} | "
                           f"{r[EQUIVALENT]:.3f} | {r[DIFFERENT]:.3f} | {r[UNDECIDABLE]:.3f} | {r[UNDECIDED]:.3f} |")  # fmt: skip
    out += ["", "| σ | Δ | right verdict | Pocock: mean seeds | Pocock: power | O'Brien–Fleming: mean seeds | O'Brien–Fleming: power |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for sd in (SD / 2, SD):
        for delta in (0.0, MARGIN, 2 * MARGIN):
            p, o = (_row(replace(default, spending=s), delta, sd, seed=3) for s in SPENDING)
            right = EQUIVALENT if abs(delta) < MARGIN else DIFFERENT
            out.append(f"| {sd:g} | {delta:g} | {right} | {p['mean seeds']:.2f} | {p['correct']:.3f} | "
                       f"{o['mean seeds']:.2f} | {o['correct']:.3f} |")  # fmt: skip
    return "\n".join(out)


def naive_looks_error(looks: Sequence[int], alpha: float = 0.05, sweeps: int = 200_000, seed: int = 0) -> float:
    """How often a paired t-test at the fixed level `alpha`, repeated at each look (seeds per variant), says
    "different" at some look when there is no effect: the inflation this module's spending avoids."""
    x = np.random.default_rng(seed).standard_normal((sweeps, max(looks)))
    rejected = np.zeros(sweeps, dtype=bool)
    for n in looks:
        rejected |= stats.ttest_1samp(x[:, :n], 0.0, axis=1).pvalue < alpha
    return float(rejected.mean())
