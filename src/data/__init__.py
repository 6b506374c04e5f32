"""The data layer: config -> data source -> token cache -> windows -> DataModule."""

from .cache import SPLITS, cache_folder, load_split, prepare_token_cache, read_meta
from .datamodule import TokenDataModule, build_datamodule
from .sources import DATA_SOURCES, DataSource, build_source
from .windows import FixedWindows, RandomWindows

__all__ = [
    "DATA_SOURCES",
    "SPLITS",
    "DataSource",
    "FixedWindows",
    "RandomWindows",
    "TokenDataModule",
    "build_datamodule",
    "build_source",
    "cache_folder",
    "load_split",
    "prepare_token_cache",
    "read_meta",
]
