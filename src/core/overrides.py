"""A basic sweep's jobs from its parsed overrides, through Hydra's public `Override` API.

What Hydra's basic sweeper does before it launches: one list of lines per key (a sweep's values, or
the one value), a later line of a key taking the earlier's place, and the product of the lists.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hydra.core.override_parser.types import Override
from hydra.errors import HydraException


def job_overrides(parsed: Sequence[Override]) -> list[list[str]]:
    """The override lines of every job, in Hydra's basic sweeper's order."""
    lines: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            lines[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            lines[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:  # interval(...): a range of reals that only an optimizing sweeper samples
            raise HydraException(f"{override.input_line}: a basic sweep takes lists, ranges and globs, not an interval")
    return [list(job) for job in itertools.product(*lines.values())]
