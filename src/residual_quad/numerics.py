"""What the floating-point results of this installation depend on besides the code.

A seeded run is bit-for-bit reproducible on one machine. Across machines, the BLAS kernels that
OpenBLAS picks for the processor (``DYNAMIC_ARCH``: Haswell, SkylakeX, ...), the SIMD loops numpy
dispatches to (AVX2, AVX-512, ...) and the library versions change the last bits of the
arithmetic, and a closed-loop flight carries them along: most flights damp them to below 1e-11
(relative), a few amplify them (a flight near a crash by percents; measured per committed row in
``docs/reproducibility.md``). Processors of one kernel family can still differ in the last bit
(the vector and the local backend agree bit for bit on some, to ≤ 1e-9 on others), so the
processor is named too. :func:`fingerprint` names these dependencies so that committed
results can record where they were produced.
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


def numpy_simd() -> list[str]:
    """The SIMD targets numpy dispatches to on this processor (e.g. ``["X86_V3", "X86_V4"]``),
    after ``NPY_DISABLE_CPU_FEATURES``; empty where numpy does not say."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2 or a build without dispatch
        return []
    return [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]


def processor() -> str:
    """The processor's microarchitecture as LLVM names it (e.g. ``"skylake-avx512"``), which the
    compiled substep wrench is built for and which the kernel family alone does not pin down
    (two processors of the SkylakeX family gave rows a few ulp apart); ``"unknown"`` where LLVM
    cannot say."""
    try:
        from llvmlite import binding  # numba's, a core dependency
    except ImportError:
        return "unknown"
    return str(binding.get_host_cpu_name()) or "unknown"


def fingerprint() -> dict[str, Any]:
    """The processor, the BLAS kernel family, numpy's SIMD targets and the versions of the
    numerical libraries."""
    return {
        "cpu": processor(),
        "blas_core": blas_core(),
        "numpy_simd": numpy_simd(),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "mujoco": _version("mujoco"),
        "torch": _version("torch"),
    }
