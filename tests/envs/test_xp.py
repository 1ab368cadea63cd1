"""The one float/array namespace of the shared formulas (``envs/xp.py``): every operation of
``ARRAYS`` gives, element by element, the bits ``FLOATS`` gives on each Python float."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.envs.xp import ARRAYS, FLOATS

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
ANY = st.floats(width=64)  # NaN and ±inf included
NO_NAN = st.floats(allow_nan=False, width=64)  # ±inf included
ROWS = st.lists(FINITE, min_size=1, max_size=40)

UNARY = ("tan", "sqrt", "cos", "sin", "isfinite", "cube")


def _bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


def _unary_same(op: str, values: list[float]) -> None:
    expected = []
    for v in values:
        try:
            expected.append(getattr(FLOATS, op)(v))
        except (ValueError, OverflowError):  # math's domain errors: numpy returns NaN/inf
            return
    with np.errstate(all="ignore"):
        got = getattr(ARRAYS, op)(np.array(values))
    assert got.shape == (len(values),)
    if op == "isfinite":
        assert got.tolist() == expected
    else:
        assert _bits(got) == _bits(expected)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_unary_operations_match_bit_for_bit(values):
    for op in UNARY:
        _unary_same(op, [abs(v) if op == "sqrt" else v for v in values])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NO_NAN, NO_NAN, ANY), min_size=1, max_size=20))
def test_amax_amin_and_where_match_bit_for_bit(rows):
    a, b, c = (np.array(col) for col in zip(*rows, strict=True))
    assert _bits(ARRAYS.amax(a, b)) == _bits([FLOATS.amax(x, y) for x, y, _ in rows])
    assert _bits(ARRAYS.amin(a, b)) == _bits([FLOATS.amin(x, y) for x, y, _ in rows])
    cond = a > b
    assert _bits(ARRAYS.where(cond, a, c)) == _bits(
        [
            FLOATS.where(k, x, z)
            for k, x, z in zip(cond.tolist(), a.tolist(), c.tolist(), strict=True)
        ]
    )


def test_the_float_operations_are_maths():
    """One vehicle calls :mod:`math` itself (same functions, nothing wrapped around them)."""
    for op in ("tan", "sqrt", "cos", "sin", "isfinite"):
        assert getattr(FLOATS, op) is getattr(math, op)
    for op in ("sqrt", "cos", "sin", "isfinite"):
        assert getattr(ARRAYS, op) is getattr(np, op)
    assert FLOATS.where(True, 1.0, 2.0) == 1.0 and FLOATS.where(False, 1.0, 2.0) == 2.0
    assert FLOATS.cube(3.0) == 27.0 and FLOATS.amax(1.0, 5.0, -2.0) == 5.0
    assert FLOATS.every(True) is True and FLOATS.every(False) is False
    assert ARRAYS.every(np.array([True, True])) is True
    assert ARRAYS.every(np.array([True, False])) is False
