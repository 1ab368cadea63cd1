"""``period_residual``: bit for bit the env's former expression and the controllers' measurement."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.envs.dynamics import period_residual
from residual_quad.envs.observation import OBS_DIM, ObsLayout


def _env_expression(p, o, thrust_sum, mass, dt, gravity):
    """The env's former inline ground truth, on lists (R₀'s third column at 8, 11, 14)."""
    k = thrust_sum / mass
    inv_dt = 1.0 / dt
    return np.array(
        (
            (o[3] - p[3]) * inv_dt - p[8] * k,
            (o[4] - p[4]) * inv_dt - p[11] * k,
            (o[5] - p[5]) * inv_dt - p[14] * k + gravity,
        )
    )


def _array_expression(prev_obs, obs, dt, mass, gravity):
    """The controllers' former vectorized measurement, on arrays."""
    inv_dt = 1.0 / dt
    thrust_acc = float(obs[29] + obs[30] + obs[31] + obs[32]) / mass
    out = (obs[3:6] - prev_obs[3:6]) * inv_dt
    out -= prev_obs[8:15:3] * thrust_acc
    out[2] += gravity
    return out


def test_bitwise_equal_to_both_former_expressions():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        scale = 10.0 ** rng.uniform(-6.0, 4.0)
        prev_obs, obs = rng.normal(size=OBS_DIM) * scale, rng.normal(size=OBS_DIM) * scale
        dt, mass, gravity = rng.uniform(1e-3, 0.1), rng.uniform(0.1, 3.0), 9.81
        f = obs[ObsLayout.thrusts].tolist()
        thrust_sum = f[0] + f[1] + f[2] + f[3]  # as the plant sums it
        from_lists = period_residual(prev_obs.tolist(), obs.tolist(), dt, mass, gravity)
        from_arrays = period_residual(prev_obs, obs, dt, mass, gravity)
        env = _env_expression(prev_obs.tolist(), obs.tolist(), thrust_sum, mass, dt, gravity)
        ctrl = _array_expression(prev_obs, obs, dt, mass, gravity)
        assert from_lists.dtype == from_arrays.dtype == np.float64
        assert from_lists.tobytes() == from_arrays.tobytes() == env.tobytes() == ctrl.tobytes()


def test_hover_at_rest_has_no_residual_and_free_fall_minus_g():
    obs = np.zeros(OBS_DIM)
    obs[ObsLayout.rot] = np.eye(3).ravel()
    obs[ObsLayout.thrusts] = 0.95 * 9.81 / 4.0
    assert period_residual(obs, obs, 0.01, 0.95, 9.81) == pytest.approx(np.zeros(3))
    after = obs.copy()
    after[ObsLayout.vz] = -0.0981  # fell freely for 10 ms although hover thrust was applied
    assert period_residual(obs, after, 0.01, 0.95, 9.81)[2] == pytest.approx(-9.81)


def test_env_info_is_the_period_residual_of_consecutive_true_observations(make_env):
    env = make_env(payload="extra", wind="windy", trajectory="helix")
    prev_obs, info = env.reset(seed=1)
    assert np.array_equal(info["residual_accel"], np.zeros(3))
    frame = env.unwrapped.airframe
    dt = env.unwrapped.control_dt
    for _ in range(30):
        obs, _, _, _, info = env.step(np.array([0.05, 0.0, 0.05, 0.0]))
        expected = period_residual(prev_obs, obs, dt, frame.mass, frame.gravity)
        assert info["residual_accel"].tobytes() == expected.tobytes()
        prev_obs = obs
