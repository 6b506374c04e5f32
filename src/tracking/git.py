"""The code's git state: one commit hash, computed once per process, for every record that names it.

Torch-free: the sweep's parent run (created in Hydra's launching process) and the training runs
take their `git_commit` tag from here, so the two always agree.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass

from src.core.paths import PROJECT_ROOT
from src.tracking.tags import GIT_COMMIT_TAG, GIT_DIRTY_TAG

GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class GitState:
    commit: str  # full hash, or "unknown" outside a checkout
    dirty: bool
    diff: str  # `git diff HEAD` when dirty (tracked files), else ""

    def tags(self) -> dict[str, str]:
        return {GIT_COMMIT_TAG: self.commit, GIT_DIRTY_TAG: str(self.dirty).lower()}


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def git_state() -> GitState:
    """The checkout's commit, whether tracked files differ from it, and that diff (once per process)."""
    commit = (_git("rev-parse", "HEAD") or "").strip()
    if not commit:
        return GitState("unknown", False, "")
    status = _git("status", "--porcelain", "--untracked-files=no") or ""
    dirty = bool(status.strip())
    return GitState(commit, dirty, (_git("diff", "HEAD") or "") if dirty else "")
