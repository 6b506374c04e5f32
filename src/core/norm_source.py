"""Where a norm the user brings by config comes from: its import path, the file that defines it and
that file's hash, or its installed distribution and version. It joins the run's code fingerprint and
its provenance tags (a shipped norm's code is the project's, fingerprinted with it)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def _defining_file(obj: Any) -> Path | None:
    try:
        found = inspect.getsourcefile(obj) or inspect.getfile(obj)
    except (TypeError, OSError):
        return None
    return Path(found).resolve() if found else None


def _distribution(obj: Any, file: Path | None) -> tuple[str, str] | None:
    """(distribution, version) of an installed package's object; None for the user's own module
    (found on PYTHONPATH, not inside an installed distribution's files)."""
    top = (getattr(obj, "__module__", None) or "").split(".")[0]
    for name in _distributions().get(top, []):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        site = Path(str(dist.locate_file(""))).resolve()
        if file is None or site in file.parents:
            return dist.metadata["Name"], dist.version
    return None


@dataclass(frozen=True)
class NormSource:
    """A user norm's provenance: import path, defining file and its hash, or its distribution."""

    target: str
    file: str  # the file that defines it ("" when Python cannot tell: a compiled extension)
    file_sha256: str  # that file's bytes ("" as above)
    package: str  # "name==version" when it comes from an installed distribution, else ""
    reference: str  # the built-in its YAML's `reference` names; "" when none (the run then records none)

    @classmethod
    def of(cls, target: str, factory: Any, reference: str) -> NormSource:
        """`factory`: the object `target` names (src.model.user_norms.UserNorm imported it)."""
        file = _defining_file(factory)
        dist = _distribution(factory, file)
        digest = hashlib.sha256(file.read_bytes()).hexdigest() if file is not None and file.is_file() else ""
        return cls(target, str(file or ""), digest, f"{dist[0]}=={dist[1]}" if dist else "", reference)

    def code(self) -> tuple[dict[str, str], dict[str, str]]:
        """What joins the run's code fingerprint: (files, package versions). An installed package counts
        by its version (and the file's hash: an edited site-packages file changes results too)."""
        files = {f"norm {self.target} ({Path(self.file).name})": self.file_sha256[:16]} if self.file else {}
        versions = dict([self.package.split("==", 1)]) if self.package else {}
        return files, versions
