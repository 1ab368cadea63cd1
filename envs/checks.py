"""Argument checks of the environment: one clear ``ValueError`` per bad value.

Every message names the argument, shows the bad value and states the valid range, so a typo in a
config or on the command line reads as what it is. Wrong types are ``ValueError`` too (not
``TypeError``): to a user both are a bad value, and the command line turns ``ValueError`` into a
one-line message. The checks run at construction and at ``reset``, never per step.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def _describe(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a finite real number"
    if high is None:
        return f"a finite real number {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"a finite real number {'<' if high_open else '<='} {high:g}"
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return f"a finite real number in {left}{low:g}, {high:g}{right}"


def is_real(value: Any) -> bool:
    """A real number (Python or numpy int/float), not a bool, not a string or a container."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    unit: str = "",
) -> float:
    """``value`` as a float if it is a finite real number in the given range, else ``ValueError``.

    Args:
        name: the argument's name, for the message.
        low, high: bounds (``None``: unbounded); ``low_open``/``high_open`` exclude them.
        unit: appended to the range in the message (e.g. ``"Hz"``).
    """
    ok = is_real(value)
    shown = None
    if ok:
        try:
            x = float(value)
        except OverflowError:  # an integer (or fraction) beyond the float range: not finite
            ok, shown = False, _beyond_float(value)
        else:
            ok = (
                math.isfinite(x)
                and (low is None or (x > low if low_open else x >= low))
                and (high is None or (x < high if high_open else x <= high))
            )
    if not ok:
        what = _describe(low, high, low_open, high_open) + (f" ({unit})" if unit else "")
        raise ValueError(f"{name} must be {what}, got {shown or repr(value)}")
    return x


def _beyond_float(value: Any) -> str:
    """How a message shows a number beyond the float range: its type and order of magnitude
    (its digits would fill the message, and past 4300 of them ``repr`` itself refuses)."""
    kind = f"{type(value).__name__}, beyond the float range"
    try:
        return f"{'-' if value < 0 else ''}1e{math.log10(abs(value)):.0f} ({kind})"
    except (OverflowError, ValueError):
        return f"a number ({kind})"


def vector(name: str, value: Any, size: int = 3, unit: str = "") -> np.ndarray:
    """``value`` as a float array of shape ``(size,)`` with finite real entries, else
    ``ValueError`` naming ``name``."""
    try:
        arr = np.asarray(value)
    except Exception:  # ragged nesting and the like
        arr = None
    if (
        arr is None
        or arr.shape != (size,)
        or arr.dtype.kind not in "fiu"
        or not np.all(np.isfinite(arr))
    ):
        what = f"a {size}-vector of finite real numbers" + (f" ({unit})" if unit else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return arr.astype(float)


def integer(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) in ``[low, high]``, else
    ``ValueError``."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if ok:
        n = int(value)
        ok = (low is None or n >= low) and (high is None or n <= high)
    if not ok:
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return n


def seed_value(value: Any, name: str = "seed") -> int | None:
    """A reset seed as a Python ``int`` (numpy integers accepted), or ``None``; anything else
    (a float, a bool, a negative number, a string, ...) is a ``ValueError`` naming ``name`` and
    saying what is accepted."""
    if value is None:
        return None
    if (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool | np.bool_)
        and int(value) >= 0
    ):
        return int(value)
    raise ValueError(f"{name} must be an integer >= 0 or None, got {value!r}")


def instance(name: str, value: Any, cls: type, what: str) -> None:
    """``ValueError`` unless ``value`` is a ``cls`` (``what`` says what is expected)."""
    if not isinstance(value, cls):
        raise ValueError(f"{name} must be {what}, got {value!r}")


def batch_actions(actions: Any, n: int, dim: int = 4) -> np.ndarray:
    """``actions`` as an ``(n, dim)`` float64 array clipped to [-1, 1] (the vector env's
    actions); a ``ValueError`` naming the problem (shape, dtype, the first row with NaN/inf)
    otherwise."""
    try:
        arr = np.asarray(actions)
    except Exception:
        arr = None
    if arr is None or arr.shape != (n, dim):
        raise ValueError(
            f"actions must have shape ({n}, {dim}) (num_envs, {dim}), got "
            f"{'no array' if arr is None else arr.shape}"
        )
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"actions must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"action of env {i} must be finite, got {arr[i].tolist()} "
            f"(envs with NaN/inf: {np.flatnonzero(bad).tolist()})"
        )
    return np.minimum(np.maximum(arr, -1.0), 1.0)
