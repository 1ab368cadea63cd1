"""``preview_features``: a hand-computed case, rows = batch, and the frame and scales of
``ppo_features_batch``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.features import (
    FEATURE_NAMES,
    ppo_features_batch,
    preview_features,
)
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv


def _yawed(psi: float) -> np.ndarray:
    """A level observation with heading ``psi`` (rad), every other base field 0."""
    c, s = math.cos(psi), math.sin(psi)
    o = np.zeros(OBS_DIM)
    o[L.rot] = (c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0)
    return o


def test_hand_computed_case():
    """Heading 90° (x ahead is world y), vehicle at (1, 2, 3): the point (1, 3, 3) is 1 m
    ahead; (5, 2, 3) is 4 m to the right (clipped to 3 m); a velocity (0, 5, 0) is 5 m/s
    ahead (1 after the ref_v scale 5), (0, 0, -2.5) is −0.5."""
    base = _yawed(math.pi / 2)
    base[L.pos] = (1.0, 2.0, 3.0)
    obs = np.concatenate((base, [1.0, 3.0, 3.0, 5.0, 2.0, 3.0], [0.0, 5.0, 0.0, 0.0, 0.0, -2.5]))
    got = preview_features(obs[None], 2)
    assert got.shape == (1, 12) and got.dtype == np.float32
    want = [1.0, 0.0, 0.0, 0.0, -3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, -0.5]
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-6)


def test_no_preview_gives_no_features():
    assert preview_features(np.zeros((4, OBS_DIM)), 0).shape == (4, 0)


def test_a_point_at_the_reference_reads_as_minus_e_p_and_ref_v():
    """The same rotation and scales as ``ppo_features_batch``: a previewed point equal to the
    current reference gives exactly ``−e_p`` and ``ref_v`` (clip included)."""
    env = ResidualQuadEnv(trajectory="helix", preview=(1, 0.05), wind="windy")
    obs, _ = env.reset(seed=0, options={"position_offset": [0.3, 4.0, 0.2], "yaw_offset": 0.2})
    rows = []
    for _ in range(5):
        obs, *_ = env.step(np.array([0.1, -0.2, 0.3, 0.0]))
        rows.append(obs)
    o = np.array(rows)
    o[:, L.preview_pos(1)] = o[:, L.ref_pos]
    o[:, L.preview_vel(1)] = o[:, L.ref_vel]
    base = ppo_features_batch(o[:, :OBS_DIM])
    ours = preview_features(o, 1)
    e_p = [FEATURE_NAMES.index(f"e_p_{a}") for a in "xyz"]
    ref_v = [FEATURE_NAMES.index(f"ref_v_{a}") for a in "xyz"]
    np.testing.assert_array_equal(ours[:, 0:3], -base[:, e_p])
    np.testing.assert_array_equal(ours[:, 3:6], base[:, ref_v])
    assert np.abs(ours[:, 0:3]).max() == 3.0  # the 4 m offset is clipped


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.floats(-math.pi, math.pi),
    st.integers(0, 2**32 - 1),
)
def test_rows_equal_the_batch(k, n, psi, seed):
    rng = np.random.default_rng(seed)
    obs = np.stack([_yawed(psi + 0.3 * j) for j in range(n)])
    obs[:, L.pos] = rng.normal(0.0, 2.0, (n, 3))
    obs = np.concatenate((obs, rng.normal(0.0, 3.0, (n, 6 * k))), axis=1)
    batch = preview_features(obs, k)
    rows = np.concatenate([preview_features(row[None], k) for row in obs])
    np.testing.assert_array_equal(batch, rows)
    assert np.all(np.abs(batch[:, : 3 * k]) <= 3.0)


@pytest.mark.parametrize(
    "shape, k", [((OBS_DIM + 6,), 1), ((2, OBS_DIM), 1), ((2, OBS_DIM + 12), 1), ((2, 42), -1)]
)
def test_wrong_shapes_and_k_are_value_errors(shape, k):
    with pytest.raises(ValueError, match="k|shape"):
        preview_features(np.zeros(shape), k)


@pytest.mark.parametrize("k", [1.0, True, "2"])
def test_k_must_be_an_integer(k):
    with pytest.raises(ValueError, match="k must be an integer"):
        preview_features(np.zeros((1, OBS_DIM + 6)), k)
