"""A run's variant: the values of what its sweep varied, other than the seed.

Given the flat identity configs of a sweep's (or an experiment's) runs (`flatten(identity_config(cfg))`
at sweep time, or the MLflow params the runs recorded), `find_variants` finds the keys on which the
runs differ, leaves out the seed, and turns them into axes:

- keys that always change together (`norm.norm_type` with `norm.family`, `norm.eps`, ...) are one
  axis, named by the override that sets it: `norm` for the norm group, a config group whose options
  carry their `name` (`model`, `precision`: `-m model=cpu_small,gpt2_small`) by the group, with that
  name as its value, else the dotted key;
- a key whose value follows from the axes already chosen (the learning rate of a `no_norm` run kept
  apart from the others) is folded into them, so it adds no variant of its own;
- with no axis left (a seed-only sweep, a single run) the variant is the run's norm.

Each run gets the axes' values and a short label: `torch_layernorm · post`, `qk_norm=true`,
`weight_decay=0.1`; with the norm as the only axis, the norm key itself (the study's labels).
Torch-free and MLflow-free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from src.tracking.tags import VARIANT_AXES_TAG, VARIANT_TAG

SEED_KEY = "seed"
NORM_KEY = "norm.norm_type"  # the param that names the norm (conf/norm/<key>.yaml)
NORM_AXIS = "norm"  # the norm group's axis, named as its override (`norm=a,b`)
# The baseline GPT-2 uses: the report's test losses and interleaved speeds, and the benchmarks' step
# ratios, are relative to it (a sweep without it: to its first variant).
REFERENCE_VARIANT = "torch_layernorm"


def reference_of(variants: Sequence[str]) -> str | None:
    """The variant others are measured against: REFERENCE_VARIANT where it ran, else the first (in the
    caller's order: the table's), else None."""
    return REFERENCE_VARIANT if REFERENCE_VARIANT in variants else (variants[0] if variants else None)

LR_KEY = "optim.lr"
# Params a training run logs beside its config, computed from it (`RunLife.setup`, src/training/run_life.py): they change
# with an axis but never name it.
DERIVED_PARAMS = ("n_params", "flops_per_token", "budget.")
SEPARATOR = " · "
AXES_ENV = "NORMSWEEP_VARIANT_AXES"  # the sweep's axes (JSON), for the jobs it launches


@dataclass(frozen=True)
class Axis:
    """One swept dimension: its name (the override that sets it), and every key that changes with it."""

    name: str
    keys: tuple[str, ...]  # keys[0] is the one whose value names the axis value

    @property
    def primary(self) -> str:
        return self.keys[0]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "keys": list(self.keys)}


@dataclass(frozen=True)
class Variants:
    axes: tuple[Axis, ...]
    parts: dict[str, dict[str, str]]  # run -> axis name -> value
    labels: dict[str, str]  # run -> label

    def values(self, axis: str) -> list[str]:
        """The axis's values in the runs' order (first seen first)."""
        return list(dict.fromkeys(p[axis] for p in self.parts.values()))


def text(value: Any) -> str:
    """A value as MLflow stores a param (str()), so sweep-time and read-back values compare equal."""
    return str(value)


def _partition(column: Sequence[str]) -> tuple[int, ...]:
    """The runs grouped by value: each run's index of its value's first appearance."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(v, len(first)) for v in column)


def _joint(partitions: Sequence[tuple[int, ...]], n: int) -> int:
    """Classes of the runs when every partition is applied together."""
    return len({tuple(p[i] for p in partitions) for i in range(n)})


def _group_of(key: str) -> str | None:
    """`model` for `model.name`: the config group whose option's name the key holds (each option of
    conf/model/ and conf/precision/ writes its own), else None."""
    group, _, leaf = key.partition(".")
    return group if leaf == "name" else None


def naming_keys(axis: str) -> tuple[str, ...]:
    """The keys whose value may name an axis, from the axis's name (`_axis_name`'s inverse): `norm` ->
    `norm.norm_type`; `model`, a config group's or a top-level key's name (`test_weights`) -> the
    option's `model.name` and the key itself; a dotted key -> itself."""
    if axis == NORM_AXIS:
        return (NORM_KEY,)
    return (axis,) if "." in axis else (f"{axis}.name", axis)


def _axis_name(keys: Sequence[str]) -> str:
    if NORM_KEY in keys:
        return NORM_AXIS
    return _group_of(keys[0]) or keys[0]


def _naming_order(keys: Sequence[str], preferred: Sequence[str]) -> list[str]:
    """A group's keys, the one that names the axis first: the norm, an axis the sweep named
    (`preferred`), a config group's option name (`model.name`: the keys change together because the
    option did), a config key, then a value derived from the config (n_params, budget.*)."""

    def rank(key: str) -> tuple[bool, bool, bool, bool, str]:
        derived = key.startswith(DERIVED_PARAMS)
        return (key != NORM_KEY, key not in preferred, _group_of(key) is None, derived, key)

    return sorted(keys, key=rank)


def find_axes(params: Mapping[str, Mapping[str, Any]], preferred: Sequence[str] = ()) -> tuple[Axis, ...]:
    """The axes on which runs (`run -> flat params`) differ, seed excluded; norm first. `preferred`:
    keys that name an axis when they are in its group (the axes a sweep recorded on its runs)."""
    runs = list(params)
    n = len(runs)
    if n < 2:
        return ()
    keys = sorted({k for p in params.values() for k in p})
    seeds = [text(params[r].get(SEED_KEY)) for r in runs]
    groups: dict[tuple[int, ...], list[str]] = {}
    for key in keys:
        column = [text(params[r].get(key)) for r in runs]
        # The seed and keys that are the seed under another name vary per replicate, not per variant.
        if key == SEED_KEY or column == seeds or len(set(column)) < 2:
            continue
        groups.setdefault(_partition(column), []).append(key)
    groups = {p: _naming_order(g, preferred) for p, g in groups.items()}
    # The norm's group first, then the coarsest (fewest values), then by name.
    candidates = sorted(groups.items(), key=lambda g: (NORM_KEY not in g[1], len(set(g[0])), g[1][0]))
    total = _joint(list(groups), n)
    chosen: list[tuple[tuple[int, ...], list[str]]] = []
    for partition, group in candidates:
        if _joint([p for p, _ in chosen], n) == total:
            break
        if _joint([*(p for p, _ in chosen), partition], n) > _joint([p for p, _ in chosen], n):
            chosen.append((partition, group))
    axes = []
    for _, group in chosen:
        axes.append(Axis(_axis_name(group), tuple(group)))
    return tuple(axes)


def short_names(axes: Sequence[Axis]) -> dict[str, str]:
    """axis -> the name shown in labels: its last dotted part, unless two axes share it."""
    last = [a.name.rsplit(".", 1)[-1] for a in axes]
    return {a.name: s if last.count(s) == 1 else a.name for a, s in zip(axes, last, strict=True)}


def _shown(axis: str, short: str, value: str) -> str:
    """A norm key or a word stands for itself; a bare number or flag needs its axis's name."""
    if axis == NORM_AXIS or re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", value) and value not in ("True", "False", "None"):
        return value
    shown = value.lower() if value in ("True", "False", "None") else value
    return f"{short}={shown}"


def label_of(params: Mapping[str, Any], axes: Sequence[Axis], fallback: str = "") -> tuple[str, dict[str, str]]:
    """One run's label and axis values; without axes its norm (or `fallback`)."""
    if not axes:
        norm = params.get(NORM_KEY)
        return (text(norm) if norm is not None else fallback), {}
    parts = {a.name: text(params.get(a.primary)) for a in axes}
    names = short_names(axes)
    return SEPARATOR.join(_shown(a.name, names[a.name], parts[a.name]) for a in axes), parts


def find_variants(
    params: Mapping[str, Mapping[str, Any]], fallback: Mapping[str, str] | None = None, preferred: Sequence[str] = ()
) -> Variants:
    """Every run's variant (`params`: run -> its flat identity config or MLflow params).

    `fallback` names the variant of a run without params (older records: its norm tag); `preferred`
    as for `find_axes`."""
    with_params = {r: p for r, p in params.items() if p}
    axes = find_axes(with_params, preferred)
    labels, parts = {}, {}
    for run, p in params.items():
        default = (fallback or {}).get(run, "")
        labels[run], parts[run] = label_of(p, axes, default) if p else (default, {a.name: "" for a in axes})
    return Variants(axes, parts, labels)


def variant_run_name(run_name: str, params: Mapping[str, Any], axes: Sequence[Axis], norm: str, seed: Any) -> str:
    """The run's name as MLflow records it: `run_name` (`<norm>-s<seed>`) when the sweep varied the
    norm alone, else `<variant>-s<seed>` (`hand_layernorm · pre-s0`), so runs of a norm × placement
    sweep can be told apart."""
    label = label_of(params, axes, norm)[0]
    return run_name if label == norm else f"{label}-s{seed}"


def label_without(params: Mapping[str, Any], axes: Sequence[Axis], key: str, fallback: str = "") -> str:
    """The run's label apart from the axis of `key` (e.g. the learning rate, which the stability
    report traces each variant across)."""
    return label_of(params, [a for a in axes if key not in a.keys], fallback)[0]


def variant_tags(label: str, parts: Mapping[str, str], axes: Sequence[Axis]) -> dict[str, str]:
    """The run's tags: the label, the axes' names, and each axis's value."""
    return {VARIANT_TAG: label, VARIANT_AXES_TAG: ",".join(a.name for a in axes),
            **{f"{VARIANT_TAG}.{name}": value for name, value in parts.items()}}  # fmt: skip


def axes_to_env(axes: Sequence[Axis]) -> str:
    return json.dumps([a.to_json() for a in axes])


def axes_from_env(value: str | None) -> tuple[Axis, ...]:
    if not value:
        return ()
    return tuple(Axis(str(a["name"]), tuple(a["keys"])) for a in json.loads(value))


def metric_key(label: str) -> str:
    """A label as part of an MLflow metric name (letters, digits, `_ - . /` and spaces only):
    `torch_layernorm · post` -> `torch_layernorm-post`; a norm key stays as it is."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", label.replace(SEPARATOR, "-")).strip("_") or "_"


def override_of(axis: Axis, values: Sequence[str]) -> str:
    """The command-line override that sweeps an axis over `values`: `norm=a,b`, `model.qk_norm=false,true`."""
    shown = [v.lower() if v in ("True", "False", "None") else v for v in values]
    return f"{axis.name}={','.join(shown)}"
