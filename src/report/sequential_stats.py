"""Decisions on paired seed differences that stay honest when a sweep looks after every round.

A sequential sweep looks at its comparisons after each round of seeds and stops a comparison once
it is decided. Testing every look at the fixed-n level α would inflate false decisions (five looks
at 0.05 each give a false "different" about 14% of the time under no effect). The rule here:

**Group-sequential alpha spending with Bonferroni across the family and the looks.**
The look schedule is fixed before launch: n_1 = first_seeds, n_k = n_{k-1} + seeds_per_round, up
to n_K = max_seeds (seeds per variant). The error rate α is split evenly over the family's m
comparisons (Bonferroni: α/m each), and each comparison's share is spent over the looks with the
Lan–DeMets spending function of Pocock type, α(t) = α/m · ln(1 + (e − 1)·t) with t = n_k / n_K
(K. K. G. Lan and D. L. DeMets, "Discrete sequential boundaries for clinical trials",
Biometrika 70(3):659–663, 1983). Look k gets the increment α_k = α(t_k) − α(t_{k−1}), and runs two
exact fixed-n tests on the n_k paired differences at that level:

- **equivalent** when TOST at the margin gives p < α_k (the (1 − 2α_k) interval lies within ±margin),
- else **different** when the paired t-test gives p < α_k (the (1 − α_k) interval excludes 0).

Why it holds: for one comparison only one of the two errors is possible (a false "different"
needs a true difference of 0; a false "equivalent" needs |true difference| ≥ margin), and each
look's test has size at most α_k, so by the union bound over looks the comparison errs with
probability at most Σ α_k = α/m, and the family (union over comparisons) at most α. The bound
uses no joint-normal approximation of the looks' statistics, which matters here: Student's t is
exact for normal seed differences at n = 2 or 3, where the usual group-sequential boundaries
(built for known variance) are not. It is conservative; `simulate` measures by how much, and the
test suite runs ≥10,000 simulated sweeps under no effect and under an effect at the margin.
Pocock-type spending front-loads the error budget so that an early look can already decide.

Torch-free and MLflow-free: numbers in, decisions out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from src.report.stats import MIN_SEEDS, paired_t, tost

EQUIVALENT, DIFFERENT, UNDECIDED = "equivalent", "different", "undecided"


def spent(alpha: float, fraction: float) -> float:
    """Error spent by information fraction `fraction` (0..1): Lan–DeMets' Pocock-type function."""
    return alpha * math.log(1 + (math.e - 1) * min(max(fraction, 0.0), 1.0))


@dataclass(frozen=True)
class Design:
    """The look schedule and error budget of a sequential sweep (fixed before the first seed)."""

    first_seeds: int
    seeds_per_round: int
    max_seeds: int
    alpha: float
    family: int = 1  # comparisons (pairs x metrics) sharing alpha

    def __post_init__(self) -> None:
        # Callers validate user input (ConfigError naming hydra.sweeper.*); this guards the math.
        if not (MIN_SEEDS <= self.first_seeds <= self.max_seeds and self.seeds_per_round >= 1):
            raise ValueError(f"invalid look schedule: {self}")
        if not (0 < self.alpha < 1 and self.family >= 1):
            raise ValueError(f"invalid error budget: {self}")

    def looks(self) -> list[int]:
        """Seeds per variant at each look: first_seeds, +seeds_per_round, ..., max_seeds."""
        out = list(range(self.first_seeds, self.max_seeds, self.seeds_per_round))
        return [*out, self.max_seeds]

    def levels(self) -> list[float]:
        """The level each look tests at, per comparison (they sum to alpha / family)."""
        share = self.alpha / self.family
        cumulative = [spent(share, n / self.max_seeds) for n in self.looks()]
        return [b - a for a, b in zip([0.0, *cumulative[:-1]], cumulative, strict=True)]

    def level_at(self, n: int) -> float:
        return self.levels()[self.looks().index(n)]


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
    decision: str  # equivalent | different | undecided


def decide(differences: np.ndarray, margin: float, level: float) -> LookResult:
    """The decision on the finite per-seed differences (b - a) at one look's level."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    t = paired_t(np.zeros(len(d)), d)
    if t.n < MIN_SEEDS:
        return LookResult(t.n, t.diff, math.nan, math.nan, math.nan, math.nan, level, UNDECIDED)
    half = 0.0 if t.se == 0 else float(stats.t.ppf(1 - level / 2, t.df)) * t.se
    tost_p = tost(t.diff, t.se, t.df, margin)
    p = t.p_value if math.isfinite(t.p_value) else 1.0  # every seed at exactly 0: nothing to detect
    decision = EQUIVALENT if tost_p < level else DIFFERENT if p < level else UNDECIDED
    return LookResult(t.n, t.diff, t.diff - half, t.diff + half, p, tost_p, level, decision)


# --- simulation: error rates, seeds used, and the planner's forecasts ---------------------------


@dataclass(frozen=True)
class Simulated:
    """Outcomes of simulated sequential comparisons: decision code and seeds used per sweep."""

    decision: np.ndarray  # 0 undecided, 1 equivalent, 2 different
    seeds: np.ndarray  # seeds per variant when it stopped (max_seeds when undecided)

    def rate(self, code: int) -> float:
        return float(np.mean(self.decision == code))


CODES = {UNDECIDED: 0, EQUIVALENT: 1, DIFFERENT: 2}


def simulate_differences(
    design: Design, differences: np.ndarray, margin: float, levels: list[float] | None = None
) -> Simulated:
    """Run the sequential rule on many sweeps at once; `differences` is (sweeps, max_seeds).

    Vectorised over sweeps: per look, the t and TOST statistics of every open sweep's first n_k values.
    `levels` replaces the design's per-look levels (to show what naive repeated testing does).
    """
    d = np.asarray(differences, dtype=float)
    sweeps = d.shape[0]
    decision = np.zeros(sweeps, dtype=np.int8)
    seeds = np.full(sweeps, design.max_seeds)
    csum, csq = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    for n, level in zip(design.looks(), levels or design.levels(), strict=True):
        rows = np.flatnonzero(decision == 0)  # the sweeps still looking
        if not len(rows):
            break
        mean = csum[rows, n - 1] / n
        se = np.sqrt(np.maximum(csq[rows, n - 1] - n * mean * mean, 0.0) / (n - 1) / n)
        # p < level as critical values: |t| beyond t(1 - level/2) for the t-test; for TOST both
        # one-sided statistics beyond t(1 - level).
        q_two, q_one = stats.t.ppf(1 - level / 2, n - 1), stats.t.ppf(1 - level, n - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            equivalent = ((mean + margin) / se > q_one) & ((mean - margin) / se < -q_one)
            different = ~equivalent & (np.abs(mean) / se > q_two)
        decision[rows[equivalent]], decision[rows[different]] = CODES[EQUIVALENT], CODES[DIFFERENT]
        seeds[rows[equivalent | different]] = n
    return Simulated(decision, seeds)


def simulate(
    design: Design,
    delta: float | np.ndarray,
    sd: float | np.ndarray,
    margin: float,
    sweeps: int,
    seed: int = 0,
) -> Simulated:
    """`sweeps` sequential comparisons with normal seed differences of mean `delta` and spread `sd`
    (scalars, or one value per sweep)."""
    rng = np.random.default_rng(seed)
    delta = np.broadcast_to(np.asarray(delta, dtype=float), (sweeps,))[:, None]
    sd = np.broadcast_to(np.asarray(sd, dtype=float), (sweeps,))[:, None]
    return simulate_differences(design, delta + sd * rng.standard_normal((sweeps, design.max_seeds)), margin)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of a rate (Clopper & Pearson 1934)."""
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(stats.beta.ppf(1 - tail, successes + 1, trials - successes))
    return low, high


def fixed_power(
    n: int, delta: float, sd: float, margin: float, alpha: float, sweeps: int, seed: int = 0
) -> float:
    """Power of a fixed design of n seeds, one look at level alpha, to decide correctly.

    Correct means equivalent when |delta| < margin, else different (simulated like `simulate`).
    """
    n = max(n, MIN_SEEDS)
    result = simulate(Design(n, 1, n, alpha), delta, sd, margin, sweeps, seed)  # one look spends all of alpha
    return result.rate(CODES[EQUIVALENT] if abs(delta) < margin else CODES[DIFFERENT])


def fixed_seeds_for_power(
    power: float,
    delta: float,
    sd: float,
    margin: float,
    alpha: float,
    sweeps: int,
    most: int = 1000,
    seed: int = 0,
) -> int | None:
    """The fewest seeds a single-look design needs to match `power` (None if `most` is not enough)."""
    if fixed_power(most, delta, sd, margin, alpha, sweeps, seed) < power:
        return None
    low, high = MIN_SEEDS - 1, most  # power grows with n: bisect for the first n that reaches it
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (
            (low, mid) if fixed_power(mid, delta, sd, margin, alpha, sweeps, seed) >= power else (mid, high)
        )
    return high
