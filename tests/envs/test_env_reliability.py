"""Bad input and faults at the environment: a clear error naming the culprit, or a flagged end.

Regression tests for impossible starts flown as clean episodes, arguments that crashed deep
inside or slipped through, actions of the wrong kind and steps after an episode's end; plus the
physical extremes that must end flagged and clean, and no leak over many create/close cycles.
"""

from __future__ import annotations

import gc
import math
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

from residual_quad.envs.registration import DEFAULT_MAX_EPISODE_STEPS, ENV_ID
from residual_quad.envs.residual_quad_env import MAX_EPISODE_S, ResidualQuadEnv
from residual_quad.envs.trajectories import Reference, Trajectory
from residual_quad.episode import run_episode

NAN, INF = math.nan, math.inf


# ------------------------------------------------------------------ impossible starts
@pytest.mark.parametrize("velocity", [[1e6, 0.0, 0.0], [0.0, 0.0, -1e12], [1e300, 0.0, 0.0]])
def test_impossible_start_is_flagged_not_silently_reset(velocity):
    """MuJoCo's instability warning (it puts the vehicle back at its default pose) ends the
    episode on the first step as ``simulation_unstable``; before, the flight went on clean."""
    env = ResidualQuadEnv(trajectory="helix", episode_s=8.0)
    env.reset(seed=0, options={"velocity": velocity})
    _, reward, terminated, truncated, info = env.step(np.zeros(4))
    assert terminated and not truncated
    assert info["diverged"] and info["termination"] == "simulation_unstable"
    assert reward == 0.0 and info["reward_terms"] == {}


@pytest.mark.parametrize(
    "options, name",
    [
        ({"velocity": [NAN, 0.0, 0.0]}, "velocity"),
        ({"velocity": [0.0, INF, 0.0]}, "velocity"),
        ({"velocity": [1.0, 2.0]}, "velocity"),
        ({"velocity": "fast"}, "velocity"),
        ({"velocity": [[1.0, 2.0, 3.0]]}, "velocity"),
        ({"position_offset": [0.0, 0.0, -INF]}, "position_offset"),
        ({"position_offset": [0.0, 0.0, NAN]}, "position_offset"),
        ({"position_offset": ["a", "b", "c"]}, "position_offset"),
        ({"yaw_offset": NAN}, "yaw_offset"),
        ({"yaw_offset": INF}, "yaw_offset"),
        ({"yaw_offset": "1.0"}, "yaw_offset"),
        ({"yaw_offset": [0.1]}, "yaw_offset"),
        ({"speed": 1.0}, "position_offset, yaw_offset, velocity"),
        ([("velocity", [1, 0, 0])], "reset options"),
    ],
)
def test_bad_reset_options_name_the_option(options, name):
    env = ResidualQuadEnv()
    with pytest.raises(ValueError, match=name):
        env.reset(seed=0, options=options)


def test_reset_with_a_negative_seed_is_a_value_error():
    with pytest.raises(ValueError, match="seed"):
        ResidualQuadEnv().reset(seed=-1)


@pytest.mark.parametrize("seed", [1.5, True, np.bool_(True), -1, "3", [3]])
def test_a_bad_seed_says_what_is_accepted(seed):
    """A float, bool, negative number or string is one ValueError naming ``seed`` and what it
    accepts, through ``gym.make``'s wrappers too (Gymnasium's own check would say less)."""
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID

    for env in (ResidualQuadEnv(), gym.make(ENV_ID)):
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0 or None, got"):
            env.reset(seed=seed)
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0 or None, got"):
        ResidualQuadEnv(seed=seed)


def test_a_numpy_integer_seed_equals_the_python_int():
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID

    env = gym.make(ENV_ID, wind="windy")
    a = env.reset(seed=np.int64(5))[0]
    b = env.reset(seed=5)[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ResidualQuadEnv(seed=np.uint16(5), wind="windy").reset()[0], b)


# ------------------------------------------------------------------ constructor arguments
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"control_hz": 0}, "control_hz"),
        ({"control_hz": -100.0}, "control_hz"),
        ({"control_hz": NAN}, "control_hz"),
        ({"physics_hz": INF}, "physics_hz"),
        ({"physics_hz": NAN}, "physics_hz"),
        ({"physics_hz": 0.0}, "physics_hz"),
        ({"episode_s": INF}, "episode_s"),
        ({"episode_s": NAN}, "episode_s"),
        ({"episode_s": 0.004}, "episode_s"),  # shorter than one control period
        ({"episode_s": 1e9}, "episode_s"),  # would preallocate hundreds of GiB
        ({"episode_s": MAX_EPISODE_S + 1.0}, "episode_s"),
        ({"wind_tau": INF}, "wind_tau"),
        ({"wind_tau": NAN}, "wind_tau"),
        ({"wind_tau": 0.0}, "wind_tau"),
        ({"wind_direction": NAN}, "wind_direction"),
        ({"wind": (NAN, 1.0)}, "wind"),
        ({"wind": (3.0, INF)}, "wind"),
        ({"wind": ("a", "b")}, "wind"),
        ({"payload": None}, "payload"),
        ({"payload": [1]}, "payload"),
        ({"payload": NAN}, "payload"),
        ({"payload": INF}, "payload"),
        ({"payload": True}, "payload"),
        ({"max_tilt": NAN}, "max_tilt"),
        ({"max_tilt": 0.0}, "max_tilt"),
        ({"max_tilt": 4.0}, "max_tilt"),
        ({"crash_speed": NAN}, "crash_speed"),
        ({"crash_speed": "x"}, "crash_speed"),
        ({"crash_speed": -1.0}, "crash_speed"),
        ({"max_position_error": NAN}, "max_position_error"),
        ({"max_position_error": 0.0}, "max_position_error"),
        ({"reward_weights": {"pos": NAN}}, "pos"),
        ({"reward_weights": {"alive": INF}}, "alive"),
        ({"reward_weights": [1.0]}, "reward_weights"),
        ({"ground_effect": "no"}, "ground_effect"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"k_rate": NAN}, "k_rate"),
        ({"max_body_rate": (4.0, 4.0)}, "max_body_rate"),
        ({"max_body_rate": (4.0, 0.0, 2.0)}, "max_body_rate"),
        ({"pos_noise": NAN}, "noise"),
        ({"imu_noise": "loud"}, "noise"),
        ({"width": 0}, "width"),
        ({"height": 1.5}, "height"),
        ({"drag": "quadratic"}, "drag"),
        ({"airframe": {"mass": 1.0}}, "airframe"),
        ({"sensor_noise": 0.1}, "sensor_noise"),
        ({"action_mode": ["rotor"]}, "action_mode"),
        ({"render_mode": 3}, "render_mode"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name) as err:
        ResidualQuadEnv(**kwargs)
    assert "\n" not in str(err.value)


def test_one_control_period_is_the_shortest_episode():
    result = run_episode("geo", episode_s=0.01)
    assert result.steps == 1 and not result.diverged


def test_gym_spec_knows_the_default_episode_length():
    assert gym.spec(ENV_ID).max_episode_steps == DEFAULT_MAX_EPISODE_STEPS == 2000
    assert ResidualQuadEnv().max_steps == DEFAULT_MAX_EPISODE_STEPS


def _steps_to_end(env) -> tuple[int, bool, bool]:
    env.reset(seed=0)
    frame = env.unwrapped.airframe
    action = np.full(4, 2.0 * frame.hover_thrust / frame.max_thrust - 1.0)  # nominal hover
    n = 0
    while True:
        _, _, terminated, truncated, _ = env.step(action)
        n += 1
        if terminated or truncated:
            return n, terminated, truncated


@pytest.mark.parametrize(
    "kwargs, steps",
    [
        ({"episode_s": 0.5}, 50),  # the env's own end comes first
        ({"episode_s": 25.0, "max_episode_steps": 2500}, 2500),  # a longer episode, both given
        ({"episode_s": 25.0, "max_episode_steps": 30}, 30),  # an explicit shorter limit
    ],
)
def test_an_episode_lasts_the_shorter_of_episode_s_and_the_time_limit(kwargs, steps):
    env = gym.make(ENV_ID, **kwargs)
    assert _steps_to_end(env) == (steps, False, True)
    env.close()


def test_the_default_limit_cutting_a_longer_episode_is_warned_about():
    env = gym.make(ENV_ID, episode_s=25.0)
    assert _steps_to_end(env) == (2000, False, True)  # Gymnasium's limit, as documented
    with pytest.warns(UserWarning, match="max_episode_steps=2500"):
        env.reset(seed=1)
    env.close()


def _limit_warnings(recwarn) -> list:
    return [w for w in recwarn if "max_episode_steps" in str(w.message)]


@pytest.mark.parametrize(
    "kwargs", [{"episode_s": 5.0}, {"episode_s": 25.0, "max_episode_steps": 30}]
)
def test_no_warning_when_the_default_limit_does_not_cut(kwargs, recwarn):
    env = gym.make(ENV_ID, **kwargs)
    _steps_to_end(env)
    env.reset(seed=1)
    env.close()
    assert not _limit_warnings(recwarn)


# ------------------------------------------------------------------ trajectories
class _Returns(Trajectory):
    def __init__(self, value):
        self.value = value

    def __call__(self, t):
        return self.value


_GOOD = Reference(np.zeros(3) + [0.0, 0.0, 1.5], np.zeros(3), np.zeros(3), 0.0)


@pytest.mark.parametrize(
    "value, error",
    [
        ((np.zeros(3), np.zeros(3), np.zeros(3), 0.0), TypeError),
        (None, TypeError),
        (np.zeros(3), TypeError),
        (Reference([0.0, 0.0, 1.5], np.zeros(3), np.zeros(3), 0.0), TypeError),
        (Reference(np.zeros(2), np.zeros(3), np.zeros(3), 0.0), TypeError),
        (Reference(np.array(["a", "b", "c"]), np.zeros(3), np.zeros(3), 0.0), TypeError),
        (Reference(np.zeros(3), np.zeros(3), np.zeros(3), "north"), TypeError),
        (Reference(np.full(3, NAN), np.zeros(3), np.zeros(3), 0.0), ValueError),
        (Reference(np.zeros(3), np.zeros(3), np.zeros(3), 0.0, INF), ValueError),
        (Reference(np.array([1e200, 0.0, 1.5]), np.zeros(3), np.zeros(3), 0.0), ValueError),
    ],
)
def test_custom_trajectory_returning_wrong_things_is_named_at_reset(value, error):
    env = ResidualQuadEnv(trajectory=_Returns(value))
    with pytest.raises(error, match="trajectory _Returns"):
        env.reset(seed=0)


class _GoesBad(Trajectory):
    """A valid reference until ``t_bad`` s, then ``bad``."""

    def __init__(self, bad, t_bad=0.05):
        self.bad, self.t_bad = bad, t_bad

    def __call__(self, t):
        return _GOOD if t < self.t_bad else self.bad


def test_custom_trajectory_going_wrong_mid_episode_is_named_or_flagged():
    env = ResidualQuadEnv(trajectory=_GoesBad((1, 2, 3)))
    env.reset(seed=0)
    hover = np.full(4, 2.0 * env.airframe.hover_thrust / env.airframe.max_thrust - 1.0)
    with pytest.raises(TypeError, match="trajectory _GoesBad"):
        for _ in range(10):
            env.step(hover)
    nan_ref = Reference(np.full(3, NAN), np.zeros(3), np.zeros(3), 0.0)
    huge_vel = Reference(np.array([0.0, 0.0, 1.5]), np.full(3, 1e200), np.zeros(3), 0.0)
    for bad in (nan_ref, huge_vel):
        env = ResidualQuadEnv(trajectory=_GoesBad(bad))
        env.reset(seed=0)
        for _ in range(10):
            _, reward, terminated, _, info = env.step(hover)
            if terminated:
                break
        assert terminated and info["diverged"] and info["termination"] == "non_finite"
        assert math.isfinite(reward)


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("helix", {"period": 0.0}, "period"),
        ("helix", {"radius": NAN}, "radius"),
        ("helix", {"turns": "two"}, "turns"),
        ("figure8", {"period": -1.0}, "period"),
        ("hover", {"point": (0.0, 1.5)}, "point"),
        ("helix", {"bogus": 1}, "bogus"),
        ("circle", {}, "hover, helix, figure8"),
    ],
)
def test_builtin_trajectory_parameters_are_checked(name, params, match):
    from residual_quad.envs.trajectories import make_named_trajectory

    with pytest.raises(ValueError, match=match):
        make_named_trajectory(name, **params)


# ------------------------------------------------------------------ actions and episode end
@pytest.mark.parametrize(
    "action",
    [
        np.zeros((2, 2)),
        np.zeros((1, 4)),
        np.zeros(5),
        ["a", "b", "c", "d"],
        "abcd",
        np.zeros(4, dtype=complex),
        np.array([0.0, None, 0.0, 0.0], dtype=object),
        np.zeros(4, dtype=bool),
        None,
        [[0.0, 0.0], [0.0]],
    ],
)
def test_actions_of_the_wrong_kind_are_rejected(action):
    env = ResidualQuadEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(action)


def test_integer_and_float32_actions_are_accepted_as_floats():
    a = ResidualQuadEnv()
    b = ResidualQuadEnv()
    a.reset(seed=0)
    b.reset(seed=0)
    obs_a, *_ = a.step(np.array([0, 1, 0, -1]))
    obs_b, *_ = b.step(np.array([0.0, 1.0, 0.0, -1.0], dtype=np.float32))
    assert np.array_equal(obs_a, obs_b)


def test_step_after_termination_refuses_and_keeps_the_crash():
    """Before, stepping on after a crash kept simulating and reported ``terminated=False``."""
    env = ResidualQuadEnv(trajectory="hover")
    env.reset(seed=0)
    for _ in range(300):
        _, _, terminated, _, info = env.step(-np.ones(4))
        if terminated:
            break
    assert terminated and info["termination"] == "ground_contact"
    with pytest.raises(ResetNeeded, match="reset"):
        env.step(np.zeros(4))
    env.reset(seed=0)
    env.step(np.zeros(4))  # a reset starts a new episode


def test_step_after_truncation_and_before_reset_refuses():
    env = ResidualQuadEnv(episode_s=0.02)
    with pytest.raises(ResetNeeded):
        env.step(np.zeros(4))
    env.reset(seed=0)
    hover = np.full(4, 2.0 * env.airframe.hover_thrust / env.airframe.max_thrust - 1.0)
    assert env.step(hover)[3] is False
    assert env.step(hover)[3] is True
    with pytest.raises(ResetNeeded):
        env.step(hover)


# ------------------------------------------------------------------ physical extremes
EXTREMES = {
    "50 m/s start": {"reset_options": {"velocity": [50.0, 0.0, 0.0]}},
    "below the floor": {"reset_options": {"position_offset": [0.0, 0.0, -2.0]}},
    "3 kg payload": {"payload": 3.0},
    "1e6 kg payload": {"payload": 1e6},
    "30 ± 10 m/s wind": {"wind": (30.0, 10.0)},
    "1e6 m/s start": {"reset_options": {"velocity": [1e6, 0.0, 0.0]}},
}


@pytest.mark.parametrize("controller", ["geo", "pid"])
@pytest.mark.parametrize("extreme", list(EXTREMES))
def test_physical_extremes_end_flagged_and_clean(controller, extreme):
    result = run_episode(controller, trajectory="helix", episode_s=10.0, **EXTREMES[extreme])
    assert result.diverged and result.termination is not None
    assert result.steps < 1000
    assert np.all(np.isfinite(result.pos)) and np.all(np.isfinite(result.thrusts))


# ------------------------------------------------------------------ leaks
def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")  # pragma: no cover


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_no_memory_or_fd_leak_over_1000_create_close_cycles():
    def cycle(n):
        for i in range(n):
            env = gym.make(ENV_ID, payload=0.1 * (i % 3), disable_env_checker=True)
            env.reset(seed=i)
            env.close()
        gc.collect()

    # warm caches and allocator pools to their steady state: measured, the first 1 000 cycles grow
    # the process by ~14 MiB (bounded caches filling; more after other tests fragmented the
    # heap), every later 1 000 by ~1.2 MiB — a leak of a model + data per cycle would be ~100 MiB
    cycle(1000)
    fds = len(os.listdir("/proc/self/fd"))
    growth = []  # KiB per 1 000 cycles, two rounds: a leak grows every round, while a heap
    for _ in range(2):  # fragmented by the worker's earlier tests can jump once (seen: 24 MiB)
        rss = _rss_kib()
        cycle(1000)
        growth.append(_rss_kib() - rss)
        assert len(os.listdir("/proc/self/fd")) <= fds
    assert min(growth) < 20 * 1024, growth  # KiB; a model + data kept per cycle is ≈ 100 KiB


# ------------------------------------------------------------------ numerical corners
def test_wind_with_steps_much_longer_than_tau_stays_finite():
    """``a^k`` underflowed to 0 and the closed form divided 0 by 0 (NaN wind)."""
    import warnings

    from residual_quad.envs.disturbances import WindModel, WindProcess

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proc = WindProcess(WindModel(3.0, 1.0, tau=1e-3), 1.0, np.random.default_rng(0))
        winds = proc.take(10)
    assert np.all(np.isfinite(winds)) and winds.std() > 0.1


def test_ground_effect_at_a_tiny_height_is_the_max_gain_without_overflow():
    import warnings

    from residual_quad.envs.disturbances import GroundEffect

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GroundEffect().gain(1e-300) == 1.5
    assert GroundEffect().gain(1.0) == 1.0 / (1.0 - (0.127 / 4.0) ** 2)


def test_physics_rate_below_the_control_rate_names_both_rates():
    # found by the long fuzz profile: the message named only control_hz
    with pytest.raises(ValueError, match=r"control_hz .* must not exceed physics_hz"):
        gym.make("ResidualQuad-v0", physics_hz=1.0)


def test_a_huge_noise_level_is_refused_before_it_can_overflow():
    # found by the fuzz suite: gyro noise of 1.8e308 made the observation infinite
    with pytest.raises(ValueError, match="sensor noise levels"):
        gym.make("ResidualQuad-v0", gyro_noise=1.7976671922168686e308)
