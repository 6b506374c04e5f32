"""The registry of data sources the `data/` configs name (`data.source`).

Each entry is "module:class"; the module is imported only when its source is built, so a source
with optional dependencies (FineWeb reads parquet with pyarrow, the hub with `datasets`) costs
nothing to the runs that do not use it. The sources import `base`, never this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from ..core.paths import ConfigError
from .base import DataSource

DATA_SOURCES: dict[str, str] = {
    "shakespeare": "shakespeare:ShakespeareSource",
    "text_files": "text_files:TextFilesSource",
    "fineweb": "fineweb:FineWebSource",
}


def source_class(name: str) -> type[DataSource]:
    """The class registered as `data.source=name`."""
    if name not in DATA_SOURCES:
        raise ConfigError(f"unknown data.source {name!r}; valid choices: {sorted(DATA_SOURCES)}")
    module, cls = DATA_SOURCES[name].split(":")
    return getattr(import_module(f"{__package__}.{module}"), cls)


def build_source(data_cfg: Mapping[str, Any]) -> DataSource:
    """The source named by `data_cfg['source']`, built from the rest of the data config."""
    return source_class(data_cfg.get("source")).from_config(data_cfg)
