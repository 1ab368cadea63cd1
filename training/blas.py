"""Pin the BLAS thread count of numpy's bundled OpenBLAS for a block of code.

Training multiplies 512 × 64 matrices: too small to gain from a second thread, and when the other
core is busy OpenBLAS's spinning worker threads slow training down by an order of magnitude
(measured: 2 µs vs 32 µs per sample-epoch with two busy neighbours). :func:`blas_threads` sets the
count through the library's own ``openblas_set_num_threads`` (found among the loaded shared
objects), so no extra dependency is needed; where it cannot be found it does nothing.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
_lib: tuple[object, object] | None | bool = False  # False: not looked up yet


def _find() -> tuple[object, object] | None:
    """(set, get) functions of the OpenBLAS numpy uses, or None."""
    global _lib
    if _lib is not False:
        return _lib  # type: ignore[return-value]
    _lib = None
    root = os.path.dirname(os.path.dirname(np.__file__))
    candidates = glob.glob(os.path.join(root, "numpy.libs", "*openblas*"))
    candidates += glob.glob(os.path.join(os.path.dirname(np.__file__), ".dylibs", "*openblas*"))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                _lib = (getattr(lib, set_name), getattr(lib, get_name))
                return _lib
    return None


@contextmanager
def blas_threads(n: int) -> Iterator[bool]:
    """Run the block with ``n`` BLAS threads; yields whether the count could be set."""
    funcs = _find()
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
