"""The report's settings as a config or a command line gives them: the equivalence margins
(`report.margin.*`), the pairs (`report.pairs`) and each axis's reference value (`report.reference`),
each checked, with a ConfigError naming the key.

A sweep checks them before its first job trains (src.launch.callbacks), so this module imports no
pandas, scipy, matplotlib, MLflow or torch (tests/test_architecture.py); judging the pairs is
src.report.judge.pairs, which reads its margins and pairs from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from src.core.norm_yamls import known_variants
from src.core.paths import ConfigError
from src.core.schema import MarginSchema

if TYPE_CHECKING:
    from src.report.read.claims import ClaimsFile

MARGIN_KEYS = tuple(f.name for f in fields(MarginSchema))  # the schema's: test_loss (nats), speed (relative)


def default_margin(key: str) -> float:
    """`report.margin.<key>`'s default: the schema's (src/core/schema.py), the one owner of the margins."""
    return float(getattr(MarginSchema, key))


# metric -> (margin key, label, relative?)
METRICS: dict[str, tuple[str, str, bool]] = {
    "test_loss": ("test_loss", "test loss", False),
    "tokens_per_sec": ("speed", "tokens/s", True),
}


@dataclass
class Margins(MarginSchema):
    """The report's equivalence margins: the schema's fields and defaults (src/core/schema.py
    MarginSchema owns them), each checked > 0, and looked up by metric."""

    def __post_init__(self) -> None:
        for key in MARGIN_KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"report.margin.{key}: must be a number > 0, got {value!r}")

    def of(self, metric: str) -> float:
        return float(getattr(self, METRICS[metric][0]))


def check_pairs(pairs: Sequence[Sequence[str]], known: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """User-named pairs as (a, b) tuples; an unknown variant or a malformed pair is a ConfigError."""
    known = list(known if known is not None else known_variants())
    out = []
    for pair in pairs:
        if isinstance(pair, str) or len(pair) != 2:
            raise ConfigError(f"report.pairs: each pair is two variants [a, b], got {pair!r}")
        a, b = (str(v) for v in pair)
        for name in (a, b):
            if name not in known:
                raise ConfigError(f"report.pairs: unknown variant {name!r} in {[a, b]}; valid choices: {', '.join(known)}")
        if a == b:
            raise ConfigError(f"report.pairs: a variant compared with itself: {[a, b]}")
        out.append((a, b))
    return out


def settings(report_cfg: Mapping[str, Any] | None, margin_loss: float | None = None, margin_speed: float | None = None,
             pairs: Sequence[Sequence[str]] | None = None) -> tuple[Margins, list[tuple[str, str]] | None]:  # fmt: skip
    """Margins and pairs from the config's `report` group, each overridable (the CLI's options)."""
    report_cfg = report_cfg or {}
    margin = report_cfg.get("margin") or {}
    chosen_margins = {"test_loss": margin_loss, "speed": margin_speed}
    margins = Margins(**{
        key: value if value is not None else margin.get(key, default_margin(key)) for key, value in chosen_margins.items()
    })  # fmt: skip
    chosen = pairs if pairs is not None else report_cfg.get("pairs")
    return margins, (check_pairs(chosen) if chosen is not None else None)


class ReportSettings(NamedTuple):
    """The `report` group as the report reads it, each setting checked (`report_settings`)."""

    margins: Margins = Margins()
    pairs: list[tuple[str, str]] | None = None  # None: the study's pairs
    reference: dict[str, str] | None = None  # axis -> its reference value (None: each axis's first)
    claims: Sequence[ClaimsFile] = ()  # the claims files judged, each in its own section (none: the study's)


def report_settings(report_cfg: Mapping[str, Any] | None, margin_loss: float | None = None, margin_speed: float | None = None,
                    pairs: Sequence[Sequence[str]] | None = None) -> ReportSettings:  # fmt: skip
    """Every report setting, read once for the report and for a sweep's start, which checks them all."""
    from src.report.read.claims import chosen  # late: pydantic, for the report and a sweep's start alone

    margins, chosen_pairs = settings(report_cfg, margin_loss, margin_speed, pairs)
    return ReportSettings(margins, chosen_pairs, reference_setting(report_cfg), chosen(report_cfg))


def reference_setting(report_cfg: Mapping[str, Any] | None) -> dict[str, str] | None:
    """`report.reference`: axis -> its reference value, or None (each axis's first value; the norms' pairs)."""
    chosen = (report_cfg or {}).get("reference")
    if chosen is None:
        return None
    if not isinstance(chosen, Mapping) or not chosen:
        raise ConfigError(f"report.reference: a mapping of axis to value (e.g. {{model.norm_placement: pre}}) or null, got {chosen!r}")
    return {str(k): str(v) for k, v in chosen.items()}  # as the runs' params spell it (MLflow stores str(value): True, 0.1)


def reference_values(reference: Mapping[str, str] | None, values: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """axis -> reference value, checked against each axis's `values` (the runs', or a sweep's jobs')."""
    out = {}
    for name, value in (reference or {}).items():
        # An axis by its name or its last dotted part (`norm_placement` for `model.norm_placement`).
        axis = next((a for a in values if name in (a, a.rsplit(".", 1)[-1])), None)
        if axis is None:
            raise ConfigError(f"report.reference: {name!r} is not an axis of this sweep; its axes: {list(values) or 'none (one variant)'}")
        match = next((h for h in values[axis] if h.lower() == value.lower()), None)
        if match is None:
            raise ConfigError(f"report.reference: no run has {axis}={value}; its values: {', '.join(values[axis])}")
        out[axis] = match
    return out
