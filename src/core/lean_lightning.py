"""Lightning without torchmetrics' optional imports: scipy.signal and matplotlib, deferred.

Lightning imports torchmetrics (for its `Metric` type), and torchmetrics, as it loads, imports
scipy.signal (only to alias `scipy.signal.hamming` for an audio package) and matplotlib (for
`Metric.plot`). normsweep's training uses neither, and every process that imports Lightning paid for
them: about 2 s of CPU a process on a 2-core host (docs/benchmarks.md, "Starting a process"). So, on
the torchmetrics this was written for, while torchmetrics loads:

- `import scipy.signal` gets a stand-in holding the alias; any other use of the stand-in loads the
  real module. Once torchmetrics has loaded, the stand-in is gone, and the real scipy.signal loads
  wherever it is first imported, the alias then added to it as torchmetrics would have;
- torchmetrics reads matplotlib as not installed: its plotting (`Metric.plot`) says matplotlib is
  missing. matplotlib itself is untouched (the report draws its figures with it).

`install()` runs from src/__init__.py, before any module of the package imports Lightning; it only
puts a finder on `sys.meta_path`, which acts when torchmetrics is imported. Elsewhere (another
torchmetrics, or NORMSWEEP_UNPATCHED set) torchmetrics loads as it ships (src/core/patches.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

TORCHMETRICS_WRITTEN_FOR = {"torchmetrics": ">=1.9,<1.10"}  # scipy.signal and matplotlib imported as they are there
LEAN_PATCH = "Lightning's start without scipy.signal and matplotlib (src/core/lean_lightning.py)"
LEAN_INSTEAD = "torchmetrics imports both as Lightning loads it (about 2 s of CPU a process)"
SIGNAL = "scipy.signal"
ALIAS = "hamming"  # what torchmetrics adds to scipy.signal: an old name of scipy.signal.windows.hamming


class _Then(importlib.abc.Loader):
    """A module's own loader, with `before` and `after` run around its code."""

    def __init__(self, loader: importlib.abc.Loader, before: Callable[[], None], after: Callable[[types.ModuleType], None]) -> None:
        self.loader, self.before, self.after = loader, before, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.before()
        try:
            self.loader.exec_module(module)
        finally:
            self.after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the module's own loader answers
        return getattr(self.loader, name)


class _StandIn(types.ModuleType):
    """scipy.signal while torchmetrics loads: the alias torchmetrics looks for, and, for anything
    else, the real module (loaded then)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's own questions (__path__, ...): a stand-in has none
            raise AttributeError(name)
        return getattr(_real_signal(), name)


def _hamming(*args: Any, **kwargs: Any) -> Any:
    return _real_signal().windows.hamming(*args, **kwargs)


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandIn(SIGNAL)
        setattr(module, ALIAS, _hamming)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class LeanFinder(importlib.abc.MetaPathFinder):
    """Acts on three imports only: torchmetrics (the window in which it defers), scipy.signal (the
    stand-in inside the window; the alias after it) and torchmetrics.utilities.imports (matplotlib
    read as absent)."""

    def __init__(self) -> None:
        self.loading = False  # torchmetrics is being imported
        self.standing_in = False  # ... and scipy.signal is the stand-in
        self.alias_owed = False  # the real scipy.signal, when it loads, gets torchmetrics' alias

    def find_spec(self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == "torchmetrics" and not self.loading:
            from src.core.patches import patchable  # only now: what it imports is cheap beside torch's

            if not patchable(LEAN_PATCH, TORCHMETRICS_WRITTEN_FOR, LEAN_INSTEAD):
                self.remove()
                return None
            return _wrapped(name, path, self._open, self._close)
        if name == SIGNAL and self.standing_in:
            return importlib.machinery.ModuleSpec(SIGNAL, _StandInLoader())
        if name == "torchmetrics.utilities.imports" and self.loading:
            return _wrapped(name, path, lambda: None, _no_matplotlib)
        if name == SIGNAL and self.alias_owed:
            return _wrapped(name, path, self.remove, _alias)
        return None

    def _open(self) -> None:
        self.loading = self.standing_in = True

    def _close(self, module: types.ModuleType) -> None:
        self.loading = self.standing_in = False
        stand_in = sys.modules.get(SIGNAL)
        if not isinstance(stand_in, _StandIn):  # scipy.signal was loaded for real (or never asked for)
            self.remove()
            return
        del sys.modules[SIGNAL]
        scipy = sys.modules.get("scipy")
        if scipy is not None and getattr(scipy, "signal", None) is stand_in:
            delattr(scipy, "signal")
        self.alias_owed = True

    def remove(self) -> None:
        self.loading = self.standing_in = self.alias_owed = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _real_signal() -> types.ModuleType:
    """The real scipy.signal, with torchmetrics' alias, in sys.modules in place of the stand-in."""
    for finder in _finders():
        finder.standing_in = False  # torchmetrics' window stays open for matplotlib
    if isinstance(sys.modules.get(SIGNAL), _StandIn):
        del sys.modules[SIGNAL]
    return _alias(importlib.import_module(SIGNAL))


def _alias(module: types.ModuleType) -> types.ModuleType:
    if not hasattr(module, ALIAS) and hasattr(module, "windows"):  # (not after a failed import)
        setattr(module, ALIAS, module.windows.hamming)
    return module


def _wrapped(name: str, path: Sequence[str] | None, before: Callable[[], None], after: Callable[[types.ModuleType], object]) -> importlib.machinery.ModuleSpec | None:
    """The spec the path finder gives `name`, its loader running `before` and `after` around the module's code."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None and spec.loader is not None:
        spec.loader = _Then(spec.loader, before, after)
    return spec


def _no_matplotlib(module: types.ModuleType) -> None:
    if hasattr(module, "_MATPLOTLIB_AVAILABLE"):
        module._MATPLOTLIB_AVAILABLE = False


def _finders() -> list[LeanFinder]:
    """This process's finders on sys.meta_path (one, or none once removed)."""
    return [f for f in sys.meta_path if isinstance(f, LeanFinder)]


def uninstall() -> None:
    """Lightning as it ships from here on (the benchmarks' bare floor, src/bench/floor.py)."""
    for finder in _finders():
        finder.remove()


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process, unless torchmetrics is loaded already."""
    if "torchmetrics" in sys.modules or _finders():
        return
    sys.meta_path.insert(0, LeanFinder())
