"""The answer at a glance: at most five lines on top of every form of the report (terminal, report.md,
report.html, the sweep run's description in MLflow), each an answer with its evidence and the next
command that would sharpen it.

- **Speed**: the speed verdicts in one line (src.report.judge.speed: the step-time change predicted from the
  norms' own cost, per pair), and the norm's share of a step;
- **Loss**: the lowest test loss and each gap as the pairs' judgements have them (the rule: the
  comment that opens the loss part below), per setting, and the variants that diverged;
- **Is it real?**: what the seeds can tell, and what to run when one seed cannot;
- **Reproduced?**: how many of the study's claims this sweep's setting can test, their words, and what
  to run for the rest.

Every word is one src/stats/verdicts.py decided (the report's comparisons, speed verdicts and claims):
this module counts and names them, it never judges. Torch-free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import pandas as pd

from src.report.judge.speed import norm_shares
from src.report.judge.study import Reach, StudySection
from src.report.numbers import NATS, NATS_AS_IS, equivalent_text, estimate_text, settle_text
from src.report.read.published import PRESET
from src.report.read.table import AXIS_PREFIX
from src.report.words.common import (
    DECIMALS,
    ONE_RUN_EACH,
    counted,
    how_paired,
    one_run_each,
    printed_zero,
    run_counts,
)
from src.report.words.jobs import how_jobs_ran
from src.report.words.pairs import verdict_text
from src.report.words.speed import share_where, step_time_text
from src.report.words.study import StudyText
from src.report.words.study_setting import seeds_per_variant
from src.stats.inference import MIN_SEEDS
from src.stats.verdicts import ClaimWord, PairWord, SpeedWord
from src.tracking.tags import DIVERGED, EVAL_NOT_FINITE, FINISHED
from src.tracking.variants import NORM_AXIS

if TYPE_CHECKING:
    from src.report.analysis import Analysis
    from src.report.judge.pairs import Result

HEADING = "At a glance"
SHOWN = 4  # variants or pairs named on one line; the rest are counted
SEEDS_COMMAND = "`make sweep-seeds` (three seeds each) or the sequential sweep (`hydra/sweeper=sequential`: seeds until each pair is decided)"
STUDY_COMMAND = f"`python -m src.train -m experiment={PRESET}` on A100s"
CHECK_COMMAND = "`report.speed_rounds=20` on the sweep's command (`experiment=norm_sweep` sets it)"


def headline(a: Analysis) -> list[str]:
    """The lines, each `<question>: <answer> (<evidence>); <next command>`."""
    return [speed_line(a), loss_line(a), real_line(a), *(reproduced_line(s) for s in a.claim_sections)]


def _named(items: Sequence[str], sep: str = ", ", noun: str = "") -> str:
    """The first SHOWN items, and how many more (`noun`: what they are, after the count)."""
    shown = list(items[:SHOWN])
    more = len(items) - len(shown)
    return sep.join(shown) + (f" and {more} more{noun}" if more > 0 else "")


# --- speed ------------------------------------------------------------------------------------------


def speed_line(a: Analysis) -> str:
    verdicts = a.speed_verdicts
    if not verdicts:
        return (f"Speed: not measured: the jobs, run {how_jobs_ran(a.runs)}, time the machine's load, not the norm (their "
                f"tokens/s is in the table, labelled so); {CHECK_COMMAND} times the variants interleaved in one process.")  # fmt: skip
    by_word = {word: [v for v in verdicts if v.verdict == word] for word in SpeedWord}
    parts = []
    for word in (SpeedWord.FASTER, SpeedWord.SLOWER):
        if found := by_word[word]:
            said = [f"{v.b} {word} than {v.a} ({step_time_text(v.predicted)} step time)" for v in found]
            parts.append(_named(said, "; ", f" {word}"))
    if same := by_word[SpeedWord.EQUIVALENT]:
        every = "every pair" if len(same) == len(verdicts) else f"{len(same)} pair(s)"
        parts.append(f"{every} {equivalent_text(f'{a.margins.speed:.0%}')} of a step")
    if open_ := by_word[SpeedWord.UNRESOLVED]:
        most = max((v.rounds_needed or 0 for v in open_), default=0)
        settle = f": {settle_text(most, 'kernel rounds')}" if most else ""
        parts.append(f"{len(open_)} pair(s) {SpeedWord.UNRESOLVED}{settle} (`report.speed_kernel_s` longer)")
    shares = norm_shares(a.speed.check)
    share = ""
    if shares:
        low, high = min(shares, key=shares.get), max(shares, key=shares.get)  # type: ignore[arg-type]
        share = f"; the norm is {shares[low]:.1%} ({low}) to {shares[high]:.1%} ({high}) {share_where(a.speed.check)}"
    return f"Speed (speed check: the norms' kernels, {len(verdicts)} pair(s)): {'; '.join(parts)}{share}."


def _pair_words(results: Sequence[Result]) -> str:
    counts = Counter(r.verdict for r in results)
    different = [f"{r.pair} {r.primary.diff:+.4g}" for r in results if r.verdict == PairWord.DIFFERENT]
    text = ", ".join(f"{n} {w}" for w, n in counts.items())
    return text + (f" ({PairWord.DIFFERENT}: {_named(different)})" if different else "")


# --- loss -------------------------------------------------------------------------------------------
#
# The line reads the pairs' judgements, never a mean, per setting of the other swept axes (never pooled
# into one ranking): the rule is docs/statistics.md's, "The headline reads the pairs".


@dataclass(frozen=True)
class Setting:
    """One setting of the swept axes other than the norm ("" when the sweep varied the norm alone)."""

    label: str
    variants: tuple[str, ...]


def settings_of(runs: pd.DataFrame) -> list[Setting]:
    """The sweep's settings: each combination of the swept axes but the norm, with its variants (one
    setting of every variant when the norm is the only axis, or is not swept)."""
    others = [c for c in runs.columns if c.startswith(AXIS_PREFIX) and c != AXIS_PREFIX + NORM_AXIS]
    if AXIS_PREFIX + NORM_AXIS not in runs or not others:
        return [Setting("", tuple(dict.fromkeys(runs.variant)))]
    found: dict[str, list[str]] = {}
    for values, group in runs.groupby(others, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"{c.removeprefix(AXIS_PREFIX).rsplit('.', 1)[-1]}={v}" for c, v in zip(others, values, strict=True))
        found.setdefault(label, []).extend(dict.fromkeys(group.variant))
    return [Setting(label, tuple(v)) for label, v in found.items()]


def loss_line(a: Analysis) -> str:
    settings = settings_of(a.runs)
    parts = [_setting_loss(a, s) for s in settings]
    if len(parts) == 1:
        return f"Loss: {parts[0]}."
    return "Loss, per setting (the settings are not pooled): " + "; ".join(f"at {s.label}: {p}" for s, p in zip(settings, parts, strict=True)) + "."


class Order(StrEnum):
    """How another variant stands against the one the line starts from, as its pair has it."""

    BELOW = "below"  # the first variant shown lower (the pair's direction, at the family's level)
    TIED = "tied"  # judged equivalent with no direction shown, or equal as printed and not told apart
    OPEN = "open"  # inconclusive, untested, or not a compared pair
    ABOVE = "above"  # the other shown lower (only where the pairs' directions run in a circle)


@dataclass(frozen=True)
class Gap:
    """Another variant against the first: the gap printed (its pair's estimate, else the plain
    difference of means), its text, how it was tested, its order and, when tied, why."""

    name: str
    value: float
    text: str
    how: str
    order: Order
    tie: str = ""


def _setting_loss(a: Analysis, setting: Setting) -> str:
    runs = a.runs[a.runs.variant.isin(setting.variants)]
    finished = runs[runs.outcome == FINISHED].dropna(subset=["test_loss"])
    name = _namer(runs, setting)
    diverged = _diverged(runs, name)
    if not len(finished):
        return "no variant finished" + (f": {diverged}" if diverged else " (every run stopped; the table says where)")
    values = finished.pivot_table(index="seed", columns="variant", values="test_loss", aggfunc="last")
    if values.shape[1] == 1:
        only = str(values.columns[0])
        return f"{name(only)} {values[only].mean():.4f}, the only variant that finished" + (f"; {diverged}" if diverged else "")
    judged = [r for r in a.comparisons if {r.a, r.b} <= set(values.columns)]
    first = _first(judged, _means(values)[0])
    means, over = _means(values, first)
    gaps = sorted((_gap(judged, runs, first, str(v), float(means[v] - means[first]), name) for v in means.index if v != first),
                  key=lambda g: g.value)  # fmt: skip
    head, joint = _order_head(name(first), gaps)
    return f"{head}{name(first)} {means[first]:.{DECIMALS}f} ({over}){joint}{_gaps_text(gaps)}" + (f"; {diverged}" if diverged else "")


def _means(values: pd.DataFrame, first: str | None = None) -> tuple[pd.Series, str]:
    """Each variant's mean test loss, and what the first variant's is over: over the seeds every
    variant finished where two or more did (as the paired gaps are), else over each variant's own
    seeds (as an unpaired gap is: Welch's difference is of those means)."""
    shared = values.dropna()
    if len(shared) >= MIN_SEEDS or len(shared) == len(values):
        return shared.mean(), f"the {len(shared)} seeds every variant here finished" if len(shared) > 1 else "the one seed every variant here finished"
    own = int(values[first].count()) if first is not None else 0
    few = "only one seed" if len(shared) else "no seed"
    return values.mean(), f"over its {counted(own, 'finished seed')}: {few} finished by every variant"


def _first(judged: Sequence[Result], means: pd.Series) -> str:
    """The variant the line starts from: the lowest mean among those no pair shows higher than another
    (a mean never overrules a pair), or the lowest mean where the pairs' directions run in a circle."""
    above = {(r.b if r.decision.sign > 0 else r.a) for r in judged if r.decision is not None and r.decision.sign}
    free = [v for v in means.index if v not in above]
    return str(means[free].idxmin() if free else means.idxmin())


def _order_head(first: str, gaps: Sequence[Gap]) -> tuple[str, str]:
    """What the pairs establish of the order, said before the first variant, and what joins the gaps:
    the lowest where every pair shows it lower; ties as ties; else the lowest undecided."""
    orders = {g.order for g in gaps}
    tied = [g for g in gaps if g.order == Order.TIED]
    why = " or ".join(dict.fromkeys(g.tie for g in tied))
    if orders == {Order.BELOW}:
        return "lowest test loss ", "; then "
    if orders == {Order.TIED}:
        return f"test loss tied: {_named([first, *(g.name for g in tied)])} ({why}); ", "; against it "
    if orders == {Order.BELOW, Order.TIED}:
        return "lowest test loss ", f", tied with {_named([g.name for g in tied])} ({why}); then "
    return "lowest test loss undecided: ", "; against it "


def _gaps_text(gaps: Sequence[Gap]) -> str:
    """The gaps, how each was tested: one way, said once after them; more, each other way beside its gap
    and the most common one as a clause of its own (in parentheses it ran into the last gap's own:
    `... (paired over 10 seeds) (paired over 2 seeds unless said)`)."""
    hows = Counter(g.how for g in gaps)
    common = hows.most_common(1)[0][0]
    shown = [g.text + (f" ({g.how})" if g.how != common else "") for g in gaps]
    return f"{_named(shown)} ({common})" if len(hows) == 1 else f"{_named(shown)}; the others {common}"


def _namer(runs: pd.DataFrame, setting: Setting) -> Callable[[str], str]:
    """Within a setting a variant is named by its norm (the setting's values are said once)."""
    column = AXIS_PREFIX + NORM_AXIS
    if not setting.label or column not in runs:
        return str
    norms = dict(zip(runs.variant, runs[column], strict=True))
    return lambda v: str(norms.get(v, v))


def _gap(judged: Sequence[Result], runs: pd.DataFrame, first: str, other: str, plain: float,
         name: Callable[[str], str]) -> Gap:  # fmt: skip
    """The other variant against the first: the paired estimate its pair's word was decided on, with
    that word's interval and level; else the plain difference of means, said to have no interval."""
    r = next((r for r in judged if {r.a, r.b} == {first, other}), None)
    if r is None or r.decision is None:
        tie = _printed_tie(plain)
        return Gap(name(other), plain, f"{name(other)} {NATS(plain)}", _no_interval(r, runs, first, other, name), Order.TIED if tie else Order.OPEN, tie)
    i, d, sign = r.primary, r.decision, (1 if r.a == first else -1)  # shown as the other's loss minus the first's
    how = how_paired(i.test == "paired_t", i.n, r.n_a, r.n_b)
    gap = sign * i.diff
    low, high = sorted((sign * d.low, sign * d.high))  # the interval the word was read from
    # A difference shown never prints as +0.0000 (the writer widens the decimals); one not shown may.
    figure = estimate_text(gap, low, high, d.level, NATS if d.sign else NATS_AS_IS, spread=d.spread)
    text = f"{name(other)} {figure} {verdict_text(r)}"
    if d.sign:
        return Gap(name(other), gap, text, how, Order.BELOW if sign * d.sign > 0 else Order.ABOVE)
    tie = equivalent_text(f"{r.margin:g}") if d.inside else _printed_tie(gap)
    return Gap(name(other), gap, text, how, Order.TIED if tie else Order.OPEN, tie)


def _printed_tie(gap: float) -> str:
    """A gap not told apart from zero that prints as zero is a tie as printed ("" otherwise)."""
    return f"identical to {DECIMALS} decimals" if printed_zero(gap) else ""


def _no_interval(r: Result | None, runs: pd.DataFrame, first: str, other: str, name: Callable[[str], str]) -> str:
    """Why a gap has no interval: one run each only where every variant has one run; otherwise the
    pair's reason with each side's runs counted, or that no pair compares the two."""
    if one_run_each(runs):
        return ONE_RUN_EACH
    if r is None:
        return "not a compared pair: no interval"
    counted = "; ".join(f"{name(v)} {run_counts(runs[runs.variant == v])}" for v in (first, other))
    return f"no interval: {r.reason} ({counted})"


def _diverged(runs: pd.DataFrame, name: Callable[[str], str]) -> str:
    """`no_norm diverged (1/1 runs, step 4)`, `my_norm: eval loss not finite (2/2 runs)`: the variants
    that diverged or trained through to a NaN or infinite validation or test loss, and how often."""
    out = []
    for variant, group in runs.groupby("variant", sort=False):
        gone = group[group.outcome == DIVERGED]
        if len(gone):
            steps = sorted({int(x) for x in gone.stopped_at_step.dropna()})
            at = f", step {'/'.join(f'{x:,}' for x in steps[:3])}" if steps else ""
            out.append(f"{name(str(variant))} diverged ({len(gone)}/{len(group)} runs{at})")
        broken = group[group.outcome == EVAL_NOT_FINITE]
        if len(broken):
            out.append(f"{name(str(variant))}: eval loss not finite ({len(broken)}/{len(group)} runs)")
    return ", ".join(out)


# --- seeds ------------------------------------------------------------------------------------------


def real_line(a: Analysis) -> str:
    seeds = seeds_per_variant(a.runs)
    if seeds < MIN_SEEDS:
        return f"Is it real? {_one_seed(a.runs, seeds)}: no gap here is tested against seed noise; {SEEDS_COMMAND} tells."
    # Test loss within a setting: seeds decide it; speed is the speed check's (or, without one, the Speed line's).
    within = {frozenset(s.variants) for s in settings_of(a.runs)}
    inside = [r for r in a.comparisons if any({r.a, r.b} <= w for w in within)]
    across = len(a.comparisons) - len(inside)
    tested = [r for r in inside if r.verdict != PairWord.UNTESTED]
    if not tested:
        return f"Is it real? {seeds} seeds, but no pair shares two finished seeds; {SEEDS_COMMAND} tells."
    open_ = [r for r in tested if r.verdict == PairWord.INCONCLUSIVE]
    most = max((r.seeds or 0 for r in open_), default=0)
    need = f"; {settle_text(most, 'seeds')} (the most any of them needs): `seed=0,...` or the sequential sweep" if most else ""
    beside = f"; {across} pair(s) across settings are in the pair lines" if across else ""
    how = _how_paired(tested, seeds)
    over = f"over {seeds} seeds" if how == "paired by seed" else f"over up to {seeds} seeds"
    return f"Is it real? Test loss {over}, {how}: {_pair_words(tested)} of {len(tested)} pair(s){need}{beside}."


def _one_seed(runs: pd.DataFrame, seeds: int) -> str:
    """At most one finished seed per variant, said as what ran: one run each, or the runs counted where
    a variant ran more than one (its others diverged or failed)."""
    if one_run_each(runs):
        return "One seed per variant"
    several = [f"{v} {run_counts(group)}" for v, group in runs.groupby("variant", sort=False) if len(group) > 1]
    return f"{'At most one finished seed per variant' if seeds else 'No run finished'} ({_named(several, '; ')})"


def _how_paired(tested: Sequence[Result], seeds: int) -> str:
    """How the tested pairs were tested: paired by seed only where they were."""
    sizes = sorted({r.primary.n for r in tested if r.primary.test == "paired_t"})
    welch = sum(r.primary.test != "paired_t" for r in tested)
    if not welch and sizes == [seeds]:
        return "paired by seed"
    paired = f"paired on the seeds both finished (n = {sizes[0]}{f' to {sizes[-1]}' if len(sizes) > 1 else ''})" if sizes else ""
    unpaired = f"{welch} pair(s) unpaired (Welch: seed sets differ)" if welch else ""
    return ", ".join(x for x in (paired, unpaired) if x)


# --- the study --------------------------------------------------------------------------------------


def reproduced_line(study: StudySection) -> str:
    """One line per claims file: where the sweep stands with each claim (its judgements' words, not the section's
    sentences; src.report.judge.study.Reach): tested in its domain, with their words; in its domain but not tested
    (the variants they need did not run at this setting); outside it, with why."""
    own = not study.file.is_study
    question, whose = (f"Claims of {study.file.name}.yaml?", "its") if own else ("Reproduced?", "the study's")
    if study.ran_none:
        return f"{question} Not here: {StudyText(study).absent}"  # the section's own words, without its setting or table
    words = {c.claim.number: c.word for c in study.claims}
    tested, untested, outside = (study.reached(r) for r in (Reach.TESTED, Reach.UNTESTED, Reach.OUTSIDE))
    grouped: dict[ClaimWord, list[int]] = {}
    for number in tested:
        grouped.setdefault(words.get(number, ClaimWord.NOT_TESTED), []).append(number)
    answer = f"{len(tested)} of {whose} {counted(len(study.reach), 'claim')} tested in this sweep's domain"
    answer += f" ({'; '.join(f'{w}: {_claims(ns)}' for w, ns in grouped.items())})" if grouped else ""
    if untested:
        untimed = [c.number for c in study.untimed]
        swept = [n for n in untested if n not in untimed]
        missing = sorted({v for n in swept if n in study.unjudged for v in study.unjudged[n][1]})
        needs = [f"{_claims(swept)}: {', '.join(missing) if missing else 'their variants'} not run at this setting"] if swept else []
        needs += [f"{_claims(untimed)} untimed: no share rounds ran"] if untimed else []
        answer += f"; {len(untested)} {ClaimWord.NOT_TESTED} ({'; '.join(needs)})"
    if outside:
        why = list(dict.fromkeys(fact.fact for n in outside for fact in study.domain_facts.get(n, ())))
        answer += f"; {len(outside)} outside it ({_claims(outside)}" + (f": {', '.join(why)})" if why else ")")
    after = []
    if ClaimWord.INCONCLUSIVE in grouped:
        after.append("the claim lines below say the seeds or rounds that would settle each")
    if outside and not own:
        after.append(f"to test {'those outside' if tested or untested else 'them'}: {STUDY_COMMAND} (docs/reproducing.md)")
    return f"{question} {answer}" + (f"; {'; '.join(after)}" if after else "") + "."


def _claims(numbers: Sequence[int]) -> str:
    return f"claim {numbers[0]}" if len(numbers) == 1 else f"claims {', '.join(map(str, numbers))}"
