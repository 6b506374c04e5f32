"""The norms normsweep ships (conf/norm/*.yaml) and those of the user's config folders, read without torch.

Each shipped YAML names its class or factory with Hydra's `_target_`, as a norm of the user's does:
`shipped_norms` maps each `norm_type` to that target, which `src.model.norms.NormSpec` builds and the
run's identity leaves out (the target is the project's code, which the code fingerprint holds, and
runs recorded before the key existed keep their fingerprint).
"""

from __future__ import annotations

import functools

from omegaconf import OmegaConf

from src.core.paths import CONF_DIR, user_config_dirs
from src.core.schema import NORM_TARGET_KEY


@functools.cache
def shipped_norms() -> dict[str, str]:
    """`norm_type` -> the `_target_` its conf/norm YAML names, by file name (read once per process:
    the package's own YAML files do not change while it runs)."""
    found = {}
    for path in sorted((CONF_DIR / "norm").glob("*.yaml")):
        raw = OmegaConf.load(path)
        found[str(raw.norm_type)] = str(raw[NORM_TARGET_KEY])
    return found


def builtin_variants() -> list[str]:
    """The norms normsweep ships: the `norm_type` of each conf/norm/*.yaml."""
    return list(shipped_norms())


def known_variants() -> list[str]:
    """Every norm key a run can have: the built-ins, and the norm YAMLs of the user's config folders
    on Hydra's search path (`--config-dir`, `hydra.searchpath`), each named by its file."""
    own = [p.stem for folder in user_config_dirs() for p in (folder / "norm").glob("*.yaml")]
    return sorted({*builtin_variants(), *own})


def without_shipped_target(norm: dict) -> dict:
    """A composed norm node as runs recorded it before the shipped YAMLs named their `_target_`:
    without it when it is the shipped one of its `norm_type` (a norm of the user's keeps its own)."""
    if norm.get(NORM_TARGET_KEY) is not None and norm.get(NORM_TARGET_KEY) == shipped_norms().get(str(norm.get("norm_type"))):
        return {k: v for k, v in norm.items() if k != NORM_TARGET_KEY}
    return norm
