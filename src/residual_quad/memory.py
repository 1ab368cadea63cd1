"""The C allocator's setting for long runs that allocate large, short-lived arrays.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mapping,
returned to the system when freed — but the first such free raises the threshold to that size
(up to 32 MiB), so later arrays of that size come from the heap, where a small block allocated
after one pins its hole: freed, it stays resident. A training run frees several-MB arrays every
control period (``ppo_adapt``'s estimator over 256 envs) between the plants it keeps for reuse,
and grew to 8.8 GB at 0.77 M policy steps this way (docs/rl.md, "Memory").
:func:`fix_mmap_threshold` fixes the threshold, which also ends its dynamic adjustment;
``rquad train`` sets it before it builds its envs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

MMAP_THRESHOLD = 128 * 1024  # bytes: glibc's own starting threshold
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process (arrays above it are
    mapped and unmapped on their own); ``True`` where set, ``False`` where the C library is not
    glibc (nothing changed)."""
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0:
        raise ValueError(f"threshold must be a positive number of bytes, got {threshold!r}")
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
