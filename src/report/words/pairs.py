"""The paired comparisons' words: one sentence per pair, the section's heading, comparisons.csv's
verdict column, and the interleaved speed sentence of a check without the norms' kernels.

The one writer of these facts (src.report.judge.pairs and src.report.analysis hold the data):

- a pair's verdict (`verdict_text`), written from its `Decision`, never with numbers of its own:
  where numbers go beside it, they are the interval it was read from, its level said (src.report.numbers.estimate_text);
- a p-value, through src.report.numbers.p_text: never `p = 0` (a t tail that underflows);
- no spread (`pair_alike_text`): every seed moved by the same amount, so no interval;
- the family Holm adjusted over (`heading`): the tests that had a p-value, as `compare` counted them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from src.report.judge.pairs import METRICS, NO_NORM, Result, family_of
from src.report.judge.sequential import with_verdicts
from src.report.numbers import NATS, equivalent_text, estimate_text, moved_alike, p_text, settle_text, shown
from src.report.words.common import counted, how_paired, run_counts
from src.report.words.jobs import how_jobs_ran
from src.report.words.speed import speed_section
from src.report.words.table import interleaved_cell
from src.stats import pairs as pairs_
from src.stats.inference import MIN_SEEDS, Interval
from src.stats.verdicts import PairWord
from src.tracking.variants import REFERENCE_VARIANT, metric_key

if TYPE_CHECKING:
    from src.report.analysis import Analysis

COLUMNS = ["pair", "metric", "test", "n", "diff", "ci_low", "ci_high", "p", "p_holm", "tost_p", "margin", "verdict",
           "verdict_level", "verdict_low", "verdict_high"]  # fmt: skip


# --- numbers ---------------------------------------------------------------------------------------


def pair_alike_text(p: Interval) -> str:
    """No spread: every seed moved by the same amount (`exactly` only where the values say so; a spread
    below their resolution, src.stats.inference.alike, reads as none too), by `+0.0052` nats."""
    moved = shown(p.diff, NATS)
    if p.test == "welch":
        return f"each variant's seeds gave one value, {moved} apart: no spread, so no interval"
    return moved_alike(p.n, "seeds", moved, exactly=p.sd == 0)


# --- a pair ------------------------------------------------------------------------------------------


def verdict_text(r: Result) -> str:
    """The verdict in words, as comparisons.csv and the headline print it: its numbers are beside it
    (the CSV's verdict_level/low/high, the line's interval), never inside it."""
    word = r.verdict
    if word == PairWord.EQUIVALENT and r.decision is not None:
        return equivalent_text(f"{r.margin:g}", r.decision.remains)
    if word == PairWord.INCONCLUSIVE:
        return f"{word}: {settle_text(r.seeds, 'seeds')}" if r.seeds is not None else str(word)
    if word == PairWord.UNTESTED:
        return f"not tested: {r.reason}"
    return str(word)


def clause(r: Result) -> str:
    """A metric's word with the numbers it was read from: the interval that decided it (TOST's
    1 − 2α one for an equivalence, else the 95% one), its level said, and the p-value that decided
    the word (Holm's, over the family, for a difference shown or not); with no spread, that there is none."""
    label, p, d = METRICS[r.metric][1], r.primary, r.decision
    if r.verdict == PairWord.UNTESTED or d is None:
        return f"{label} {verdict_text(r)}"
    settle = f"; {settle_text(r.seeds, 'seeds')}" if r.seeds is not None else ""
    holm = p_text(r.p_holm, "Holm p")
    if not d.spread:
        tests = [p_text(r.tost_p, "equivalence p")] if abs(p.diff) < r.margin else []
        tests += [f"{p_text(p.p_value, 'difference p')} ({holm})"] if math.isfinite(p.p_value) else []
        word = verdict_text(r) if r.verdict == PairWord.EQUIVALENT else str(r.verdict)  # the seeds to settle it follow
        return f"{label} {word} ({pair_alike_text(p)}; sign-flip tests: {', '.join(tests)}{settle})"
    stats = f"Δ {estimate_text(p.diff, d.low, d.high, d.level, NATS)}"
    if r.verdict == PairWord.DIFFERENT:
        return f"{label} {r.verdict} ({stats}, {holm})"
    if r.verdict == PairWord.EQUIVALENT:
        remains = f"; the difference that remains: {holm}" if d.remains else ""  # Holm decided that part
        return f"{label} {verdict_text(r)} ({stats}, TOST's interval, {p_text(r.tost_p, 'TOST p')}{remains})"
    return f"{label} {r.verdict} ({stats}, {holm}{settle})"


def how_tested(first: Result, left_out: int) -> str:
    """How a pair was tested: paired by seed or Welch's, its n, the runs left out, the axis."""
    how = how_paired(first.primary.test != "welch", first.primary.n, first.n_a, first.n_b)
    how += f", {left_out} run(s) without a partner left out" if left_out else ""
    return f"{first.axis}; {how}" if first.axis else how


def sentences(results: Sequence[Result]) -> list[str]:
    """One sentence per pair: how it was tested, then each metric's verdict with its numbers; the
    pairs not tested, in one sentence after them."""
    by_pair = {pair: [r for r in results if (r.a, r.b) == pair] for pair in dict.fromkeys((r.a, r.b) for r in results)}
    out, untested = [], []
    for (a, b), rs in by_pair.items():
        if all(r.verdict == PairWord.UNTESTED for r in rs):
            untested.append(pairs_.pair_label(a, b))  # said once, below
            continue
        out.append(f"{pairs_.pair_label(a, b)} ({how_tested(rs[0], max(r.left_out for r in rs))}): " + "; ".join(clause(r) for r in rs) + ".")
    return [*out, untested_sentence(untested)] if untested else out


def untested_sentence(pairs: Sequence[str]) -> str:
    """The pairs that could not be compared, in one sentence that says what would settle them."""
    return (
        f"Not tested ({len(pairs)} pair(s): {', '.join(pairs)}): a paired comparison needs ≥{MIN_SEEDS} seeds "
        f"finished by both variants (why each pair fell short is in comparisons.csv). Three seeds per variant "
        "(`python -m src.train -m experiment=norm_sweep_seeds`, or `seed=0,1,2` on this sweep's command) test "
        "them, and the report then says how many seeds each undecided pair needs; speed is settled by "
        "interleaved steps (`python -m src.bench variants`), not by seeds."
    )


# --- the section ----------------------------------------------------------------------------------


def heading(a: Analysis) -> str:
    """How the pairs were tested: the tests, the margin, and the family Holm adjusted over (the tests
    with a p-value, `Result.family`; the others are named when there are any)."""
    family, total = family_of(a.comparisons), len(a.comparisons)
    if family == total:
        over = counted(total, "comparison")
    elif family == 0:
        over = "nothing: " + ("the one comparison has no p-value" if total == 1 else f"none of the {total} comparisons has a p-value")
    else:
        over = f"the {family} of {total} comparisons with a p-value"
    return (
        f"Test loss, paired by seed (Welch where seed sets differ); equivalence by TOST within ±{a.margins.test_loss:g} nats "
        f"(its 90% interval printed beside it); Holm-adjusted over {over}; speed is the "
        f"speed check's, not the jobs' tokens/s (run {how_jobs_ran(a.runs)}, in the table)"
    )


def section_sentences(a: Analysis) -> list[str]:
    """One sentence per compared pair, why any requested pair was not compared, then the speed
    measured by interleaving (when the experiment has a bench-variants run)."""
    unmatched = [f"{pairs_.pair_label(u.a, u.b)}: no finished runs of {', '.join(u.missing)} in this experiment" for u in a.unmatched]
    return [*sentences(a.comparisons), *unmatched, *speed_sentences(a)]


def nothing_to_compare(a: Analysis) -> str:
    if len(a.table) == 1:  # e.g. a sweep of the seed alone
        return f"No pairs to compare: every run is one variant ({a.table.variant.iloc[0]}); nothing but the seed varied."
    # A variant without a finished run has nothing to pair: said with how its runs ended (diverged, a
    # NaN evaluation, failed), as the table counts them.
    none = [v for v, n in zip(a.table.variant, a.table.finished, strict=True) if n == 0]
    why = "; ".join(f"{v} has no finished run ({run_counts(a.runs[a.runs.variant == v])})" for v in none)
    return f"No pairs to compare: {why}." if why else "No pairs to compare."


def speed_sentences(a: Analysis) -> list[str]:
    """The speed check's section (a verdict per pair, with the norms' kernels), else the interleaved
    steps' ratios of an older check, else nothing."""
    checked = speed_section(a)
    if checked or not a.speed.interleaved:
        return checked
    order = list(a.table.variant)  # the table's order
    cells = [f"{v} {interleaved_cell(a.speed.interleaved[metric_key(v)])}" for v in order if metric_key(v) in a.speed.interleaved]
    costs = [
        f"{v} {c[0]:+.1f} ms [{c[1]:+.1f}, {c[2]:+.1f}] ({c[0] / c[3]:.1%} of its {c[3]:,.0f} ms step)"
        for v in order
        if (c := a.speed.norm_costs.get(metric_key(v))) is not None and v != NO_NORM and all(math.isfinite(x) for x in c)
    ]
    share = f" The norm's own cost (step minus no_norm's, same rounds): {'; '.join(costs)}." if costs else ""
    return [
        f"Speed, measured by interleaving the variants' training steps in one process (python -m src.bench "
        f"variants; step speed vs {REFERENCE_VARIANT}, median and 95% interval): {'; '.join(cells)}.{share} "
        f"It replaces the tokens/s ratios of jobs run {how_jobs_ran(a.runs)}, which measure the machine's load."
    ]


# --- comparisons.csv --------------------------------------------------------------------------------


def comparisons_frame(a: Analysis) -> pd.DataFrame:
    """comparisons.csv: the pairs' rows (`to_frame`), with a sequential sweep's decisions beside them."""
    return with_verdicts(to_frame(a.comparisons), a.sequential)


def to_frame(results: Sequence[Result]) -> pd.DataFrame:
    """comparisons.csv: one row per pair, metric and test (the bootstrap shares its pair's verdict).
    The verdict's words carry no numbers; beside them, the interval it was read from with its level
    (`verdict_level`: TOST's 0.9 for an equivalence, else 0.95), apart from each test's 95% ci_low/ci_high."""
    axis = any(r.axis for r in results)  # a sweep of more than the norm: which axis each pair differs in
    rows = []
    for r in results:
        d = r.decision
        decided = {"verdict_level": d.level, "verdict_low": d.low, "verdict_high": d.high} if d else dict.fromkeys(COLUMNS[-3:], math.nan)
        for test in [t for t in (r.primary, r.bootstrap) if t is not None]:
            primary = test is r.primary
            rows.append({
                "pair": r.pair, "metric": r.metric, "test": test.test, "n": test.n if test.test != "welch" else r.n_a + r.n_b,
                "diff": test.diff, "ci_low": test.low, "ci_high": test.high,
                "p": test.p_value, "p_holm": r.p_holm if primary else math.nan,
                "tost_p": r.tost_p if primary else math.nan, "margin": r.margin, "verdict": verdict_text(r), **decided,
                **({"axis": r.axis} if axis else {}),
            })  # fmt: skip
    return pd.DataFrame(rows, columns=[*COLUMNS, "axis"] if axis else COLUMNS)
