"""Residual features and the residual measured from observables (velocity and accelerometer)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from residual_quad.controllers.driver import LawController
from residual_quad.controllers.residual.features import (
    FEATURE_NAMES,
    build_features,
    features_from_obs,
    imu_residual,
    measured_residual,
)
from residual_quad.controllers.trackers import GeoTracker
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L


def test_features_body_frame_and_drag_basis():
    yaw = 0.7
    c, s = math.cos(yaw), math.sin(yaw)
    R = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    v_b = np.array([1.5, -0.5, 0.8])
    a_b = np.array([0.2, 0.1, -0.3])
    obs = np.zeros(OBS_DIM)
    obs[L.vel] = R @ v_b
    obs[L.rot] = R.ravel()
    obs[L.omega_b] = (0.1, 0.2, 0.3)
    obs[L.pos] = (0.0, 0.0, 2.5)  # m, height 2.5
    obs[L.thrusts] = (2.0, 2.5, 3.0, 3.5)
    f = features_from_obs(obs, R, R @ a_b, 0.95)
    assert len(f) == len(FEATURE_NAMES) == 14
    s_h = math.hypot(1.5, -0.5)
    np.testing.assert_allclose(f[0:3], v_b, atol=1e-12)
    np.testing.assert_allclose(f[3:6], [1.5 * s_h, -0.5 * s_h, 0.8 * 0.8], atol=1e-12)
    np.testing.assert_allclose(f[6:9], a_b, atol=1e-12)
    np.testing.assert_allclose(f[9:12], (0.1, 0.2, 0.3))
    assert f[12] == 2.5 and f[13] == pytest.approx(11.0 / 0.95)
    f2 = build_features(-v_b, a_b, np.zeros(3), 1.0, 1.0)
    assert f2[5] == pytest.approx(-0.64)  # v_z·|v_z| keeps the sign


def _fly_geo(steps: int, **env_kwargs) -> tuple[list, list]:
    env = gym.make(
        "ResidualQuad-v0", payload="heavy", wind="windy", trajectory="helix", **env_kwargs
    ).unwrapped
    ctrl = LawController(GeoTracker())  # the law flying one vehicle
    obs, _ = env.reset(seed=3)
    obs_list, infos = [obs], []
    for _ in range(steps):
        obs, _, _, _, info = env.step(ctrl.policy(obs))
        obs_list.append(obs)
        infos.append(info)
    env.close()
    return obs_list, infos


def test_measured_residual_equals_env_truth_without_noise():
    obs, infos = _fly_geo(150)
    frame_mass, g, dt = 0.95, 9.81, 0.01
    err = [
        np.abs(
            measured_residual(obs[k], obs[k + 1], dt, frame_mass, g) - infos[k]["residual_accel"]
        )
        for k in range(150)
    ]
    assert np.max(err) < 1e-9
    # the heavy payload shows as ≈ −5.2 m/s² vertical residual
    assert np.mean([i["residual_accel"][2] for i in infos[50:]]) == pytest.approx(-5.16, abs=0.3)
    # the accelerometer variant samples the same residual (body frame) at the period's end
    imu = np.array([imu_residual(o, frame_mass) for o in obs[51:]])
    truth_b = np.array(
        [
            i["residual_accel"] @ o[L.rot].reshape(3, 3)
            for o, i in zip(obs[51:], infos[50:], strict=True)
        ]
    )
    rms = np.sqrt(np.mean((imu - truth_b) ** 2, axis=0))
    assert np.all(rms < 0.15) and rms[2] < 0.02


def test_measured_residual_noise_is_velocity_noise_times_sqrt2_over_dt():
    sigma_v = 0.01  # m/s
    obs, infos = _fly_geo(300, vel_noise=sigma_v)
    err = np.array(
        [
            measured_residual(obs[k], obs[k + 1], 0.01, 0.95, 9.81) - infos[k]["residual_accel"]
            for k in range(1, 300)
        ]
    )
    assert err.std() == pytest.approx(math.sqrt(2) * sigma_v / 0.01, rel=0.1)  # 1.41 m/s²
