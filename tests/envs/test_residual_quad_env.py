"""The Gymnasium contract of ResidualQuad-v0: checkers, determinism, options, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from residual_quad.controllers import make_controller
from residual_quad.envs.observation import OBS_DIM, ObsLayout


@pytest.mark.parametrize("action_mode", ["rotor", "ctbr"])
def test_gymnasium_check_env_no_warnings(make_env, action_mode):
    env = make_env(payload="extra", wind="windy", trajectory="helix", action_mode=action_mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


def test_sb3_check_env_no_warnings(make_env):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    env = make_env(payload="heavy", wind="breezy", trajectory="figure8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_checker.check_env(env.unwrapped, warn=True)


def _episode(env, seed, steps=None):
    ctrl = make_controller("geo", env)
    obs, info = env.reset(seed=seed)
    ctrl.reset(seed)
    observations, infos = [obs], [info]
    for _ in range(steps or 10**9):
        obs, reward, terminated, truncated, info = env.step(ctrl.policy(obs))
        observations.append(obs)
        infos.append(info | {"reward": reward})
        if terminated or truncated:
            break
    return np.array(observations), infos


def _flat_info(info):
    out = []
    for k in sorted(info):
        v = info[k]
        if isinstance(v, dict):
            out.extend(v.values())
        elif isinstance(v, np.ndarray):
            out.extend(v.tolist())
        elif isinstance(v, int | float | bool):
            out.append(float(v))
    return out


def test_same_seed_bit_identical_whole_episode(make_env):
    kw = dict(payload="heavy", wind="windy", trajectory="helix", episode_s=6.0)
    obs_a, info_a = _episode(make_env(**kw), seed=7)
    obs_b, info_b = _episode(make_env(**kw), seed=7)
    assert obs_a.shape == obs_b.shape == (601, OBS_DIM)
    assert np.array_equal(obs_a, obs_b)
    assert [_flat_info(i) for i in info_a] == [_flat_info(i) for i in info_b]
    obs_c, _ = _episode(make_env(**kw), seed=8)
    assert not np.array_equal(obs_a, obs_c)


def test_seed_kwarg_seeds_first_reset(make_env):
    a = make_env(wind="windy", seed=3)
    b = make_env(wind="windy")
    obs_a, info_a = a.reset()
    obs_b, info_b = b.reset(seed=3)
    assert np.array_equal(info_a["wind"], info_b["wind"])


def test_starts_at_rest_at_reference_pose(make_env):
    env = make_env(trajectory="helix")
    obs, _ = env.reset(seed=0)
    assert np.allclose(obs[ObsLayout.pos], obs[ObsLayout.ref_pos])
    assert np.allclose(obs[ObsLayout.vel], 0.0)
    R = ObsLayout.rotation(obs)
    assert math.atan2(R[1, 0], R[0, 0]) == pytest.approx(obs[ObsLayout.ref_yaw])
    assert obs[ObsLayout.ref_yaw] == pytest.approx(math.pi / 2)


def test_reset_options_offsets(make_env):
    env = make_env(trajectory="hover")
    obs, _ = env.reset(seed=0, options={"yaw_offset": 0.5, "position_offset": [0.1, -0.2, 0.3]})
    R = ObsLayout.rotation(obs)
    assert math.atan2(R[1, 0], R[0, 0]) == pytest.approx(0.5)
    assert np.allclose(obs[ObsLayout.pos] - obs[ObsLayout.ref_pos], [0.1, -0.2, 0.3])
    with pytest.raises(ValueError, match="position_offset, yaw_offset"):
        env.reset(options={"yaw": 1.0})


def test_observation_hides_ground_truth(make_env):
    """Two payloads, same wind seed: at rest only the accelerometer differs, and only as physics
    says (it measures ΣT/m of the true mass); payload and wind are in ``info`` alone."""
    o1, i1 = make_env(payload="none", wind="windy").reset(seed=1)
    o2, i2 = make_env(payload="extra", wind="windy").reset(seed=1)
    not_imu = np.ones(OBS_DIM, bool)
    not_imu[ObsLayout.imu] = False
    assert np.array_equal(o1[not_imu], o2[not_imu])
    thrust = o1[ObsLayout.thrusts].sum() * i1["ground_gain"]
    assert 1.0 < i1["ground_gain"] < 1.001  # 1.5 m above the floor
    assert o1[ObsLayout.imu][2] == pytest.approx(thrust / 0.95)
    assert o2[ObsLayout.imu][2] == pytest.approx(thrust / 1.70)
    assert i1["payload_kg"] == 0.0 and i2["payload_kg"] == 0.75
    assert i2["true_mass"] == pytest.approx(1.70)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"payload": "huge"}, "none, light, heavy, extra"),
        ({"payload": -0.1}, "payload"),
        ({"wind": "storm"}, "calm, breezy, windy"),
        ({"trajectory": "circle"}, "hover, helix, figure8"),
        ({"action_mode": "torque"}, "rotor, ctbr"),
        ({"control_hz": 300.0}, "multiple"),
        ({"reward_weights": {"speed": 1.0}}, "alive"),
        ({"imu_noise": -1.0}, "noise"),
    ],
)
def test_bad_arguments_list_valid_choices(make_env, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_env(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"payload": "huge"},
            "unknown payload 'huge'; valid choices: none, light, heavy, extra, or a mass in kg "
            "in [0, 1e+09]",
        ),
        (
            {"wind": "storm"},
            "unknown wind 'storm'; valid choices: calm, breezy, windy, or a (mean, sigma) pair "
            "in m/s, or a WindModel",
        ),
    ],
)
def test_an_unknown_level_name_also_says_what_else_is_accepted(kwargs, message):
    """The level names and the other accepted form (a mass in kg; a (mean, sigma) pair or a
    WindModel), through ``gym.make`` too."""
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv

    for make in (ResidualQuadEnv, lambda **kw: gym.make(ENV_ID, **kw)):
        with pytest.raises(ValueError) as err:
            make(**kwargs)
        assert str(err.value) == message


def test_unsupported_render_mode():
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv

    with pytest.raises(ValueError, match="rgb_array"):
        ResidualQuadEnv(render_mode="human")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_action_rejected(make_env, bad):
    env = make_env()
    env.reset(seed=0)
    action = np.zeros(4)
    action[2] = bad
    with pytest.raises(ValueError, match="finite"):
        env.step(action)


def test_wrong_action_shape_rejected(make_env):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        env.unwrapped.step(np.zeros(3))


def test_diverging_flight_terminates_with_flag(make_env):
    """Full thrust on one side flips the vehicle: terminated, flagged, no exception."""
    env = make_env(trajectory="hover")
    env.reset(seed=0)
    for _ in range(300):
        _, _, terminated, truncated, info = env.step(np.array([1.0, 1.0, -1.0, -1.0]))
        if terminated or truncated:
            break
    assert terminated and info["diverged"]
    assert info["termination"] in {"tilt", "ground_contact", "position_error"}


def test_free_fall_crashes_on_the_ground(make_env):
    env = make_env(trajectory="hover")
    env.reset(seed=0)
    for _ in range(300):
        _, _, terminated, _, info = env.step(-np.ones(4))
        if terminated:
            break
    assert info["termination"] == "ground_contact"


def test_truncates_at_episode_length(make_env):
    env = make_env(episode_s=0.5)
    env.reset(seed=0)
    ctrl = make_controller("geo", env)
    obs, _ = env.reset(seed=0)
    steps = 0
    for steps in range(1, 100):  # noqa: B007 - the count is the result
        obs, _, terminated, truncated, _ = env.step(ctrl.policy(obs))
        if truncated:
            break
    assert steps == 50 and not terminated


def test_ctbr_mode_holds_hover_with_hover_thrust(make_env):
    env = make_env(action_mode="ctbr", trajectory="hover")
    obs, _ = env.reset(seed=0)
    frame = env.unwrapped.airframe
    a0 = 2.0 * frame.hover_thrust / frame.max_thrust - 1.0
    for _ in range(100):
        obs, *_ = env.step(np.array([a0, 0.0, 0.0, 0.0]))
    assert abs(obs[ObsLayout.pos][2] - 1.5) < 0.01
    assert np.abs(obs[ObsLayout.omega_b]).max() < 1e-6


def test_render_rgb_array(make_env):
    env = make_env(render_mode="rgb_array", trajectory="helix")
    env.reset(seed=0)
    try:
        frame = env.render()
    except Exception as exc:  # pragma: no cover - depends on the machine's GL
        pytest.skip(f"no headless OpenGL here: {exc}")
    assert frame.shape == (480, 640, 3) and frame.dtype == np.uint8
    assert frame.std() > 5.0  # not a blank image


def test_sensor_noise_changes_observation_not_wind(make_env):
    kw = dict(wind="windy", trajectory="hover")
    clean, ci = make_env(**kw).reset(seed=4)
    noisy, ni = make_env(pos_noise=0.01, imu_noise=0.1, **kw).reset(seed=4)
    assert np.array_equal(ci["wind"], ni["wind"])
    assert not np.array_equal(clean[ObsLayout.pos], noisy[ObsLayout.pos])
    assert np.array_equal(clean[ObsLayout.ref_pos], noisy[ObsLayout.ref_pos])
