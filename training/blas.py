"""Pin the BLAS thread count of numpy's (or scipy's) bundled OpenBLAS for a block of code.

Training multiplies 512 × 64 matrices: too small to gain from a second thread, and when the other
core is busy OpenBLAS's spinning worker threads slow training down by an order of magnitude
(measured: 2 µs vs 32 µs per sample-epoch with two busy neighbours). :func:`blas_threads` sets the
count through the library's own ``openblas_set_num_threads`` (found among the loaded shared
objects), so no extra dependency is needed; where it cannot be found it does nothing. scipy
bundles an OpenBLAS of its own (``blas_threads(n, "scipy")``): training off the matrix builds a
random spline per episode through it, ≈ 1.6 ms with one thread and ≈ 4 ms with OpenBLAS's
threads spinning on a busy 2-core machine (measured).
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),  # scipy's own
)
#: the packages whose bundled OpenBLAS :func:`blas_threads` pins
PACKAGES = ("numpy", "scipy")
_libs: dict[str, tuple[object, object] | None] = {}  # package → (set, get); absent: not looked up


def _find(package: str = "numpy") -> tuple[object, object] | None:
    """(set, get) functions of the OpenBLAS ``package`` bundles, or None."""
    if package in _libs:
        return _libs[package]
    _libs[package] = None
    where = os.path.dirname(str(importlib.import_module(package).__file__))
    candidates = glob.glob(os.path.join(os.path.dirname(where), f"{package}.libs", "*openblas*"))
    candidates += glob.glob(os.path.join(where, ".dylibs", "*openblas*"))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                _libs[package] = (getattr(lib, set_name), getattr(lib, get_name))
                return _libs[package]
    return None


@contextmanager
def blas_threads(n: int, package: str = "numpy") -> Iterator[bool]:
    """Run the block with ``n`` BLAS threads in ``package``'s OpenBLAS (:data:`PACKAGES`);
    yields whether the count could be set."""
    if package not in PACKAGES:
        raise ValueError(f"package must be one of {PACKAGES}, got {package!r}")
    funcs = _find(package)
    if funcs is None:
        yield False
        return
    set_n, get_n = funcs
    before = int(get_n())  # type: ignore[operator]
    set_n(int(n))  # type: ignore[operator]
    try:
        yield True
    finally:
        set_n(before)  # type: ignore[operator]
