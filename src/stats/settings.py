"""The sequential sweeper's settings: their names, the spending functions and metrics they choose
from, and their check, for the sweeper (`hydra/sweeper=sequential`) and `python -m src.report --plan`.

Apart from the design's mathematics (src/stats/sequential.py, which needs scipy) so that Hydra's
plugin scan, which imports every sweeper on each start of `python -m src.train`, stays fast: scipy
alone took 0.67 s of a 1.07 s refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from src.core.paths import ConfigError

# The most seeds a count of "what would settle it" names: beyond it the words say "more than" (light
# here, apart from src.stats.verdicts and its scipy, for the report's number phrases a claims file reads).
MAX_SEEDS = 10_000

POCOCK, OBRIEN_FLEMING = "pocock", "obrien_fleming"
SPENDING = (POCOCK, OBRIEN_FLEMING)  # the spending functions a design may use (hydra.sweeper.spending)

# --- the sequential sweeper's settings, checked (by the sweeper and by `python -m src.report --plan`)
# The metrics a comparison can be decided on (the report's run columns); speed only where it was
# measured paired and on a quiet machine, which is why it is not the default (docs/sequential.md).
METRIC_CHOICES = ("test_loss", "tokens_per_sec")
# The sweeper's settings, in check_settings' order (conf/hydra/sweeper/sequential.yaml holds the defaults).
SETTINGS = ("first_seeds", "seeds_per_round", "max_seeds", "alpha", "metrics", "spending", "futility")


def check_settings(first_seeds: Any, seeds_per_round: Any, max_seeds: Any, alpha: Any, metrics: Any, spending: Any,
                   futility: Any) -> None:  # fmt: skip
    """Bad sweeper settings -> ConfigError naming the field and what it accepts."""
    def whole(name: str, value: Any, least: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"hydra.sweeper.{name}: must be an integer >= {least}, got {value!r}")

    whole("first_seeds", first_seeds, 2)  # a paired interval needs two seeds
    whole("seeds_per_round", seeds_per_round, 1)
    whole("max_seeds", max_seeds, first_seeds)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ConfigError(f"hydra.sweeper.alpha: must be a number in (0, 1), got {alpha!r}")
    if spending not in SPENDING:
        raise ConfigError(f"hydra.sweeper.spending: {spending!r} not allowed; valid choices: {', '.join(SPENDING)}")
    if isinstance(futility, bool) or not isinstance(futility, (int, float)) or not 0 <= futility < 1:
        raise ConfigError(f"hydra.sweeper.futility: must be a number in [0, 1) (0: never stop for futility), got {futility!r}")
    chosen = [metrics] if isinstance(metrics, str) else list(metrics or [])
    bad = [m for m in chosen if m not in METRIC_CHOICES]
    if not chosen or bad:
        raise ConfigError(f"hydra.sweeper.metrics: {bad or chosen!r} not allowed; valid choices: {', '.join(METRIC_CHOICES)}")


def check_sweeper(settings: Mapping[str, Any]) -> None:
    """`check_settings` on the sweeper's config (`hydra.sweeper`), its settings taken by name."""
    check_settings(*(settings.get(k) for k in SETTINGS))
