"""The interface every claim kind implements, and the phrases the kinds' reasons share.

What a kind owns at every stage (the format, the judge, the words and the figure call it, never switch
on a kind's name), its methods and how to add one: docs/claims.md, "Each kind is one module".

Light: a sweep reads its claims files (and each part's kind checks its fields) before its first job;
the verdict rule (src.stats.verdicts, which needs scipy) is imported when a part is judged or its
reason written, through `verdicts()`, never when a file is read.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from src.report.kinds.metrics import RELATIVE_METRICS, shown, units_of
from src.report.numbers import estimate_text, moved_alike, p_text, settle_text

if TYPE_CHECKING:
    from types import ModuleType

    from src.report.judge.study import Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Estimate, Judgement, Readings


class At(ValueError):
    """A check's refusal of a key below the node it checks (`parts[0].size`): its path is joined to
    the node's, so the line names the key itself."""

    def __init__(self, key: str, what: str) -> None:
        super().__init__(what)
        self.key, self.what = key, what


def verdicts() -> ModuleType:
    """src.stats.verdicts, imported when a part is judged or its reason written (never when a file is read)."""
    from src.stats import verdicts as rule

    return rule


class ClaimKind:
    """What a part asserts of its effect. The methods below are a two-sided claim's (a difference's);
    a kind overrides what it does otherwise."""

    name: ClassVar[str]
    paired: ClassVar[bool] = True  # b against another variant a
    sequential: ClassVar[bool] = True  # a sequential sweep's two-sided decision on the pair reads it
    over_sizes: ClassVar[bool] = False  # its effect spans model sizes (`sizes`, smallest first)
    draws_margin: ClassVar[bool] = False  # the claims figure draws the report's equivalence margin beside it
    saving_noun: ClassVar[str] = "step time"  # what a saving claim's estimate is of
    banded: ClassVar[bool] = True  # held against a band (its size or its source's figure): a file must give one
    sided: ClassVar[bool] = False  # claims a side of zero (its size's or its figure's), which the two must share

    # --- the format: what a type cannot say of a part's fields --------------------------------------

    def check(self, part: Part, metric: str, sizes: dict[str, float]) -> None:
        """The fields this kind needs, refused naming the key (At)."""
        self.check_a(part, metric)
        if self.over_sizes:
            check_sizes(part, sizes)
        if part.size is not None:
            self.check_size(metric, *part.size)
        if part.margin is not None:
            raise At("margin", f"only a no_worse claim has a margin; a {self.name}'s size is `size`")

    def check_a(self, part: Part, metric: str) -> None:
        if self.paired and (part.a is None or part.a == part.b):
            raise At("a", f"a {self.name} compares b with another variant a, got a={part.a!r}")

    def check_size(self, metric: str, low: float, high: float) -> None:
        check_fraction(metric, low, high)
        if low < 0 < high:
            raise At("size", f"a difference is on one side of zero, got [{low:g}, {high:g}]")

    def check_figure(self, part: Part, metric: str) -> None:
        """Its size beside its source's figure, once the part can read its file's table (At naming the
        key): a kind with a side of zero needs the figure on its size's side, and a side at all."""
        figure = part.published(metric)
        if not self.sided or math.isnan(figure):
            return
        if figure == 0:
            raise At("size", f"the file's table gives {part.b} against {part.a} no difference ({metric}): a difference needs a side; "
                     "claim an equivalence, or give the table's figures")  # fmt: skip
        if part.size and math.copysign(1, figure) != math.copysign(1, size_side(part.size)):
            raise At("size", f"[{part.size[0]:g}, {part.size[1]:g}] is on the other side of zero from the file's table "
                     f"({part.b} against {part.a}: {figure:+.4g}): its band would hold both sides")  # fmt: skip

    # --- what it claims ------------------------------------------------------------------------------

    def band(self, part: Part, metric: str) -> tuple[float, float]:
        """The claimed band: its size joined with its source's figure (without a size, the figure alone)."""
        figure = part.published(metric)
        if math.isnan(figure):
            return part.size if part.size else (math.nan, math.nan)
        low, high = part.size if part.size else (figure, figure)
        return min(low, figure), max(high, figure)

    def sign(self, part: Part, metric: str) -> int:
        """The side of zero claimed (0: none, a kind that claims no side): its figure's, else its size's."""
        if not self.sided:
            return 0
        figure = part.published(metric)
        if math.isnan(figure) and part.size:
            figure = size_side(part.size)
        return int(math.copysign(1, figure))

    # --- judged ---------------------------------------------------------------------------------------

    def alike(self, found: Readings) -> Readings:
        """The readings of rounds with no spread (n equal signs), as this kind takes them."""
        return found

    def judge(self, part: Part, low: float, high: float, readings: Readings, estimate: Estimate, alpha: float,
              trim: float) -> Judgement:  # fmt: skip
        """The part's judgement from its interval [low, high] at the family's level `alpha`."""
        v = verdicts()
        return v.judge_interval(v.judge_difference(readings), estimate, alpha, trim)

    # --- its words ------------------------------------------------------------------------------------

    def claimed(self, part: Part, metric: str) -> str:
        """Its claimed size in words, where its source has no figure: `-20.0% to -3.0%`, `no size claimed`."""
        if not part.size:
            return "no size claimed"
        low, high = part.size
        return f"{shown(metric, low)} to {shown(metric, high)}"

    def figure_of(self, part: Part, metric: str, contrast: bool = False) -> str:
        """The source's figure for the part in its units, or what it claimed where it has none."""
        value = part.published(metric)
        return f"claimed {self.claimed(part, metric)}" if math.isnan(value) else shown(metric, value, contrast)

    def saving_text(self, part: Part, metric: str) -> str:
        """A saving claim's figure, at the sizes this check timed."""
        return f"{part.b}'s step {self.claimed(part, metric)} against {part.a}'s at {part.sizes[-1]} ({sizes_whose(part, 'size')})"

    def reason(self, f: Finding, j: Judgement) -> str:
        """Why a part read from an interval got its word, with the numbers it read."""
        r, because = j.readings, j.because
        alike = "" if r is None or r.spread else alike_basis(f)
        if because == verdicts().Because.ALIKE_TOO_FEW:
            return f"{alike}, not below the family's {f.alpha:.2g}: {settle_text(j.settle, f.effect.per)}"
        return self.said(f, j, alike)

    def said(self, f: Finding, j: Judgement, alike: str) -> str:
        """The reason of a difference, from what decided it (`alike`: the rounds' one move, with no spread)."""
        v, part, metric, r, contrast = verdicts(), f.part, f.metric, j.readings, bool(f.part.minus)
        because, whose, said = j.because, f"{part.noun}'s", f" ({alike})" if alike else ""
        study, figure = self.figure_of(part, metric, contrast), part.published(metric)
        against = f"where {part.noun} has {shown(metric, figure, contrast)}" if not math.isnan(figure) else f"where it {study}"
        smaller = f"; {whose} {study} is outside it: any effect here is smaller" if r is not None and r.size == v.Size.SMALLER else ""
        # Said of the interval printed beside it (a sequential sweep's direction is its own decision's).
        undecided = "the interval holds zero" if r is not None and r.holds_zero else "the direction is undecided"
        return {
            v.Because.DIRECTION_AND_SIZE: f"{whose} direction, and {relation_text(f, r, contrast)}",
            v.Because.DIRECTION_SMALLER: f"{whose} direction, by less than its {study} (outside the interval)",
            v.Because.DIRECTION_LARGER: f"{whose} direction, by more than its {study} (outside the interval)",
            v.Because.DIRECTION_SIZE_UNTESTED: f"{whose} direction{said}: no interval to hold against its {study}",
            v.Because.OPPOSITE: f"the opposite direction{said}",
            v.Because.ZERO_WITHIN_MARGIN: f"equivalent to zero within {margin_text(f)}, {against}{said}",
        }.get(because) or f"{undecided}{smaller}: {settle_text(j.settle, f.effect.per)}"


def size_side(size: tuple[float, float]) -> float:
    """An end of a one-sided size whose sign is the side of zero it claims: its upper end below zero, else its lower."""
    return size[1] if size[1] < 0 else size[0]


def check_fraction(metric: str, low: float, high: float) -> None:
    """A relative size is a fraction: 3% written 3 is a unit error, said with its fix."""
    if metric in RELATIVE_METRICS and not (low > -1 and high < 1):
        raise At("size", f"sizes of {metric} are fractions: 0.03 is 3%, -0.1 is -10%; got [{low:g}, {high:g}]")


def check_sizes(part: Part, sizes: dict[str, float], fewest: int = 2) -> None:
    """Model sizes that are known, distinct and smallest first (the last is the largest, which a trend
    ends at and a saving's difference is read at): a trend's two at least, a saving's one."""
    if len(part.sizes) < fewest:
        what = "a trend spans at least two model sizes" if fewest > 1 else "the model sizes at which the saving is read"
        raise At("sizes", f"{what}; valid choices: {', '.join(sizes)}")
    for j, size in enumerate(part.sizes):
        if size not in sizes:
            raise At(f"sizes[{j}]", f"unknown model size {size!r}; valid choices: {', '.join(sizes)}")
        if size in part.sizes[:j]:
            raise At(f"sizes[{j}]", f"{size} is listed twice; the sizes are distinct")
    ordered = sorted(part.sizes, key=lambda s: sizes[s])
    if list(part.sizes) != ordered:
        raise At("sizes", f"smallest first (by parameters): [{', '.join(ordered)}], got [{', '.join(part.sizes)}]")


# --- the phrases every kind's reason shares -------------------------------------------------------------


def sizes_whose(part: Part, noun: str) -> str:
    """Whose model sizes a saving is read at: this check's, where its source named none (a published
    study speaks of architectures' costs, not of sizes); a file of hypotheses names its own."""
    return f"this check's {noun}" + ("" if part.noun == "the claim" else f", not {part.noun}'s")


def margin_text(f: Finding) -> str:
    """The report's equivalence margin it was read against: `±2%`, `±0.02 nats`."""
    return f"±{f.margin:.0%}" if f.metric in RELATIVE_METRICS else f"±{f.margin:g} nats"


def interval_of(f: Finding, contrast: bool) -> str:
    """The part's estimate with the family's interval it was read from, its level said."""
    return estimate_text(f.effect.diff, f.low, f.high, 1 - f.alpha, units_of(f.metric, contrast))


def alike_basis(f: Finding) -> str:
    """With no spread, what the word rests on instead of an interval: n equal signs."""
    e, r = f.effect, f.readings
    moved = moved_alike(e.interval.n, e.per, shown(f.metric, e.diff, bool(f.part.minus)), exactly=e.interval.sd == 0)
    return f"{moved}; {p_text(r.alike_p, 'sign-flip p')}"


def band_text(metric: str, part: Part, contrast: bool = False) -> str:
    """The band a part's interval is held against: `its -11.1%` (its source's figure), `its claimed
    +0.0200 to +0.0800` (a size), `its band -11.5% to -9.5%` (a size joined with a figure)."""
    figure, low, high = part.published(metric), *part.band(metric)
    if math.isnan(figure) or low == high:
        return f"its {part.kind.figure_of(part, metric, contrast)}"
    return f"its band {shown(metric, low, contrast)} to {shown(metric, high, contrast)}"


def relation_verb(r: Readings | None) -> str | None:
    """The relation between an interval and a claimed band, as a verb (None: no interval)."""
    relation = verdicts().Relation
    return {relation.WITHIN: "lies inside", relation.HOLDS: "holds", relation.OVERLAPS: "overlaps",
            relation.APART: "lies apart from"}.get(r.relation if r is not None else relation.NONE)  # fmt: skip


def relation_text(f: Finding, r: Readings | None, contrast: bool) -> str:
    """The relation that holds between the interval and what was claimed, said as it is: its source's
    figure inside the interval where it is, else the interval against the claimed band."""
    figure = f.part.published(f.metric)
    if math.isfinite(figure) and f.low <= figure <= f.high:
        return f"its {shown(f.metric, figure, contrast)} is inside the interval"
    verb, band = relation_verb(r), band_text(f.metric, f.part, contrast)
    return f"the interval {verb} {band}" if verb else f"no interval to hold against {band}"

