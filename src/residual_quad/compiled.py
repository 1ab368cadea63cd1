"""numba kernels of the package: compiled without the GIL, their machine code cached outside it.

Used by the plant's substep wrench (:mod:`residual_quad.envs.substep`) and the batched RLS
(:mod:`residual_quad.controllers.rls_kernels`). numba's default math is IEEE (no fastmath: no
reassociation, no fused multiply-add), so a kernel written in the operations and order of the
numpy formula it replaces carries the same bits; each kernel's tests check that bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from numba import njit
from numba.core import config as numba_config

__all__ = ["compiled"]


@contextmanager
def _cache_outside_the_package():
    """numba caches beside the source file where it can write there: inside ``site-packages``
    for an installed package, where the files outlive ``pip uninstall`` and leave a
    ``residual_quad`` folder that shadows a later (editable) install of the project. Unless
    the user chose a folder (``NUMBA_CACHE_DIR``), the kernels defined inside this block cache
    under the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``); numba's setting is
    restored after, so no other numba code is affected."""
    chosen = numba_config.CACHE_DIR
    if not chosen:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        numba_config.CACHE_DIR = os.path.join(base, "residual_quad", "numba")
    try:
        yield
    finally:
        numba_config.CACHE_DIR = chosen


def compiled(fn: Callable[..., Any]) -> Any:
    """``fn`` compiled by numba without the GIL, its machine code cached on disk outside the
    package (:func:`_cache_outside_the_package`); where numba finds no writable cache folder
    (a read-only home, no ``NUMBA_CACHE_DIR``) it is compiled in each process instead of
    failing the import."""
    with _cache_outside_the_package():
        try:
            return njit(nogil=True, cache=True)(fn)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return njit(nogil=True)(fn)
