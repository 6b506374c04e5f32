"""Native CPU kernels, compiled on first use with the machine's C++ compiler (cached afterwards).

`torch.utils.cpp_extension.load` builds `csrc/rms_norm.cpp` once per machine into
`$TORCH_EXTENSIONS_DIR` (default `~/.cache/torch_extensions`), ~20 s on two cores; later imports
load the cached library. `-march=native` lets the compiler vectorise the row loops with the
widest instructions this CPU has: the build is for the machine that runs it, like inductor's.
Without a compiler (or ninja) the loader returns None and callers use their portable path.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path
from types import ModuleType

CSRC = Path(__file__).resolve().parent / "csrc"


@lru_cache(maxsize=1)
def rms_norm_extension() -> ModuleType | None:
    """The compiled `rms_norm_fwd` / `rms_norm_bwd` module, or None if it cannot be built here."""
    try:
        from torch.utils.cpp_extension import load

        return load(
            name="normsweep_rms_norm",
            sources=[str(CSRC / "rms_norm.cpp")],
            extra_cflags=["-O3", "-march=native", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, unsupported platform: stay correct, go slower
        warnings.warn(f"fast_rmsnorm: native CPU kernel unavailable ({exc!r}); using compiled ops", stacklevel=2)
        return None
