"""Native CPU kernels, compiled on first use with the machine's C++ compiler (cached afterwards).

`torch.utils.cpp_extension.load` builds `csrc/rms_norm.cpp` once per environment into
`$TORCH_EXTENSIONS_DIR` (default `~/.cache/torch_extensions`); later imports load the cached
library. The build is keyed by the source's content and by the torch it is built against, not by
where the checkout is: the source is copied into a folder named by both and built there, so a second
checkout on the same environment (a worktree) loads the library the first one built instead of
building it again, and two environments on one machine (a clone's own .venv beside another) keep a
build each instead of rebuilding over each other's (the command names each one's torch headers and
libraries). `-march=native` lets the compiler vectorise the row loops with the widest instructions
this CPU has: the build is for the machine that runs it, like inductor's. Without a compiler (or
ninja) the loader returns None and callers use their portable path.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from src.core.atomic_io import atomic_write

CSRC = Path(__file__).resolve().parent / "csrc"


def build_folder(source: Path) -> Path:
    """Where `source` is built: under torch's extension root, by the torch it builds against (version
    and install folder) and the source's hash."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    installed = hashlib.sha256(str(Path(torch.__file__).resolve().parent).encode()).hexdigest()[:8]
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    environment = f"normsweep-torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{installed}"
    return root / environment / f"{source.stem}-{digest}"


@lru_cache(maxsize=1)
def rms_norm_extension() -> ModuleType | None:
    """The compiled `rms_norm_fwd` / `rms_norm_bwd` module, or None if it cannot be built here."""
    try:
        from torch.utils.cpp_extension import load

        source = CSRC / "rms_norm.cpp"
        folder = build_folder(source)
        folder.mkdir(parents=True, exist_ok=True)
        built_from = folder / source.name  # the same path for every checkout: ninja sees one build
        if not built_from.is_file():  # whole or absent: processes starting together may copy it at once
            atomic_write(built_from, source.read_bytes())
        return load(
            name=f"normsweep_rms_norm_{folder.name.rsplit('-', 1)[1]}",
            sources=[str(built_from)],
            build_directory=str(folder),
            extra_cflags=["-O3", "-march=native", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, unsupported platform: stay correct, go slower
        warnings.warn(f"fast_rmsnorm: native CPU kernel unavailable ({exc!r}); using compiled ops", stacklevel=2)
        return None
