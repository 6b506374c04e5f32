"""What a checkpoint file says about its run, read without torch: the file a `ckpt_path` names, and the
tracking state it carries (the run's id, its identity and fingerprint).

A checkpoint trained with another config, or a file that is no checkpoint, is refused from this
record before torch and Lightning are imported (seconds, tens of them on a loaded machine): the
run's state is plain Python inside the checkpoint's pickle, beside the tensors. torch writes a
checkpoint as a zip archive whose `<name>/data.pkl` holds that pickle, each tensor a reference to
a record of its own; the pickle is read here with every class outside a short list of Python's own
(OrderedDict, sets) read as an opaque placeholder and no tensor loaded, so nothing in the file runs
(as torch's `weights_only` reader, which trusts only a list too). Torch-free and MLflow-free.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path
from typing import Any

from src.core.paths import ConfigError
from src.tracking.identity import RUN_STATE_KEY, CheckpointSpec

PICKLE_ENTRY = "data.pkl"  # torch.save's zip layout: <archive name>/data.pkl, tensors in <archive name>/data/<key>
# Python's own classes a checkpoint's structure uses: read as themselves; any other (torch's tensors,
# storages, dtypes, Lightning's attribute dicts) becomes an `_Opaque`.
PLAIN_CLASSES: dict[tuple[str, str], type] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
}


class _Opaque:
    """Something torch would rebuild (a tensor, a storage, a dtype): kept as a placeholder, never run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:  # a dict subclass's items (Lightning's AttributeDict)
        pass

    def append(self, item: Any) -> None:  # a list subclass's items
        pass

    def extend(self, items: Any) -> None:
        pass


class _StructureReader(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return PLAIN_CLASSES.get((module, name), _Opaque)

    def persistent_load(self, pid: Any) -> Any:  # a tensor's storage: a record of the archive, not read
        return _Opaque()


def resolve_ckpt_path(spec: CheckpointSpec) -> Path | None:
    """The checkpoint to resume from: `ckpt_path=last` / `resume=true` mean this run's last.ckpt."""
    if spec.resume_from is None:
        return None
    path = spec.last if spec.resume_from == "last" else Path(spec.resume_from)
    if not path.is_file():
        raise ConfigError(f"ckpt_path: no checkpoint at {path} (run with checkpoint.enabled=true to write one)")
    return path


def checkpoint_structure(path: Path) -> Any:
    """The checkpoint's pickled structure, tensors as placeholders; ConfigError naming the file when it
    is not a checkpoint torch wrote (torch reads no other without loading all of it: `mmap`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(f"/{PICKLE_ENTRY}")]
            if len(entries) != 1:
                raise ConfigError(f"ckpt_path: {path} is not a readable checkpoint (no {PICKLE_ENTRY} in its archive)")
            with archive.open(entries[0]) as pickled:
                return _StructureReader(pickled).load()
    except ConfigError:
        raise
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, OSError, ValueError, TypeError,
            AttributeError, IndexError, KeyError) as err:  # fmt: skip
        raise ConfigError(f"ckpt_path: {path} is not a readable checkpoint ({type(err).__name__})") from None


def read_run_state(path: Path) -> dict[str, Any]:
    """The tracking state a checkpoint carries ({} if it has none); ConfigError if it is no checkpoint."""
    ckpt = checkpoint_structure(path)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ConfigError(f"ckpt_path: {path} is not a Lightning checkpoint (no state_dict)")
    callbacks = ckpt.get("callbacks", {})
    state = callbacks.get(RUN_STATE_KEY, {}) if isinstance(callbacks, dict) else {}
    return state if isinstance(state, dict) else {}
