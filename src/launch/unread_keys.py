"""Swept keys that no part of the config reads: a sweep of `+foo=1,2` trains identical jobs.

Hydra accepts any key appended with `+`, and the report then compares the jobs that differ only in
it as variants (identical losses, "equivalent"), without a word. A key is read when the schema
(`src/core/schema.py` `TrainConfig`, whose fields are the config's top-level keys) has it, or when it is
Hydra's own; a key outside both is consumed by no code. Sweeping one can be meant (tests sweep an
unread `+probe=...` on purpose to make identical jobs), so this warns and never stops the sweep.
Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from src.core.schema import TrainConfig
from src.tracking.summary import sweep_params

HYDRA_KEYS = ("hydra",)  # hydra.* overrides are the launcher's and the sweeper's, read by Hydra


def read_top_level_keys() -> set[str]:
    """The config's top-level keys some code reads: the schema's fields (its one owner) and Hydra's."""
    return {f.name for f in dataclasses.fields(TrainConfig)} | set(HYDRA_KEYS)


def unread_swept_keys(jobs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys the jobs' overrides sweep (their values differ) whose top-level name no code reads."""
    read = read_top_level_keys()
    swept = [key[len("sweep.") :] for key in sweep_params(jobs)]
    return [key for key in swept if key.split(".", 1)[0] not in read]


def unread_warning(keys: Sequence[str], n_jobs: int) -> str:
    """One line: which keys, why their jobs are identical, and how to sweep them anyway."""
    named = ", ".join(keys)
    return (
        f"[normsweep] warning: {named}: no part of the config reads {'it' if len(keys) == 1 else 'them'} "
        "(a key outside the schema, src/core/schema.py, that no code consumes), so the "
        f"{n_jobs} jobs differ only in {'its' if len(keys) == 1 else 'their'} value and the report compares "
        "identical variants; the sweep goes on: if identical jobs are meant (replicates of one config), nothing "
        "more is needed; to vary the training, sweep a key the config has (e.g. seed=0,1 or optim.lr=...)"
    )
