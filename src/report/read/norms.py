"""The norm keys a run can have, read from the config folders (no torch): the built-ins' (conf/norm)
and the user's own (a norm YAML in a config folder of theirs on Hydra's search path)."""

from __future__ import annotations

import functools

from omegaconf import OmegaConf

from src.core.paths import CONF_DIR, user_config_dirs


def builtin_variants() -> list[str]:
    """The norms normsweep ships: the `norm_type` of each conf/norm/*.yaml (read without torch)."""
    return list(_shipped_norms())


@functools.cache
def _shipped_norms() -> tuple[str, ...]:
    # The package's own YAML files do not change while it runs: read once per process.
    return tuple(sorted(str(OmegaConf.load(p).norm_type) for p in (CONF_DIR / "norm").glob("*.yaml")))


def known_variants() -> list[str]:
    """Every norm key a run can have: the built-ins, and the norm YAMLs of the user's config folders
    on Hydra's search path (`--config-dir`, `hydra.searchpath`), each named by its file."""
    own = [p.stem for folder in user_config_dirs() for p in (folder / "norm").glob("*.yaml")]
    return sorted({*builtin_variants(), *own})
