"""The data layer: config -> data source -> token cache -> windows -> DataModule.

Importing it does not import torch: the sources and the token cache are plain Python and numpy
(the `python -m src.data` command needs nothing more). The torch side, the DataModule and the
window datasets, is imported on first use of its names.
"""

from importlib import import_module
from typing import Any

from .base import DATA_SOURCES, SPLITS, DataSource, build_source
from .cache import cache_folder, load_split, read_meta

_TORCH_SIDE = {
    "TokenDataModule": "datamodule",
    "build_datamodule": "datamodule",
    "FixedWindows": "windows",
    "RandomWindows": "windows",
}

__all__ = [
    "DATA_SOURCES",
    "SPLITS",
    "DataSource",
    "build_source",
    "cache_folder",
    "load_split",
    "read_meta",
    *_TORCH_SIDE,
]


def __getattr__(name: str) -> Any:
    if name in _TORCH_SIDE:
        return getattr(import_module(f"{__name__}.{_TORCH_SIDE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
