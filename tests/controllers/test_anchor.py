"""The zero-error anchor's map: known answers on a feature layout (errors, previewed points, the
accelerometer), an undisturbed vehicle on its reference is its own anchor, idempotence, the one
formula for normalized inputs, and the configurations it refuses."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.anchor import (
    SparseAnchor,
    anchor_map,
    anchored_inputs,
    check_anchorable,
)
from residual_quad.controllers.features import FEATURE_DIM, FEATURE_NAMES, ppo_features
from residual_quad.controllers.policy_file import ACCELERATION_KINDS
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

SPEC = FeatureSpec(preview_k=2, action_history=2, error_integral=True, estimate=True)
NAMES = SPEC.names(3)
MASS = 0.95  # kg


def _anchor(x: np.ndarray, spec: FeatureSpec = SPEC, action_dim: int = 3) -> np.ndarray:
    m, c = anchor_map(spec, action_dim, MASS)
    return x @ m + c


def _col(name: str) -> int:
    return NAMES.index(name)


def test_errors_and_integral_are_zeroed_and_previewed_points_read_from_the_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, len(NAMES)))
    bar = _anchor(x)
    for name in ("e_p_x", "e_p_y", "e_p_z", "e_v_x", "e_v_y", "e_v_z"):
        assert np.all(bar[:, _col(name)] == 0.0)
    for name in ("int_e_p_x", "int_e_p_y", "int_e_p_z"):
        assert np.all(bar[:, _col(name)] == 0.0)
    # p_ref(t + i·dt) − p + (p − p_ref) = p_ref(t + i·dt) − p_ref, axis by axis
    for i in range(SPEC.preview_k):
        for a in range(3):
            j = FEATURE_DIM + 3 * i + a
            np.testing.assert_allclose(bar[:, j], x[:, j] + x[:, a], rtol=0, atol=1e-15)
    # the accelerometer reads the nominal vehicle's specific force of the thrusts, in g
    thrusts = 3.0 * (x[:, [_col(f"thrust_{i}") for i in range(4)]] + 1.0)  # N
    np.testing.assert_allclose(bar[:, _col("imu_z")], thrusts.sum(1) / (MASS * 9.81), atol=1e-14)
    assert np.all(bar[:, [_col("imu_x"), _col("imu_y")]] == 0.0)
    # everything that is not an error stays: attitude, rates, thrusts, height, previewed
    # velocities, the past actions, the residual estimate
    kept = [n for n in NAMES if not n.startswith(("e_p", "e_v", "int_e_p", "imu"))]
    kept = [n for n in kept if n not in NAMES[FEATURE_DIM : FEATURE_DIM + 3 * SPEC.preview_k]]
    assert "R_h_00" in kept and "est_a_x" in kept and "action_1_2" in kept
    for name in kept:
        assert np.array_equal(bar[:, _col(name)], x[:, _col(name)])


def test_an_undisturbed_vehicle_on_its_reference_is_its_own_anchor():
    """Features of a vehicle on its reference whose accelerometer reads what its thrusts give."""
    rng = np.random.default_rng(2)
    obs = rng.normal(size=OBS_DIM)
    obs[L.rot] = np.eye(3).ravel()
    obs[L.pos], obs[L.vel] = obs[L.ref_pos], obs[L.ref_vel]
    obs[L.thrusts] = rng.uniform(1.0, 5.0, 4)
    obs[L.imu] = (0.0, 0.0, obs[L.thrusts].sum() / MASS)  # m/s², body frame
    x = ppo_features(obs).astype(np.float64)[None, :]
    np.testing.assert_allclose(_anchor(x, FeatureSpec()), x, rtol=0, atol=1e-6)  # float32 input
    # a payload (the same thrusts, a smaller specific force) is not its own anchor
    obs[L.imu] = (0.0, 0.0, obs[L.thrusts].sum() / (MASS + 0.5))
    x = ppo_features(obs).astype(np.float64)[None, :]
    assert abs(_anchor(x, FeatureSpec())[0, _col("imu_z")] - x[0, _col("imu_z")]) > 0.1


def test_base_features_only_replace_the_errors_and_the_accelerometer():
    m, c = anchor_map(FeatureSpec(), 3, MASS)
    assert m.shape == (FEATURE_DIM, FEATURE_DIM)
    replaced = {*range(6), *(FEATURE_NAMES.index(f"imu_{a}") for a in "xyz")}
    kept = [j for j in range(FEATURE_DIM) if j not in replaced]
    np.testing.assert_array_equal(m[:, kept], np.eye(FEATURE_DIM)[:, kept])
    assert np.count_nonzero(c) == 1 and c[FEATURE_NAMES.index("imu_z")] > 0


@pytest.mark.parametrize("mass", [0.0, -1.0, float("nan"), float("inf"), "0.95", True])
def test_a_bad_anchor_mass_is_refused(mass):
    with pytest.raises(ValueError, match="mass must be a finite number > 0"):
        anchor_map(SPEC, 3, mass)


@settings(max_examples=50, deadline=None)
@given(
    k=st.integers(0, 6),
    history=st.integers(0, 4),
    integral=st.booleans(),
    estimate=st.booleans(),
    action_dim=st.sampled_from([3, 4]),
)
def test_the_anchor_is_a_projection_that_leaves_inputs_on_the_reference_alone(
    k, history, integral, estimate, action_dim
):
    spec = FeatureSpec(k, history, integral, estimate)
    m, c = anchor_map(spec, action_dim, MASS)
    assert m.shape == (spec.dim(action_dim),) * 2 and c.shape == (spec.dim(action_dim),)
    rng = np.random.default_rng(k + 10 * history)
    on_ref = rng.normal(size=(3, m.shape[0])) @ m + c  # an undisturbed vehicle on its reference
    np.testing.assert_allclose(on_ref @ m + c, on_ref, rtol=0, atol=1e-12)  # twice is once


def test_normalized_inputs_anchor_as_the_raw_ones():
    rng = np.random.default_rng(1)
    m, c = anchor_map(SPEC, 3, MASS)
    mean, std = rng.normal(size=len(NAMES)), rng.uniform(0.1, 2.0, len(NAMES))
    raw = rng.normal(size=(6, len(NAMES)))
    bar_n = anchored_inputs((raw - mean) / std, SparseAnchor.of(m, c), mean, std)
    np.testing.assert_allclose(bar_n, (raw @ m + c - mean) / std, rtol=1e-12, atol=1e-12)
    einsum = anchored_inputs(
        (raw - mean) / std,
        SparseAnchor.of(m, c),
        mean,
        std,
        lambda a, b: np.einsum("nd,de->ne", a, b),
    )
    np.testing.assert_allclose(einsum, bar_n, rtol=1e-12, atol=1e-12)


def _cfg(anchored, controller, algo, privileged_critic) -> SimpleNamespace:
    """The fields of a training config the check reads."""
    ppo = SimpleNamespace(anchored=anchored)
    return SimpleNamespace(
        ppo=ppo, controller=controller, algo=algo, privileged_critic=privileged_critic
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("yes", "ppo_acc", "ppo", False), "must be true or false"),
        ((True, "ppo", "ppo", False), "hover thrust"),
        ((True, "ppo_adapt", "ppo", False), "acceleration policies"),
        ((True, "ppo_acc", "sac", False), "algo ppo"),
        ((True, "ppo_res", "ppo", True), "privileged critic"),
    ],
)
def test_what_cannot_be_anchored_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        check_anchorable(_cfg(*args), ACCELERATION_KINDS)


def test_acceleration_policies_of_ppo_can_be_anchored():
    for kind in ("ppo_acc", "ppo_res"):
        check_anchorable(_cfg(True, kind, "ppo", False), ACCELERATION_KINDS)
    check_anchorable(_cfg(False, "ppo", "sac", True), ACCELERATION_KINDS)  # not anchored
