"""What the floating-point results of this installation depend on besides the code.

A seeded run is bit-for-bit reproducible on one machine. Across machines, the BLAS kernels that
OpenBLAS picks for the processor (``DYNAMIC_ARCH``: Haswell, SkylakeX, ...) and the library
versions change the last bits of matrix products, and a closed-loop flight carries them along:
two machines differed by at most 7e-12 (relative) on every model-based metric of the committed
matrix, and by up to 2 % on the PPO policy's (torch's kernels). :func:`fingerprint` names these
dependencies so that committed results can record where they were produced.
"""

from __future__ import annotations

import ctypes
import glob
import os
from importlib import metadata
from typing import Any

_CORENAME_SYMBOLS = (
    "scipy_openblas_get_corename64_",
    "scipy_openblas_get_corename",
    "openblas_get_corename64_",
    "openblas_get_corename",
)


def blas_core() -> str:
    """The OpenBLAS kernel family numpy uses here (e.g. ``"SkylakeX"``), or ``"unknown"``."""
    import numpy

    base = os.path.dirname(numpy.__file__)
    for path in glob.glob(os.path.join(base, "..", "numpy.libs", "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _CORENAME_SYMBOLS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return "unknown"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fingerprint() -> dict[str, Any]:
    """The BLAS kernel family and the versions of the numerical libraries."""
    return {
        "blas_core": blas_core(),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "mujoco": _version("mujoco"),
        "torch": _version("torch"),
    }
