"""The report's invariants, checked on generated sweeps (tests/made_up_sweeps.py) through the real
path: `compare` → `compare_speed` → `against_study` → the headline and every section, as the
terminal, report.md, comparisons.csv and the sweep run's verdict print them.

The fast suite runs a seeded, bounded profile; `make test-properties` runs the long one
(HYPOTHESIS_PROFILE=long). A counterexample it finds becomes a named case in tests/test_report_cases.py.
"""

from __future__ import annotations

import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from made_up_sweeps import MadeUp, sweeps, sweeps_with_claims

from src.report.analysis import Analysis, assemble
from src.report.judge.study import Finding, Reach
from src.report.read.claims import EQUIVALENCE, NO_WORSE, SHARE, SPEED, TREND
from src.report.read.runs import SpeedCheck
from src.report.read.settings import ReportSettings
from src.report.read.timing import most_at_once
from src.report.render.markdown import markdown_page, verdict
from src.report.render.terminal import terminal_text
from src.report.words.headline import reproduced_line, settings_of
from src.report.words.pairs import comparisons_frame
from src.report.words.speed import speed_section
from src.report.words.study import part_reason, written
from src.stats import inference
from src.stats.inference import ALPHA
from src.stats.pairs import pair_label
from src.stats.verdicts import ClaimWord, PairWord, speed_bounds

settings.register_profile("fast", max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 50)), deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
settings.register_profile("long", max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 2000)), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(autouse=True)
def _fewer_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paired bootstrap (comparisons.csv's check beside the t-interval, never a word) with 999
    resamples instead of 9,999: the same code, ten times faster, so a few hundred sweeps fit in seconds."""
    monkeypatch.setattr(inference, "BOOTSTRAP_RESAMPLES", 999)


def analysis_of(made: MadeUp) -> Analysis:
    """What `src.report.analysis.analyze` makes of these runs and this check (`assemble`), without an MLflow store."""
    return assemble(made.runs, made.axes, SpeedCheck(made.check, {}, {}), ReportSettings(claims=made.claims),
                    sequential=made.sequential, experiment="made-up", tracking_uri="sqlite://")  # fmt: skip


def outputs(a: Analysis) -> dict[str, str]:
    return {"terminal": terminal_text(a, width=10_000), "report.md": markdown_page(a, []), "verdict": verdict(a),
            "comparisons.csv": comparisons_frame(a).to_csv(index=False)}  # fmt: skip


# --- reading numbers back out of the words ------------------------------------------------------------

NUMBER = r"[+\-−]?\d[\d,]*(?:\.\d+)?(?:e[+\-]?\d+)?%?"
# `+0.0012 [-0.0003, +0.0027]` or `+1.2% [+0.4%, +2.0%]` (the estimate, then its interval)
BESIDE = re.compile(rf"({NUMBER}) \[({NUMBER}), ({NUMBER})\]")
PRINTED = re.compile(rf"Δ ({NUMBER}) \[({NUMBER}), ({NUMBER})\] \((\d+(?:\.\d+)?)% interval\)")  # a pair's estimate as printed
LEVEL = re.compile(r"\b\d{2}(?:\.\d+)?% (?:CI|interval|confidence)|\(\d{2}% interval\)|\d{2}% (?:TOST|two-sided)")


def number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", "").rstrip("%"))


def items(text: str) -> list[str]:
    """The sentences of an output, one per line or bullet (a table row is one too)."""
    return [line.strip().lstrip("-* ").strip() for line in text.splitlines() if line.strip()]


def estimate_outside(text: str) -> list[str]:
    """Each printed `x [low, high]` whose x is outside [low, high] (as printed: rounding may touch an end)."""
    return [m.group(0) for m in BESIDE.finditer(text) if not number(m.group(2)) <= number(m.group(1)) <= number(m.group(3))]


# --- the invariants ------------------------------------------------------------------------------------


def check_numbers_inside_intervals(a: Analysis, out: dict[str, str]) -> None:
    for name, text in out.items():
        bad = estimate_outside(text)
        assert not bad, f"{name}: an estimate printed outside its own interval: {bad}"


def check_every_interval_says_its_level(a: Analysis, out: dict[str, str]) -> None:
    """A sentence with an interval names its level; a table whose cells hold intervals names it in
    its header or in the lead above it."""
    lines = out["report.md"].splitlines()
    for i, line in enumerate(lines):
        if not BESIDE.search(line):
            continue
        if line.startswith("|"):
            if LEVEL.search(line):  # each cell says its own level
                continue
            top = next(j for j in range(i, -1, -1) if not lines[j].startswith("|"))  # above the table: a blank line
            lead = next((lines[j] for j in range(top, -1, -1) if lines[j].strip()), "")
            head = " ".join((lead, lines[top + 1]))
            assert LEVEL.search(head), f"report.md: a table of intervals with no level in its header or lead: {head[:300]}"
        else:
            assert LEVEL.search(line), f"report.md: an interval without its level: {line[:300]}"


MEAN_PLUS_MINUS = re.compile(rf"{NUMBER} ± {NUMBER}")


def check_every_plus_minus_says_its_level(a: Analysis, out: dict[str, str]) -> None:
    """A `mean ± half-width` cell in the terminal's tables has its level said above it (the block's lead)."""
    lines = out["terminal"].splitlines()
    for i, line in enumerate(lines):
        if MEAN_PLUS_MINUS.search(line):
            top = next((j for j in range(i, -1, -1) if not lines[j].strip()), 0)  # the block starts after a blank line
            assert any(LEVEL.search(x) or "95% CI" in x for x in lines[top : i + 1]), f"terminal: ± with no level above it: {line[:200]}"


def check_the_word_is_the_intervals(a: Analysis, out: dict[str, str]) -> None:
    """Each pair's printed interval is the one its word was read from, and supports that word: a
    difference excludes zero, an equivalence lies inside ±margin, and an inconclusive interval that
    excludes zero prints the Holm-adjusted p that kept it undecided."""
    text = out["report.md"]
    for r in a.comparisons:
        d = r.decision
        if d is None or not d.spread:
            continue
        low, high = d.low, d.high
        if r.verdict == PairWord.DIFFERENT:
            assert low > 0 or high < 0, f"{r.pair}: different on an interval holding zero"
        if r.verdict == PairWord.EQUIVALENT:
            assert -r.margin < low and high < r.margin, f"{r.pair}: equivalent on an interval beyond ±{r.margin}"
        sentence = next((s for s in text.splitlines() if s.startswith(f"- {r.pair} (")), "")
        if not sentence:
            continue
        m = PRINTED.search(sentence)
        assert m, f"{r.pair}: no interval with its level printed beside the word: {sentence[:300]}"
        places = len(m.group(2).split(".")[1])  # as printed: the decimals the writer chose
        printed = (number(m.group(2)), number(m.group(3)), float(m.group(4)) / 100)
        assert abs(printed[0] - low) <= 0.6 * 10**-places and abs(printed[1] - high) <= 0.6 * 10**-places and printed[2] == pytest.approx(
            d.level), f"{r.pair}: the interval its word was read from ([{low:+.6f}, {high:+.6f}], {d.level:.0%}) is not the one printed: {sentence[:300]}"
        if r.verdict == PairWord.INCONCLUSIVE and (low > 0 or high < 0):
            assert "Holm" in sentence, f"{r.pair}: inconclusive beside an interval that excludes zero, no Holm p: {sentence[:300]}"


def check_family_printed_is_adjusted(a: Analysis, out: dict[str, str]) -> None:
    adjusted = sum(math.isfinite(r.p_holm) for r in a.comparisons)
    for name, text in out.items():
        for m in re.finditer(r"Holm-adjusted over (\d+) (?:comparisons|tests)", text):
            assert int(m.group(1)) == adjusted, f"{name}: Holm printed over {m.group(1)}, adjusted over {adjusted}"


def check_no_p_zero(a: Analysis, out: dict[str, str]) -> None:
    for name, text in out.items():
        if name == "comparisons.csv":
            continue
        bad = re.findall(r"\bp = 0(?![.\d])|p = 0\.0+(?!\d)|p = 0e", text)
        assert not bad, f"{name}: a p-value printed as zero"


def check_no_interval_without_spread_called_different(a: Analysis, out: dict[str, str]) -> None:
    """[x, x] (a zero-wide interval printed) beside a decided word: the spread was below what the
    numbers can resolve, and the no-spread words should have said so."""
    for name in ("terminal", "report.md"):
        for line in items(out[name]):
            for m in BESIDE.finditer(line):
                if m.group(2) == m.group(3) and "no spread" not in line and "no interval" not in line:
                    raise AssertionError(f"{name}: a zero-wide interval printed as one: {line[:300]}")


def check_seeds_to_settle_exceed_seeds_run(a: Analysis, out: dict[str, str]) -> None:
    for r in a.comparisons:
        if r.seeds is not None:
            assert r.seeds > r.primary.n, f"{r.pair}: {r.seeds} seeds would settle it, {r.primary.n} already ran"
    # "per variant" is said by a claims section: of the variants it reads (an init sweep's others are set aside),
    # each section of its own (a researcher's file may read fewer variants than the study's).
    for section in a.claim_sections:
        read = a.runs[a.runs.variant.isin(section.read)] if section.read else a.runs
        most = int(read.groupby("variant").size().max())
        for m in re.finditer(r"(\d[\d,]*) seeds per variant would settle", "\n".join(written(a, section).lines(10_000))):
            assert number(m.group(1)) > most, f"{section.file.name}: {m.group(0)} with {most} already run"


def check_lowest_is_established(a: Analysis, out: dict[str, str]) -> None:
    """"lowest" names a variant that no judged pair puts above another, and no exact tie (per setting,
    where the sweep varied more than the norm: a setting's "lowest" is among that setting's variants,
    so a pair across two settings, e.g. one norm at two inits, is not its business)."""
    line = next((x for x in items(out["terminal"]) if x.startswith("Loss")), "")
    # "Loss, per setting (...): at init=study: ...; at init=gpt2: ...": each setting's part on its own
    parts = re.split(r"(?:: |; )at ([^:;]+): ", line)
    members = {s.label: set(s.variants) for s in settings_of(a.runs)}  # the variants each "at ..." speaks of
    segments = [(None, parts[0])] + [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
    for label, segment in segments:
        m = re.search(r"lowest test loss (?!undecided)(\S+) \d", segment)
        if not m:
            continue
        best = m.group(1) if label is None else f"{m.group(1)} · {label.split('=', 1)[-1]}"
        assert label is None or label in members, f"the line speaks of a setting the runs do not have: {label}"
        for r in a.comparisons:
            if r.verdict != PairWord.DIFFERENT or best not in (r.a, r.b):
                continue
            if label is not None and not {r.a, r.b} <= members[label]:
                continue
            other_lower = r.primary.diff > 0 if r.a != best else r.primary.diff < 0  # diff = b - a
            assert not other_lower, f"'lowest {best}' while {r.pair} is different the other way: {line[:400]}"
        assert "+0.0000 " not in segment or "tie" in segment or "identical" in segment, f"an exact tie called lowest: {segment[:400]}"


def check_agree_only_on_a_usable_interval(a: Analysis, out: dict[str, str]) -> None:
    for v in a.speed_verdicts:
        line = next((s for s in speed_section(a) if s.startswith(f"{pair_label(v.a, v.b)}:")), "")
        if v.measured is None or not line:
            continue
        if "agree" in line and "disagree" not in line:
            assert v.measured.df >= 2 and math.isfinite(v.measured.low), f"'agree' beside a {v.measured.n}-round interval: {line[:300]}"
        overlap = v.measured.low <= v.predicted.high and v.predicted.low <= v.measured.high
        if not overlap and v.measured.df >= 4:
            assert "too noisy" not in line, f"a precise measurement that excludes the prediction called noise: {line[:300]}"


def check_set_aside_runs_are_named(a: Analysis, out: dict[str, str]) -> None:
    for outcome in ("failed", "diverged"):
        if (a.runs.outcome == outcome).any():
            assert outcome in out["terminal"], f"{outcome} runs are in the sweep and the terminal never says so"


def check_other_setting_runs_are_set_aside_by_name(a: Analysis, out: dict[str, str]) -> None:
    """An init sweep's GPT-2-init runs are read by no claim: the study's section says so, by name."""
    if a.study.claims and "axis.model.init" in a.runs and (a.runs["axis.model.init"] == "gpt2").any():
        assert "set aside" in out["terminal"] and "gpt2" in out["terminal"], "the gpt2-init runs read by no claim are not said to be set aside"


def check_a_time_that_is_not_a_measurement_decides_nothing(a: Analysis, out: dict[str, str]) -> None:
    """The jobs' own times on a CPU print with their caveat and decide no claim's word; the headline
    says how the jobs ran (one after another, or at once), never the other."""
    for c in a.study.claims:
        for f in c.findings:
            if f.effect is not None and not f.effect.measured:
                assert f.judgement is None or f.judgement.readings is None, f"claim {c.claim.number}: a word read from jobs' times"
                assert "not a measurement" in out["terminal"], f"claim {c.claim.number}: jobs' times printed without their caveat"
    speed = next((x for x in items(out["terminal"]) if x.startswith("Speed: not measured")), "")
    if speed and most_at_once(a.runs) > 1:
        assert "one after another" not in speed, f"jobs that ran at once said to run one after another: {speed}"


def check_not_tested_is_not_outside(a: Analysis, out: dict[str, str]) -> None:
    """A sweep at the study's own setting is outside no claim's domain: a claim it cannot test lacks variants."""
    study_setting = (a.runs.device_name == "NVIDIA A100-SXM4-40GB").all() and a.runs.precision.str.startswith("fp16").all()
    if study_setting and not a.study.ran_none:
        assert "outside it" not in out["terminal"].split("Reproduced?")[1].split("\n")[0], "the study's own setting said to be outside a claim's domain"


def check_jobs_timings_carry_their_caveat(a: Analysis, out: dict[str, str]) -> None:
    """The table's column of the jobs' tokens/s ratio is not a measurement: its header says so."""
    for line in out["report.md"].splitlines():
        if line.startswith("|") and "speed vs" in line and "---" not in line:
            assert re.search(r"not a measurement|one after another|at once|jobs'", line), f"the jobs' ratio without its caveat: {line}"


def check_jobs_beside_others_are_not_one_after_another(a: Analysis, out: dict[str, str]) -> None:
    """Where every job ran beside another (a pool, SLURM), no sentence says the jobs ran one after another,
    whichever of them it reads (the study's section reads some variants only: they ran beside the rest)."""
    if not {"start_time", "end_time"} <= set(a.runs.columns):
        return  # a frame made without the jobs' times: nothing is said of how they ran
    spans = a.runs[["start_time", "end_time"]].dropna()
    if len(spans) < 2:
        return
    overlaps = [any(i != j and s.start_time < t.end_time and t.start_time < s.end_time for j, t in spans.iterrows())
                for i, s in spans.iterrows()]  # fmt: skip
    if all(overlaps):
        assert "one after another" not in out["report.md"], "jobs that each ran beside another called one after another"


def check_a_column_against_a_variant_names_one_that_ran(a: Analysis, out: dict[str, str]) -> None:
    """A table column "test loss vs X" compares with a variant X of this sweep, not a name nobody ran."""
    ran = set(a.table.variant)
    for line in out["report.md"].splitlines():
        if line.startswith("|") and "---" not in line:
            for named in re.findall(r"test loss vs ([A-Za-z0-9_·. =\[\],-]+?) *\|", line):
                assert named.strip() in ran, f"a column against {named.strip()!r}, which this sweep did not run: {line}"


def check_no_parentheses_back_to_back(a: Analysis, out: dict[str, str]) -> None:
    """Two asides in a row (`+0.0062 (no interval) (paired over 5 seeds unless said)`) read as one
    thing said twice: the second belongs in a clause of its own."""
    for name, text in out.items():
        if name.endswith(".csv"):
            continue
        bad = [line for line in text.splitlines() if ") (" in line]
        assert not bad, f"{name}: two parentheses back to back: {bad[0][:300]}"


PLURAL_AFTER_ONE = re.compile(r"(?<![\d/.,])\b1 (seeds|runs|pairs|comparisons|claims|jobs|variants|steps|tests|settings|rounds)\b")
PROGRAM_VALUE = re.compile(r"\bnan%?|\bNone\b|\binf\b")  # Python's printing of a value that is missing


def check_counts_agree_with_their_nouns(a: Analysis, out: dict[str, str]) -> None:
    for name, text in out.items():
        if not name.endswith(".csv"):
            bad = [text[max(0, m.start() - 150) : m.end() + 60] for m in PLURAL_AFTER_ONE.finditer(text)]  # with where it is said
            assert not bad, f"{name}: a count of one with a plural noun: {bad[:3]}"


def check_no_missing_value_printed_as_python_does(a: Analysis, out: dict[str, str]) -> None:
    """`nan%`, `None`, `inf` are how Python prints a value that is not there; the words say why not."""
    for name, text in out.items():
        if not name.endswith(".csv"):
            found = next((m for line in text.splitlines() if (m := PROGRAM_VALUE.search(line))), None)
            # The value with the words before it (a long line's start would not show where it is).
            assert found is None, f"{name}: a missing value printed as Python does: …{found.string[max(found.start() - 300, 0):found.end() + 60]}"


INVARIANTS = [
    check_numbers_inside_intervals, check_every_interval_says_its_level, check_the_word_is_the_intervals, check_family_printed_is_adjusted, check_no_p_zero,
    check_no_interval_without_spread_called_different, check_seeds_to_settle_exceed_seeds_run, check_lowest_is_established,
    check_agree_only_on_a_usable_interval, check_set_aside_runs_are_named, check_jobs_timings_carry_their_caveat,
    check_other_setting_runs_are_set_aside_by_name, check_a_time_that_is_not_a_measurement_decides_nothing,
    check_not_tested_is_not_outside, check_jobs_beside_others_are_not_one_after_another,
    check_a_column_against_a_variant_names_one_that_ran, check_no_parentheses_back_to_back,
    check_counts_agree_with_their_nouns, check_no_missing_value_printed_as_python_does, check_every_plus_minus_says_its_level,
]  # fmt: skip


# --- a claims file's words: held against the rule (docs/statistics.md's table), not re-read from it ------


def _read_from_an_interval(f: Finding) -> bool:
    """A part whose word the fixed-n interval decided (not a gate, an event, equal signs or a sequential decision)."""
    r = f.readings
    return (f.judgement is not None and r is not None and r.spread and f.decision is None and f.divergence is None
            and f.word != ClaimWord.NOT_APPLICABLE and math.isfinite(f.low) and math.isfinite(f.high))  # fmt: skip


def expected_word(f: Finding) -> ClaimWord:
    """The word docs/statistics.md's table gives an interval [low, high], its claimed band and the
    report's margin: written here from the table, apart from src/stats/verdicts.py."""
    low, high, metric, part = f.low, f.high, f.metric, f.part
    b_low, b_high = part.band(metric)
    lower, upper = speed_bounds(f.margin) if metric in (SPEED, SHARE) and not part.minus else (-f.margin, f.margin)
    meets = low <= b_high and high >= b_low
    inside = lower < low and high < upper
    if part.asserts == NO_WORSE:  # one-sided: the upper end below the margin, or the lower end at or beyond it
        return ClaimWord.REPRODUCED if high < part.margin else ClaimWord.NOT_REPRODUCED if low >= part.margin else ClaimWord.INCONCLUSIVE
    if part.asserts == EQUIVALENCE:
        if inside:
            return ClaimWord.REPRODUCED if meets else ClaimWord.PARTLY
        if low >= upper or high <= lower or not meets:
            return ClaimWord.NOT_REPRODUCED
        return ClaimWord.INCONCLUSIVE
    sign = part.kind.sign(part, metric)
    side = 1 if low > 0 else -1 if high < 0 else 0
    if side == sign:
        return ClaimWord.REPRODUCED if meets else ClaimWord.PARTLY
    if side == -sign:
        return ClaimWord.NOT_REPRODUCED
    return ClaimWord.NOT_REPRODUCED if inside else ClaimWord.INCONCLUSIVE


def check_claim_words_follow_the_table(a: Analysis, out: dict[str, str]) -> None:
    for section in a.claim_sections:
        for c in section.claims:
            for f in c.findings:
                if _read_from_an_interval(f):
                    want = expected_word(f)
                    assert f.word == want, (f"{section.file.name} claim {c.claim.number}: {f.word} where the table gives {want} "
                                            f"for [{f.low:+.4g}, {f.high:+.4g}] against {f.part.band(f.metric)} ±{f.margin:g}")  # fmt: skip


def check_reasons_state_a_true_relation(a: Analysis, out: dict[str, str]) -> None:
    """The relation a reason states between the interval and the claimed figure or band holds."""
    for section in a.claim_sections:
        for c in section.claims:
            for f in c.findings:
                if not _read_from_an_interval(f) or f.outside or f.part.asserts in (TREND, NO_WORSE):
                    continue
                reason, (low, high) = part_reason(f), (f.low, f.high)
                b_low, b_high = f.part.band(f.metric)
                figure = f.part.published(f.metric)
                said = f"{section.file.name} claim {c.claim.number}: {reason[:300]} ([{low:+.4g}, {high:+.4g}] against [{b_low:+.4g}, {b_high:+.4g}])"
                if "is inside the interval" in reason:
                    assert low <= figure <= high, said
                if "the interval lies inside" in reason:
                    assert b_low <= low and high <= b_high, said
                if re.search(r"the interval (?:straddles the margin \([^)]*\) and )?holds (?!zero)", reason):
                    assert low <= b_low and b_high <= high, said
                if "overlaps" in reason:
                    assert low <= b_high and high >= b_low and not (b_low <= low and high <= b_high) and not (low <= b_low and b_high <= high), said
                if "(outside the interval)" in reason or "lies apart from" in reason or "the whole interval lies beyond" in reason:
                    assert high < b_low or low > b_high, said


STUDY_WORD = re.compile(r"\bstudy(?:'s)?\b", re.IGNORECASE)


def check_no_study_in_a_researchers_section(a: Analysis, out: dict[str, str]) -> None:
    for section in a.claim_sections:
        if section.file.is_study:
            continue
        text = "\n".join([*written(a, section).lines(10_000), reproduced_line(section)])
        for label in sorted(set(a.runs.variant), key=len, reverse=True):  # a variant may be named by its init, `study`
            text = text.replace(label, "")
        text = re.sub(r"=study\b", "", text)
        bad = [line for line in text.splitlines() if STUDY_WORD.search(line)]
        assert not bad, f"{section.file.name}: a researcher's section speaks of the study: {bad[0][:300]}"


def check_the_family_printed_is_the_family_used(a: Analysis, out: dict[str, str]) -> None:
    for section in a.claim_sections:
        method = written(a, section).method
        if not section.family:
            assert not method, f"{section.file.name}: a method line with no test: {method[:200]}"
            continue
        m = re.search(r"simultaneous over the section's (?:(\d+) claim part\(s\) with one)?.*each at (\d+\.\d+)%", method)
        assert m, f"{section.file.name}: no family in the method line: {method[:200]}"
        assert int(m.group(1) or 0) == section.family - section.event, f"{section.file.name}: {m.group(1)} parts printed, {section.family - section.event} used"
        assert float(m.group(2)) == pytest.approx(100 * (1 - ALPHA / section.family), abs=0.006), f"{section.file.name}: level {m.group(2)}% printed"


def check_headline_counts_add_up(a: Analysis, out: dict[str, str]) -> None:
    """The headline's tested, not-tested and outside counts add up to the file's claims, and a claim
    the section calls not tested is never counted tested or outside."""
    for section in a.claim_sections:
        line = reproduced_line(section)
        if section.ran_none:
            continue
        m = re.search(r"(\d+) of (?:its|the study's) (\d+) claims? tested", line)
        assert m, f"{section.file.name}: no count in the headline: {line[:300]}"
        counts = [int(m.group(1))] + [int(x.group(1)) for x in re.finditer(r"; (\d+) (?:not tested here|outside it)", line)]
        assert int(m.group(2)) == len(section.file.claims) == sum(counts), f"{section.file.name}: counts {counts} of {len(section.file.claims)}: {line[:300]}"
        said_untested = {int(x.group(1)) for x in re.finditer(r"^(\d+)\. not tested here — ", "\n".join(written(a, section).claim_lines()), re.M)}
        assert said_untested <= set(section.reached(Reach.UNTESTED)), f"{section.file.name}: claims {sorted(said_untested)} said not tested, counted otherwise"


CLAIMS_INVARIANTS = [check_claim_words_follow_the_table, check_reasons_state_a_true_relation, check_no_study_in_a_researchers_section,
                     check_the_family_printed_is_the_family_used, check_headline_counts_add_up]  # fmt: skip


@given(made=sweeps_with_claims())
def test_a_researchers_claims_file_reads_right_on_any_sweep(made: MadeUp) -> None:
    """A claims file of a researcher's own, drawn beside each sweep: its words, reasons, family and
    counts held against the rule, and every invariant of the report besides."""
    a = analysis_of(made)
    out = outputs(a)
    broken = []
    for invariant in [*INVARIANTS, *CLAIMS_INVARIANTS]:
        try:
            invariant(a, out)
        except AssertionError as e:
            broken.append(f"{invariant.__name__}: {e}")
    assert not broken, "\n".join(broken)


@given(made=sweeps())
def test_the_report_holds_on_any_sweep(made: MadeUp) -> None:
    a = analysis_of(made)
    out = outputs(a)
    broken = []
    for invariant in INVARIANTS:
        try:
            invariant(a, out)
        except AssertionError as e:
            broken.append(f"{invariant.__name__}: {e}")
    assert not broken, "\n".join(broken)


def tally(examples: int) -> dict[str, int]:
    """Per invariant, how many of `examples` generated sweeps break it (`python tests/test_report_properties.py N`)."""
    counts = {f.__name__: 0 for f in INVARIANTS} | {"errors": 0}
    for _ in range(examples):
        made = sweeps().example()
        try:
            a = analysis_of(made)
            out = outputs(a)
        except Exception:  # noqa: BLE001  (a report that cannot be written is the first invariant)
            counts["errors"] += 1
            continue
        for f in INVARIANTS:
            try:
                f(a, out)
            except AssertionError:
                counts[f.__name__] += 1
    return counts


if __name__ == "__main__":
    import sys
    import warnings

    warnings.simplefilter("ignore")
    inference.BOOTSTRAP_RESAMPLES = 999
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for name, count in tally(n).items():
        print(f"{name}: {count} of {n}")
