"""What an interval says of a published claim: three readings, then one word.

A claim speaks of an effect (b against a: a relative change of training time, a difference of test
loss) and asserts one of two things about it:

- a **difference**: the effect lies on one side of zero (the study's sign), about the size the study
  gives (its figure, with the tolerance its words give: `band`);
- an **equivalence**: the effect is near zero, within the size the study gives (`band`, around 0).

Each claim part gets one interval of this sweep's effect, and three readings of it:

- **direction**: *holds* when the interval excludes zero on the study's side, *opposite* when it
  excludes zero on the other side, else *undecided*;
- **size**: *consistent* when the interval meets the band, *smaller* when it lies wholly nearer zero
  than the band (on the study's side or across zero), *larger* when it lies wholly beyond the band;
- **equivalence** to zero within ±margin (the report's margin, `report.margin.*`): *inside* when the
  whole interval is, *outside* when the whole interval is outside, else *undecided*: an interval that
  straddles the margin decides nothing.

The word of a part (`part_word`), and of a claim from its parts' words (`claim_word`):

| the claim asserts | direction | size | equivalence | word |
|---|---|---|---|---|
| a difference | holds | consistent | any | reproduced |
| a difference | holds | smaller / larger | any | partly reproduced |
| a difference | opposite | any | any | not reproduced |
| a difference | undecided | any | inside | not reproduced (equivalent to zero) |
| a difference | undecided | any | not inside | inconclusive |
| an equivalence | any | consistent | inside | reproduced |
| an equivalence | any | larger | inside | partly reproduced |
| an equivalence | any | any | outside | not reproduced |
| an equivalence | any | any | undecided | inconclusive |

A claim of several parts is *reproduced* only when every part is; *not applicable here* when every
part it could test is (a part whose norms were not swept would be outside the domain too); else *partly reproduced* when some part is reproduced or partly, else *not reproduced* when
some part is not, else *inconclusive* (an undecided part, or one whose norms were not swept).

**Multiplicity.** The family is the claim parts the section reads from an interval, never the
report's other comparisons: a swept variant no claim names changes no word. Each interval is taken
at confidence 1 − α/m for a family of m (Bonferroni), so that with probability at least 1 − α every
interval covers its true effect at once (the union bound; no independence needed). Every reading
above is a statement that is true of the true effect whenever its interval covers it (a false
*holds*, *opposite*, *smaller*, *larger*, *inside* or *outside* each needs an interval that misses),
so the chance that any word in the section rests on a false reading is at most α, whatever the
effects are. Holm's step-down is uniformly more powerful for p-values but gives no intervals, and
every answer here is read from one.

Torch-free and MLflow-free: numbers in, readings and words out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DIFFERENCE, EQUIVALENCE = "difference", "equivalence"  # what a claim asserts of its effect
HOLDS, OPPOSITE, UNDECIDED = "holds", "opposite", "undecided"  # direction (and equivalence's undecided)
CONSISTENT, SMALLER, LARGER = "consistent", "smaller", "larger"  # size
INSIDE, OUTSIDE = "inside", "outside"  # equivalence to zero within ±margin

REPRODUCED, PARTLY, NOT_REPRODUCED = "reproduced", "partly reproduced", "not reproduced"
INCONCLUSIVE, NOT_APPLICABLE = "inconclusive", "not applicable here"
WORDS = (REPRODUCED, PARTLY, NOT_REPRODUCED, INCONCLUSIVE, NOT_APPLICABLE)


@dataclass(frozen=True)
class Readings:
    direction: str  # HOLDS | OPPOSITE | UNDECIDED
    size: str  # CONSISTENT | SMALLER | LARGER
    equivalence: str  # INSIDE | OUTSIDE | UNDECIDED


def read(low: float, high: float, sign: int, band: tuple[float, float], margin: float) -> Readings:
    """The three readings of the interval [low, high] for a claim whose effect has the study's `sign`
    (-1 or +1; 0 for an equivalence), claimed `band` (signed, low <= high) and equivalence `margin`."""
    if not (low <= high) or math.isnan(low) or math.isnan(high):
        raise ValueError(f"an interval needs low <= high, got [{low}, {high}]")
    if sign < 0:
        direction = HOLDS if high < 0 else OPPOSITE if low > 0 else UNDECIDED
    elif sign > 0:
        direction = HOLDS if low > 0 else OPPOSITE if high < 0 else UNDECIDED
    else:
        direction = UNDECIDED
    b_low, b_high = band
    if low <= b_high and high >= b_low:
        size = CONSISTENT
    elif sign < 0:
        size = SMALLER if low > b_high else LARGER
    elif sign > 0:
        size = SMALLER if high < b_low else LARGER
    else:  # an equivalence's band holds zero: an interval that misses it lies beyond it
        size = LARGER
    if -margin < low and high < margin:
        equivalence = INSIDE
    elif low >= margin or high <= -margin:
        equivalence = OUTSIDE
    else:
        equivalence = UNDECIDED
    return Readings(direction, size, equivalence)


def part_word(asserts: str, r: Readings) -> str:
    """The word for one part from its readings (the table in this module's docstring)."""
    if asserts == DIFFERENCE:
        if r.direction == HOLDS:
            return REPRODUCED if r.size == CONSISTENT else PARTLY
        if r.direction == OPPOSITE or r.equivalence == INSIDE:
            return NOT_REPRODUCED
        return INCONCLUSIVE
    if asserts == EQUIVALENCE:
        if r.equivalence == INSIDE:
            return REPRODUCED if r.size == CONSISTENT else PARTLY
        return NOT_REPRODUCED if r.equivalence == OUTSIDE else INCONCLUSIVE
    raise ValueError(f"a claim asserts {DIFFERENCE!r} or {EQUIVALENCE!r}, got {asserts!r}")


def claim_word(words: Sequence[str]) -> str:
    """A claim's word from its parts' (a part not swept counts as INCONCLUSIVE)."""
    found = set(words)
    if not found - {NOT_APPLICABLE}:
        return NOT_APPLICABLE
    if found == {REPRODUCED}:
        return REPRODUCED
    if found & {REPRODUCED, PARTLY}:
        return PARTLY
    return NOT_REPRODUCED if NOT_REPRODUCED in found else INCONCLUSIVE


def family_alpha(alpha: float, family: int) -> float:
    """The level each interval of a family of `family` is taken at (Bonferroni)."""
    return alpha / max(family, 1)
