"""The MuJoCo-free vector formulas: ``cross`` is numpy's cross product, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from residual_quad.envs.rotations import cross

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


def bits(x: np.ndarray) -> np.ndarray:
    """The float64 bit patterns (sign of zero and NaN payloads count)."""
    return np.ascontiguousarray(x).view(np.int64)


@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, 3, elements=FLOATS), arrays(np.float64, 3, elements=FLOATS))
def test_cross_of_3_vectors_is_numpys_bit_for_bit(a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(bits(cross(a, b)), bits(np.cross(a, b)))


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, (4, 3), elements=FLOATS), arrays(np.float64, (4, 3), elements=FLOATS))
def test_cross_of_rows_is_numpys_bit_for_bit(a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(bits(cross(a, b)), bits(np.cross(a, b)))
