"""Patches of a library's internals, each behind a check of the installed version.

Where the project touches a library's private internals (Hydra's composition, memoized in
src/core/compositions.py; Hydra's option parser and a failed job's class, below; Flask's view table,
for the UI's start page in src/tracking/ui_app.py), it does so only on the versions it was written
and tested against; docs/configuration.md#library-internals lists each, why, and its fallback. On any
other version, or when `UNPATCHED_ENV` is set (the suite runs the fallbacks that way), the library
runs as it ships, and the process says so once: what is left out, and why. Torch-free.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from src.core.terminal import say

UNPATCHED_ENV = "NORMSWEEP_UNPATCHED"  # set: every patch falls back to the library as it ships
HYDRA_WRITTEN_FOR = {"hydra-core": ">=1.3.2,<1.4"}  # the Hydra whose internals are touched
ARGV_PATCH = "options after overrides (python -m src.train)"
ARGV_INSTEAD = "Hydra reads the command line as typed: its options first, then the overrides"
FAILURE_PATCH = "a failed job's one line (src/launch/sweep_end.py)"
FAILURE_INSTEAD = "Hydra prints its own line, with every override of the job, before the job's"
# torch's MemTracker (a private module, torch.distributed._tools.mem_tracker) with its per-module peak
# walk replaced by the process-wide peak alone (`_update_peak_stats`, reading `_curr_mem_snap`).
TORCH_MEM_WRITTEN_FOR = {"torch": ">=2.6,<2.15"}
PEAK_PATCH = "the memory check's fast peak tracking (src/preflight/memory.py)"
PEAK_INSTEAD = "torch's MemTracker runs as it ships: the same estimate, a few times slower"
# torch._dynamo's recompile limits, under these names since torch 2.7 (`cache_size_limit` before).
TORCH_RECOMPILE_WRITTEN_FOR = {"torch": ">=2.7,<2.15"}
RECOMPILE_PATCH = "a compiled benchmark's recompile limit (src/bench/norms.py)"
RECOMPILE_INSTEAD = "torch's default limit: past it, a shape runs eager (its compiled timing is then the eager one)"
_said: set[str] = set()  # the patches whose fallback this process has announced


def patchable(what: str, written_for: dict[str, str], instead: str) -> bool:
    """May the patch `what` be applied? `written_for`: distribution -> the versions it was written
    and tested against (a pip specifier). When not: one warning line per process, on stderr, naming
    the patch, the reason and what happens `instead`, and False."""
    reason = f"{UNPATCHED_ENV} is set" if os.environ.get(UNPATCHED_ENV) else None
    for dist, spec in written_for.items():
        if reason is not None:
            break
        try:
            found = version(dist)
            if Version(found) not in SpecifierSet(spec):
                reason = f"{dist} {found} is not the {spec} it was written for"
        except (PackageNotFoundError, InvalidVersion) as err:
            reason = f"{dist}'s version cannot be read ({type(err).__name__})"
    if reason is None:
        return True
    if what not in _said:
        _said.add(what)
        say(f"[normsweep] warning: {what} left out: {reason}; {instead}", sys.stderr)
    return False


def hydra_options_parser() -> argparse.ArgumentParser | None:
    """Hydra's own command-line parser, which tells its options from the overrides (Hydra has no public
    door to it: `hydra._internal.utils.get_args_parser`); None on another Hydra (ARGV_INSTEAD)."""
    if not patchable(ARGV_PATCH, HYDRA_WRITTEN_FOR, ARGV_INSTEAD):
        return None
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def recast_job_return(job_return: object, cls: type) -> None:
    """Make a job's result, which the launcher already holds, an instance of `cls` (a subclass of
    Hydra's JobReturn that raises its failure without Hydra's line): only in place (`__class__`),
    for which Hydra has no door; on another Hydra it stays as it is (FAILURE_INSTEAD)."""
    if patchable(FAILURE_PATCH, HYDRA_WRITTEN_FOR, FAILURE_INSTEAD):
        job_return.__class__ = cls
