"""Sensor noise: levels, layout, seeded determinism, and the two ways to configure it."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.sensors import SensorNoise, Sensors


def test_noise_std_layout():
    std = SensorNoise(pos=0.1, vel=0.2, gyro=0.3, imu=0.4).std()
    expected = np.zeros(OBS_DIM)
    expected[ObsLayout.pos] = 0.1
    expected[ObsLayout.vel] = 0.2
    expected[ObsLayout.omega_b] = 0.3
    expected[ObsLayout.imu] = 0.4
    assert np.array_equal(std, expected)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_noise_levels_must_be_finite_and_non_negative(bad):
    with pytest.raises(ValueError, match="noise"):
        SensorNoise(vel=bad)


def test_no_noise_returns_the_true_observation_itself():
    sensors = Sensors(SensorNoise())
    obs = np.arange(OBS_DIM, dtype=float)
    assert not sensors.noisy and sensors.sense(obs) is obs


def test_noise_is_seeded_by_the_env_generator():
    def draws(seed):
        sensors = Sensors(SensorNoise(pos=0.01, imu=0.1))
        sensors.reseed(np.random.default_rng(seed))
        return [sensors.sense(np.zeros(OBS_DIM)) for _ in range(3)]

    a, b, c = draws(5), draws(5), draws(6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    assert np.all(a[0][ObsLayout.ref_pos] == 0.0) and np.all(a[0][ObsLayout.pos] != 0.0)
    # the reseed takes one draw from the env's generator, as the plant's wind expects
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    Sensors(SensorNoise()).reseed(rng)
    ref.integers(2**63)
    assert rng.integers(2**63) == ref.integers(2**63)


def test_env_sensor_noise_dataclass_equals_keywords(make_env):
    kw = dict(wind="windy", trajectory="helix")
    a = make_env(pos_noise=0.01, vel_noise=0.02, gyro_noise=0.03, imu_noise=0.3, **kw)
    b = make_env(sensor_noise=SensorNoise(pos=0.01, vel=0.02, gyro=0.03, imu=0.3), **kw)
    obs_a, _ = a.reset(seed=2)
    obs_b, _ = b.reset(seed=2)
    assert np.array_equal(obs_a, obs_b)
    for _ in range(5):
        obs_a, *_ = a.step(np.zeros(4))
        obs_b, *_ = b.step(np.zeros(4))
        assert np.array_equal(obs_a, obs_b)


def test_env_rejects_noise_given_twice(make_env):
    with pytest.raises(ValueError, match="not both"):
        make_env(pos_noise=0.01, sensor_noise=SensorNoise(vel=0.01))
