"""``ppo_features_rows`` is ``ppo_features`` of each row, bit for bit: the deployed RL
controllers fly batches with it, and their committed rows were flown row by row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from residual_quad.controllers.features import ppo_features, ppo_features_rows
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))


def _rows(o: np.ndarray) -> np.ndarray:
    return np.stack([ppo_features(r) for r in o])


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.just(OBS_DIM)),
        elements=st.floats(allow_nan=True, allow_infinity=True, width=64),
    )
)
def test_any_observation_gives_the_row_by_row_bits(o):
    """Any values (NaN, ±inf, huge, subnormal, signed zeros): the same float32 bits, or the
    same error where a row's does not exist (``math.sin`` of an infinite heading error)."""
    with np.errstate(all="ignore"):
        try:
            want = _rows(o)
        except ValueError as err:
            with pytest.raises(ValueError, match=str(err)):
                ppo_features_rows(o)
            return
        assert _bits_equal(ppo_features_rows(o), want)


def test_flown_observations_give_the_row_by_row_bits():
    """Rotations of real flights and every heading: the same bits (the heading rotation and the
    tilt go through the same BLAS products as the row's ``R_z(ψ)ᵀ @ v``)."""
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(7)
    o = rng.standard_normal((500, OBS_DIM)) * rng.choice([1e-3, 1.0, 30.0], (500, 1))
    o[:, L.rot] = Rotation.random(500, random_state=3).as_matrix().reshape(-1, 9)
    assert _bits_equal(ppo_features_rows(o), _rows(o))


def test_a_wrong_shape_is_an_error():
    with pytest.raises(ValueError, match=rf"shape \(n, {OBS_DIM}\)"):
        ppo_features_rows(np.zeros(OBS_DIM))
