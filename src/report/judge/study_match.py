"""Which of a sweep's variants is the study's norm: the one whose every other swept axis, and the
model axes the study fixed (pre-norm, no QK-norm, its init), has the study's value, read from the
`experiment=gpt2_small_study` preset (the one owner of the study's configuration). `torch_layernorm ·
post` is not the study's `torch_layernorm`. Torch-free.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from src.report.read.claims import ClaimsFile
from src.report.read.published import STUDY
from src.report.read.table import AXIS_PREFIX
from src.tracking.variants import NORM_AXIS, Axis, text

if TYPE_CHECKING:
    from omegaconf import DictConfig


def study_values(axes: Sequence[Axis], source: ClaimsFile) -> dict[str, str | None]:
    """column of the runs frame -> the source's value (as a run's param spells it; None where its
    configuration has no such key): each swept axis but the norm, and the model axes it fixed. A
    file with no preset names no configuration: every variant of its norms is its norm ({})."""
    setting = source.setting
    if setting is None or not setting.preset:
        return {}
    keys = {AXIS_PREFIX + a.name: a.primary for a in axes if a.name != NORM_AXIS} | {k: k for k in setting.model_axes}
    return {column: _study_value(setting.preset, key) for column, key in keys.items()}


def study_code(source: ClaimsFile | None = None) -> dict[str, str | None]:
    """The settings of the source's code a config can change (its setting's `code`), as its preset has them."""
    setting = (source or STUDY).setting
    return {key: _study_value(setting.preset, key) for key in setting.code} if setting and setting.preset else {}


@functools.cache
def _study_config(preset: str) -> DictConfig:
    from src.core import paths

    return paths.compose([f"experiment={preset}"])


def _study_value(preset: str, key: str) -> str | None:
    """The preset's value of `key` as a run's param spells it; None where it has no such key."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(_study_config(preset), key, default=None, throw_on_missing=False)
    return None if value is None else text(value)


# Why a variant is not the study's norm, as data: (the variant, the key, its value, the study's; None:
# the study's configuration has no such key).
Mismatch = tuple[str, str, str, str | None]


def differences(label: str, row: pd.Series, values: Mapping[str, str | None]) -> list[Mismatch]:
    """Why the variant `label` (its runs' first `row`) is not the study's norm: each column of `values`
    the row has another value in ("": not recorded, on older runs, is no difference)."""
    off = {c: study for c, study in values.items() if c in row and row[c] not in ("", study)}
    return [(label, c.removeprefix(AXIS_PREFIX), str(row[c]), study) for c, study in off.items()]


def match(norm: str, runs: pd.DataFrame, values: Mapping[str, str | None],
          rank: Callable[[pd.DataFrame], tuple[bool, ...]] | None = None) -> tuple[str | None, tuple[Mismatch, ...]]:  # fmt: skip
    """The sweep's variant that is the study's `norm` (every column of `values` at the study's
    value), or None and why not; of several, the first by `rank` (a variant's runs -> its sort key), else the first."""
    of_norm = runs[runs.norm == norm]
    reasons, found = [], []
    for label, group in of_norm.groupby("variant", sort=False):
        off = differences(str(label), group.iloc[0], values)
        if not off:
            found.append((str(label), group))
        reasons += off
    if found:
        return min(found, key=lambda f: rank(f[1]) if rank else ())[0], ()  # min keeps the first of equals
    return None, tuple(dict.fromkeys(reasons))


def split_precision(values: Mapping[str, str | None]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The study's values as its swept precision keys' (`axis.precision`, `axis.precision.name`) and the
    rest: precision is a fact of a claim's domain (src.report.judge.study_effects.outside), judged the
    same whether the sweep varied it or not, never a reason a variant is not the study's norm."""
    precision = {c: v for c, v in values.items() if c.removeprefix(AXIS_PREFIX).split(".")[0] == "precision"}
    return precision, {c: v for c, v in values.items() if c not in precision}
