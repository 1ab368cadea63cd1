"""The one array namespace of the formulas written once for one vehicle and for a batch.

A formula shared by the single and the batched path (the env's reward and drag, the controllers'
tilt limit, attitude torque, thrust-vector tasks, cofactor inverse, OOD guard) takes ``xp``:
:class:`FLOATS` when every argument is a Python float (one vehicle) or :class:`ARRAYS` when every
argument is a float64 array of shape (N,) (N vehicles, element k is vehicle k). Both evaluate the
same expressions in the same order, so every element of the batch carries the same bits as the
float path (the committed result rows depend on it). The rules, stated once here:

* Operators (``+ - * /``, ``abs``, comparisons, ``|``/``&`` of flags, ``**2``) need no namespace:
  numpy applies them element by element with the same IEEE arithmetic as Python on floats.
* ``sqrt``, ``cos``, ``sin``, ``isfinite`` and ``where`` are :mod:`math`'s (``where`` a
  conditional expression) and numpy's, which agree bit for bit.
* ``tan`` and the cube go through Python floats in :class:`ARRAYS` too, element by element:
  numpy's SIMD ``tan`` and ``power`` round differently from :mod:`math` in the last bit.
* One vehicle stays on Python floats rather than one-element arrays: numpy's per-call overhead
  (≈ 1 µs a call, against ≈ 0.05 µs for a float operation) would add about half to the cost of the
  single env's ``step``.

Where it lives: ``envs/`` is the bottom floor of the package — controllers import envs (the
airframe, the observation layout), envs never import controllers — and this module imports
nothing but :mod:`math` and numpy (no MuJoCo, no other module of the project), so every module
of either folder may use it (``tests/test_architecture.py`` checks that no other module defines
such a namespace and that controllers never import MuJoCo).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ARRAYS", "FLOATS", "Namespace"]


# The C functions (math's, numpy's ufuncs) sit in the classes as they are: they bind no ``self``,
# and a staticmethod around them would cost ≈ 17 ns a call on the single path. Python functions,
# and ``np.where`` (a dispatcher that binds like one), are staticmethods.


class FLOATS:
    """The operations of the shared formulas for one vehicle (Python floats, :mod:`math`)."""

    tan = math.tan
    sqrt = math.sqrt
    cos = math.cos
    sin = math.sin
    isfinite = math.isfinite

    @staticmethod
    def where(cond: bool, a: float, b: float) -> float:
        """``a`` if ``cond`` else ``b`` (numpy's ``where`` on one element)."""
        return a if cond else b

    @staticmethod
    def amax(*values: float) -> float:
        """The largest of ``values``."""
        return max(values)

    @staticmethod
    def amin(*values: float) -> float:
        """The smallest of ``values``."""
        return min(values)

    @staticmethod
    def every(cond: bool) -> bool:
        """Whether ``cond`` holds (for every vehicle: the one)."""
        return cond

    @staticmethod
    def cube(x: float) -> float:
        """``x**3``."""
        return x**3


class ARRAYS:
    """The operations of the shared formulas for N vehicles (float64 arrays of shape (N,)), each
    equal to :class:`FLOATS`' element by element, bit for bit (the module docstring's rules)."""

    sqrt = np.sqrt
    cos = np.cos
    sin = np.sin
    isfinite = np.isfinite
    where = staticmethod(np.where)

    @staticmethod
    def tan(x: np.ndarray) -> np.ndarray:
        """:func:`math.tan` of each element (numpy's SIMD ``tan`` rounds differently)."""
        return np.array([math.tan(v) for v in x.tolist()])

    @staticmethod
    def amax(*values: np.ndarray) -> np.ndarray:
        """Elementwise largest of ``values`` (a NaN: numpy's NaN, Python's ``max`` depends on the
        order; the formulas use it only where a NaN entry is rejected anyway)."""
        return np.maximum.reduce(values)

    @staticmethod
    def amin(*values: np.ndarray) -> np.ndarray:
        """Elementwise smallest of ``values`` (NaN as in :meth:`amax`)."""
        return np.minimum.reduce(values)

    @staticmethod
    def every(cond: np.ndarray) -> bool:
        """Whether ``cond`` holds for every vehicle (a branch all of a batch takes)."""
        return bool(cond.all())

    @staticmethod
    def cube(x: np.ndarray) -> np.ndarray:
        """Python's ``v**3`` of each element (numpy's ``power`` rounds differently)."""
        return np.array([v**3 for v in x.tolist()])


Namespace = type[FLOATS] | type[ARRAYS]
"""The type of ``xp``: :class:`FLOATS` or :class:`ARRAYS`."""
