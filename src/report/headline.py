"""The answer at a glance: at most five lines on top of every form of the report (terminal, report.md,
report.html, the sweep run's description in MLflow), each an answer with its evidence and the next
command that would sharpen it.

- **Speed**: the speed verdicts in one line (src.report.speed: the step-time change predicted from the
  norms' own cost, per pair), and the norm's share of a step;
- **Loss**: the best test loss, its ties and the gaps to it (with their intervals where seeds give one);
- **Is it real?**: what the seeds can tell, and what to run when one seed cannot;
- **Reproduced?**: how many of the study's claims this sweep's setting can test, their words, and what
  to run for the rest.

Every word is one src/stats/verdicts.py decided (the report's comparisons, speed verdicts and claims):
this module counts and names them, it never judges. Torch-free.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from src.report.published import CLAIMS, PRESET
from src.report.speed import norm_shares, step_time_text
from src.stats.inference import MIN_SEEDS
from src.stats.verdicts import ClaimWord, PairWord, SpeedWord, equivalent_text, settle_text
from src.tracking.tags import FINISHED

if TYPE_CHECKING:
    from src.report.analysis import Analysis
    from src.report.comparisons import Result
    from src.report.speed import SpeedVerdict

HEADING = "At a glance"
SHOWN = 4  # variants or pairs named on one line; the rest are counted
SEEDS_COMMAND = "`make sweep-seeds` (three seeds each) or the sequential sweep (`hydra/sweeper=sequential`: seeds until each pair is decided)"
STUDY_COMMAND = f"`python -m src.train -m experiment={PRESET}` on A100s"
CHECK_COMMAND = "`report.speed_rounds=20` on the sweep's command (`experiment=norm_sweep` sets it)"
UNTESTABLE = (ClaimWord.NOT_APPLICABLE, ClaimWord.NOT_TESTED)


def headline(a: Analysis) -> list[str]:
    """The lines, each `<question>: <answer> (<evidence>); <next command>`."""
    return [speed_line(a), loss_line(a), real_line(a), reproduced_line(a)]


def _named(items: Sequence[str]) -> str:
    shown = list(items[:SHOWN])
    more = len(items) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


# --- speed ------------------------------------------------------------------------------------------


def speed_line(a: Analysis) -> str:
    if a.speed_verdicts:
        return _checked_speed(a.speed_verdicts, a.check, a.margins.speed)
    paired = [r for r in a.comparisons if r.metric == "tokens_per_sec" and r.verdict != PairWord.UNTESTED]
    if paired:
        return "Speed (tokens/s paired over seeds, jobs run one after another): " + _pair_words(paired) + f"; an interleaved check is steadier: {CHECK_COMMAND}."
    return ("Speed: not measured: one run each, one after another, times the machine's load between jobs, not the norm; "
            f"{CHECK_COMMAND} times the variants interleaved in one process.")  # fmt: skip


def _checked_speed(verdicts: Sequence[SpeedVerdict], check: dict, margin: float) -> str:
    by_word: dict[SpeedWord, list[SpeedVerdict]] = {}
    for v in verdicts:
        by_word.setdefault(v.verdict, []).append(v)
    parts = []
    for word in (SpeedWord.FASTER, SpeedWord.SLOWER):
        found = by_word.get(word, [])
        if found:
            parts.append("; ".join(f"{v.b} {word} than {v.a} ({step_time_text(v.predicted)} step time)" for v in found[:SHOWN]))
            parts[-1] += f" and {len(found) - SHOWN} more {word}" if len(found) > SHOWN else ""
    if same := by_word.get(SpeedWord.EQUIVALENT, []):
        every = "every pair" if len(same) == len(verdicts) else f"{len(same)} pair(s)"
        parts.append(f"{every} {equivalent_text(f'{margin:.0%}')} of a step")
    if open_ := by_word.get(SpeedWord.UNRESOLVED, []):
        most = max((v.rounds_needed or 0 for v in open_), default=0)
        settle = f": {settle_text(most, 'kernel rounds')}" if most else ""
        parts.append(f"{len(open_)} pair(s) {SpeedWord.UNRESOLVED}{settle} (`report.speed_kernel_s` longer)")
    shares = norm_shares(check)
    share = ""
    if shares:
        low, high = min(shares, key=shares.get), max(shares, key=shares.get)  # type: ignore[arg-type]
        share = f"; the norm is {shares[low]:.1%} ({low}) to {shares[high]:.1%} ({high}) of a step here"
    return f"Speed (speed check: the norms' kernels, {len(verdicts)} pair(s)): {'; '.join(parts)}{share}."


def _pair_words(results: Sequence[Result]) -> str:
    counts = Counter(r.verdict for r in results)
    different = [f"{r.pair} {r.primary.diff:+.4g}" if not r.relative else f"{r.pair} {r.primary.diff:+.1%}"
                 for r in results if r.verdict == PairWord.DIFFERENT]  # fmt: skip
    text = ", ".join(f"{n} {w}" for w, n in counts.items())
    return text + (f" ({PairWord.DIFFERENT}: {_named(different)})" if different else "")


# --- loss -------------------------------------------------------------------------------------------


def loss_line(a: Analysis) -> str:
    table = a.table[a.table.finished > 0].dropna(subset=["test_loss"])
    if not len(table):
        return "Loss: no variant finished (every run diverged or stopped; the table says where)."
    ordered = table.sort_values("test_loss", kind="stable")
    best = ordered.iloc[0]
    # Equal as printed (4 decimals): a tie the reader sees, tested or not.
    tied = [str(v) for v, x in zip(ordered.variant, ordered.test_loss, strict=True) if round(x, 4) == round(best.test_loss, 4)]
    rest = ordered[~ordered.variant.isin(tied)]
    tie = f" (tied with {_named([f'{v}{_interval(a.comparisons, str(best.variant), v)}' for v in tied[1:]])})" if len(tied) > 1 else ""
    gaps = [f"{r.variant} {r.test_loss - best.test_loss:+.4f}{_interval(a.comparisons, str(best.variant), str(r.variant))}"
            for r in rest.itertuples(index=False)]  # fmt: skip
    seeds = int(table.finished.max())
    how = "one run each: no interval" if seeds < MIN_SEEDS else f"paired over up to {seeds} seeds"
    after = f"; then {_named(gaps)}" if gaps else ""
    return f"Loss: best test loss {best.variant} {best.test_loss:.4f}{tie}{after} ({how})."


def _interval(results: Sequence[Result], best: str, other: str) -> str:
    """` [low, high] <word>` of the other variant against the best, where a comparison gives one."""
    for r in results:
        if r.metric != "test_loss" or {r.a, r.b} != {best, other} or r.verdict == PairWord.UNTESTED:
            continue
        i = r.primary
        sign = 1 if r.a == best else -1  # shown as the other's loss minus the best's
        low, high = sorted((sign * i.low, sign * i.high))
        return f" [{low:+.4f}, {high:+.4f}] {r.verdict_text(numbers=False)}" if math.isfinite(low) and math.isfinite(high) else ""
    return ""


# --- seeds ------------------------------------------------------------------------------------------


def real_line(a: Analysis) -> str:
    finished = a.runs[a.runs.outcome == FINISHED]
    seeds = int(finished.groupby("variant").seed.nunique().max()) if len(finished) else 0
    if seeds < MIN_SEEDS:
        return f"Is it real? One seed per variant: no gap here is tested against seed noise; {SEEDS_COMMAND} tells."
    # Test loss: seeds decide it; speed is the speed check's (or, without one, the Speed line's).
    tested = [r for r in a.comparisons if r.verdict != PairWord.UNTESTED and r.metric == "test_loss"]
    if not tested:
        return f"Is it real? {seeds} seeds, but no pair shares two finished seeds; {SEEDS_COMMAND} tells."
    open_ = [r for r in tested if r.verdict == PairWord.INCONCLUSIVE]
    most = max((r.seeds or 0 for r in open_), default=0)
    need = f"; {settle_text(most, 'seeds')} (the most any of them needs): `seed=0,...` or the sequential sweep" if most else ""
    return f"Is it real? Test loss over {seeds} seeds, paired by seed: {_pair_words(tested)} of {len(tested)} pair(s){need}."


# --- the study --------------------------------------------------------------------------------------


def reproduced_line(a: Analysis) -> str:
    study = a.study
    if study.absent:
        return f"Reproduced? Not here: {study.absent}"
    words = {c.claim.number: c.word for c in study.claims} | dict.fromkeys(study.unjudged, ClaimWord.NOT_TESTED)
    grouped: dict[ClaimWord, list[int]] = {}
    for number, word in sorted(words.items()):
        grouped.setdefault(word, []).append(number)
    inside = {w: ns for w, ns in grouped.items() if w not in UNTESTABLE}
    answer = f"{sum(map(len, inside.values()))} of the study's {len(CLAIMS)} claims are in this sweep's domain"
    answer += f" ({'; '.join(f'{w}: {_claims(ns)}' for w, ns in inside.items())})" if inside else ""
    outside = [f"{w}: {_claims(ns)}" for w, ns in grouped.items() if w in UNTESTABLE]
    why = study.shared_outside_short()
    answer += f"; {'; '.join(outside)}" + (f" ({', '.join(why)})" if why else "") if outside else ""
    after = []
    if ClaimWord.INCONCLUSIVE in inside:
        after.append("the claim lines below say the seeds or rounds that would settle each")
    if outside:
        after.append(f"to test the rest: {STUDY_COMMAND} (docs/reproducing.md)")
    return f"Reproduced? {answer}" + (f"; {'; '.join(after)}" if after else "") + "."


def _claims(numbers: Sequence[int]) -> str:
    return f"claim {numbers[0]}" if len(numbers) == 1 else f"claims {', '.join(map(str, numbers))}"
