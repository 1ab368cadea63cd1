"""IMU bias: the random walk's variance growth, where it is applied, off by default, the single
and the vector env alike, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from residual_quad.envs.imu_bias import BIAS_DIM, ImuBias, add_bias
from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.sensors import SensorNoise, Sensors
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

BIAS = ImuBias(gyro_initial=0.02, gyro_walk=0.01, accel_initial=0.1, accel_walk=0.05)


def test_bias_variance_grows_as_sigma0_squared_plus_q_squared_t():
    """Over 3000 seeded walks, the sample variance of each entry after k periods against
    ``σ₀² + q²·k·dt``. The 9000 draws per sensor (3 axes) give a relative standard error of
    √(2/9000) ≈ 1.5 %; we allow 4 of them."""
    dt, walks, steps = 0.25, 3000, 20  # the walk is exact at any period
    checks = (0, 1, 5, 20)
    out = np.empty((len(checks), walks, BIAS_DIM))
    for w in range(walks):
        sensors = Sensors(SensorNoise(), BIAS, dt)
        sensors.reseed(np.random.default_rng(w))
        c = 0
        for k in range(steps + 1):
            sensors.sense(np.zeros(OBS_DIM))
            if k == checks[c]:
                out[c, w] = sensors.bias
                c = min(c + 1, len(checks) - 1)
    tol = 4 * math.sqrt(2 / (3 * walks))
    for c, k in enumerate(checks):
        t = k * dt
        for sl, s0, q in ((slice(0, 3), 0.02, 0.01), (slice(3, 6), 0.1, 0.05)):
            var = out[c, :, sl].var()
            assert var / (s0**2 + q**2 * t) == pytest.approx(1.0, abs=tol), (k, sl)
    # the increments are independent of the turn-on bias: Cov(b(0), b(t) − b(0)) ≈ 0
    inc = out[-1] - out[0]
    corr = (inc * out[0]).mean() / math.sqrt((inc**2).mean() * (out[0] ** 2).mean())
    assert abs(corr) < 4 / math.sqrt(walks * BIAS_DIM)


def test_bias_is_added_to_body_rates_and_accelerometer_only():
    sensors = Sensors(SensorNoise(), BIAS, 0.01)
    sensors.reseed(np.random.default_rng(1))
    obs = np.arange(OBS_DIM, dtype=float)
    for _ in range(3):
        reported = sensors.sense(obs)
        diff = reported - obs
        np.testing.assert_allclose(diff[ObsLayout.omega_b], sensors.bias[0:3], atol=1e-14)
        np.testing.assert_allclose(diff[ObsLayout.imu], sensors.bias[3:6], atol=1e-14)
        other = np.ones(OBS_DIM, dtype=bool)
        other[ObsLayout.omega_b] = other[ObsLayout.imu] = False
        assert np.all(diff[other] == 0.0) and np.all(sensors.bias != 0.0)


def test_walk_only_and_turn_on_only():
    """σ₀ = 0: the first observation is unbiased; q = 0: the bias stays at its turn-on value."""
    walk = Sensors(SensorNoise(), ImuBias(gyro_walk=0.1), 0.01)
    walk.reseed(np.random.default_rng(0))
    walk.sense(np.zeros(OBS_DIM))
    assert np.all(walk.bias == 0.0)
    walk.sense(np.zeros(OBS_DIM))
    assert np.all(walk.bias[0:3] != 0.0) and np.all(walk.bias[3:6] == 0.0)
    const = Sensors(SensorNoise(), ImuBias(accel_initial=0.2), 0.01)
    const.reseed(np.random.default_rng(0))
    first = const.sense(np.zeros(OBS_DIM))
    assert all(np.array_equal(const.sense(np.zeros(OBS_DIM)), first) for _ in range(5))


def _fly(steps=30, seed=4, **kwargs):
    env = ResidualQuadEnv(wind="windy", trajectory="helix", **kwargs)
    out = [env.reset(seed=seed)]
    out += [env.step(np.full(4, -0.25))[::4] for _ in range(steps)]  # (obs, info)
    return out


def test_named_level_is_the_euroc_adis16448_walk():
    """rad/s²/√Hz and m/s³/√Hz (the dataset's units) are rad/s/√s and m/s²/√s."""
    level = ImuBias.from_spec("adis16448")
    assert level == ImuBias(gyro_walk=1.9393e-5, accel_walk=3.0e-3)
    assert ResidualQuadEnv(imu_bias="adis16448").sensors.imu_bias == level


def test_zero_bias_changes_nothing():
    """``imu_bias=None``, ``ImuBias()`` and a dict of zeros: the same episode, bit for bit."""
    a = _fly(pos_noise=0.01, gyro_noise=0.02)
    for other in (_fly(pos_noise=0.01, gyro_noise=0.02, imu_bias=ImuBias()),
                  _fly(pos_noise=0.01, gyro_noise=0.02, imu_bias={"gyro_walk": 0.0})):  # fmt: skip
        for (oa, ia), (ob, ib) in zip(a, other, strict=True):
            assert np.array_equal(oa, ob) and np.array_equal(ia["wind"], ib["wind"])
            assert np.all(ib["gyro_bias"] == 0.0) and np.all(ib["accel_bias"] == 0.0)
    assert not Sensors(SensorNoise(), ImuBias(), 0.01).noisy


def test_bias_leaves_wind_and_white_noise_unchanged_and_is_reported_in_info():
    """The bias draws from its own stream: with it on, the observation is the one without it
    plus the bias in ``info``, exactly, and the wind is the same."""
    noise = dict(pos_noise=0.01, gyro_noise=0.02, imu_noise=0.1)
    a, b = _fly(**noise), _fly(**noise, imu_bias=BIAS)
    for (oa, ia), (ob, ib) in zip(a, b, strict=True):
        bias = np.concatenate([ib["gyro_bias"], ib["accel_bias"]])
        assert np.array_equal(ob, add_bias(oa, bias))
        assert np.array_equal(ia["wind"], ib["wind"]) and np.all(bias != 0.0)


def test_vector_env_equals_single_envs_with_turbulence_and_bias():
    """Dryden turbulence, IMU bias and white noise on, through an autoreset: the wind and the
    biases equal bit for bit, observations to 1e-9 and rewards to 1e-12 (the physics' own
    agreement, see test_vector_env)."""
    kw = dict(turbulence="moderate", imu_bias=BIAS, gyro_noise=0.01, episode_s=0.2)
    scenarios = [
        {"wind": "windy", "trajectory": "helix"},
        {"wind": "calm", "trajectory": "hover", "payload": "heavy"},
    ]
    n, steps, seed = len(scenarios), 45, 9
    vec = ResidualQuadVectorEnv(n, scenarios=scenarios, nthread=1, **kw)
    singles = [ResidualQuadEnv(**s, **kw) for s in scenarios]
    obs, info = vec.reset(seed=seed)
    for i, env in enumerate(singles):
        o, inf = env.reset(seed=seed + i)
        np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-9)
        assert np.array_equal(info["gyro_bias"][i], inf["gyro_bias"])
    actions = np.random.default_rng(0).uniform(-0.4, -0.1, (steps, n, 4))
    done = [False] * n
    resets = 0
    for t in range(steps):
        obs, rew, term, trunc, info = vec.step(actions[t])
        for i, env in enumerate(singles):
            if done[i]:
                o, inf = env.reset()
                r, done[i], resets = 0.0, False, resets + 1
            else:
                o, r, te, tr, inf = env.step(actions[t, i])
                done[i] = te or tr
                assert (term[i], trunc[i]) == (te, tr)
            np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-9, err_msg=f"{t} {i}")
            assert abs(rew[i] - r) <= 1e-12
            for key in ("wind", "gyro_bias", "accel_bias"):
                assert np.array_equal(info[key][i], inf[key]), (key, t, i)
    assert resets >= 2 and np.any(info["accel_bias"] != 0.0)
    vec.close()


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"gyro_walks": 0.1}, "unknown imu_bias keys.*gyro_initial, gyro_walk"),
        ("mems", "imu_bias must be one of adis16448, an ImuBias, a dict"),
        ({"accel_walk": -1.0}, "accel_walk"),
        ({"gyro_initial": float("nan")}, "gyro_initial"),
        ({"accel_initial": float("inf")}, "accel_initial"),
    ],
)
def test_bad_imu_bias_is_a_value_error_naming_it(spec, match):
    with pytest.raises(ValueError, match=match):
        ResidualQuadEnv(imu_bias=spec)


@given(
    name=st.sampled_from(["gyro_initial", "gyro_walk", "accel_initial", "accel_walk"]),
    value=st.one_of(st.floats(), st.integers(-5, 5), st.text(max_size=3), st.none()),
)
def test_imu_bias_fields_are_finite_non_negative_or_refused(name, value):
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1e3
    )
    if ok:
        assert getattr(ImuBias(**{name: value}), name) == value
    else:
        with pytest.raises(ValueError, match=name):
            ImuBias(**{name: value})
