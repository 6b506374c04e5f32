"""Patches of a library's internals, each behind a check of the installed version.

Where the project changes a library's private internals (Hydra's composition, memoized in
src/core/compositions.py; Flask's view table and MLflow's server hooks, for the UI's start page in
src/tracking/ui_app.py), it does so only on the versions it was written and tested against. On any
other version, or when `UNPATCHED_ENV` is set (the suite runs the fallbacks that way), the library
runs as it ships, and the process says so once: what is left out, and why. Torch-free.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from src.core.terminal import say

UNPATCHED_ENV = "NORMSWEEP_UNPATCHED"  # set: every patch falls back to the library as it ships
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
