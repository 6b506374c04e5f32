"""The code that can change a run's numbers: a fingerprint of its files and library versions.

A run's config fingerprint (src.tracking.identity) says *what* was trained; this says *with which
code*. Fix a bug in the model and the same config no longer promises the same numbers, so a re-run
sweep must not reuse the old result silently (src.tracking.run_plan.decide_job applies
`sweep.on_code_change`). The fingerprint is computed from file contents, not from git, so it holds
for an installed copy too; the commit is recorded beside it by src.tracking.git. Torch-free: it
reads versions from the installed distributions' metadata. Computed once per process (docs/sweeps.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from src.core.paths import PROJECT_ROOT
from src.tracking.tags import CODE_FINGERPRINT_TAG

# What can change a training run's numbers, relative to the project root; a folder counts every file
# under it. Everything else in src/ only records, schedules, reports or estimates runs, so a change
# there leaves results as they were: tracking/ (what is written to MLflow, not what is computed),
# launch/ (which jobs run, when), report/, bench/, preflight/, ui.py, paths.py (locations), locks.py.
# conf/ is the config, covered by the config fingerprint, but for conf/norm (below); docs, tests and README
# change nothing.
CODE_PATHS = (
    "src/model",  # the GPT, the norm registry and kernels (csrc/: the C++ built on first use)
    "src/training",  # the config -> model config (run_spec), LightningModule, optimizer, schedule, budget, Trainer, callbacks, checkpoints, resume
    "src/data",  # sources, tokenizer, token cache, windows and their order
    "src/assets",  # the bundled corpus and the tokenizer's BPE ranks
    "src/core/devices.py",  # device choice and matmul precision
    "src/train.py",  # seeding, and the order in which model, data and Trainer are built
    "conf/norm",  # the shipped norms' `_target_`: the code that builds each (the config fingerprint leaves it out)
)
# Libraries whose version can change the numbers of the same code (kernels, loops, defaults).
CODE_PACKAGES = ("torch", "lightning")
SKIPPED_PARTS = ("__pycache__",)  # bytecode caches: rewritten by any import, not source
SKIPPED_SUFFIXES = (".pyc", ".pyo")
FINGERPRINT_CHARS = 16
FILE_HASH_CHARS = 16
MANIFEST_ARTIFACT = "code/manifest.json"  # on every training run: CodeState.manifest_json()


@dataclass(frozen=True)
class CodeState:
    """The code of this process: a fingerprint, and the manifest it is the hash of."""

    fingerprint: str
    files: dict[str, str]  # path relative to the project root -> sha256 (shortened) of its bytes
    versions: dict[str, str]  # package -> installed version

    def joined(self, files: dict[str, str], versions: dict[str, str]) -> CodeState:
        """This code with a run's own code beside it (a norm of the user's: its file, or its package's
        version), under one fingerprint: editing that file stops a re-run as editing src/model does."""
        if not files and not versions:
            return self
        return _state({**self.files, **files}, {**self.versions, **versions})

    def tags(self) -> dict[str, str]:
        return {CODE_FINGERPRINT_TAG: self.fingerprint}

    def manifest_json(self) -> str:
        """What a run records as its code manifest (so a later run can name the files that differ)."""
        body = {"fingerprint": self.fingerprint, "files": self.files, "versions": self.versions}
        return json.dumps(body, indent=1, sort_keys=True)


def package_version(distribution: str) -> str:
    """An installed distribution's version, or "not installed" (a run still records that it lacked it)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _files(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in CODE_PATHS:
        path = root / entry
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
        for file in found:
            rel = file.relative_to(root)
            if any(part in SKIPPED_PARTS for part in rel.parts) or file.suffix in SKIPPED_SUFFIXES:
                continue
            out[rel.as_posix()] = hashlib.sha256(file.read_bytes()).hexdigest()[:FILE_HASH_CHARS]
    return out


def compute(root: Path) -> CodeState:
    """The code state of the project at `root` (its CODE_PATHS) with this interpreter's packages."""
    return _state(_files(root), {name: package_version(name) for name in CODE_PACKAGES})


def _state(files: dict[str, str], versions: dict[str, str]) -> CodeState:
    canonical = json.dumps({"files": files, "versions": versions}, sort_keys=True, separators=(",", ":"))
    return CodeState(hashlib.sha256(canonical.encode()).hexdigest()[:FINGERPRINT_CHARS], files, versions)


@functools.cache
def code_state() -> CodeState:
    """The running code's state (once per process): the files this process imports from."""
    return compute(PROJECT_ROOT)


def read_manifest(text: str) -> CodeState | None:
    """A recorded manifest (CodeState.manifest_json), or None when it cannot be read."""
    try:
        body = json.loads(text)
        return CodeState(str(body["fingerprint"]), dict(body["files"]), dict(body["versions"]))
    except (ValueError, KeyError, TypeError):
        return None


def differences(old: CodeState, new: CodeState) -> list[str]:
    """What changed from `old` to `new`: file paths (added, removed or edited), then `torch 2.12.0 -> 2.13.0`."""
    changed = [f for f in sorted(set(old.files) | set(new.files)) if old.files.get(f) != new.files.get(f)]
    changed += [
        f"{name} {old.versions.get(name, '?')} -> {new.versions.get(name, '?')}"
        for name in sorted(set(old.versions) | set(new.versions))
        if old.versions.get(name) != new.versions.get(name)
    ]
    return changed
