"""The env's settings as one ``EnvConfig``: the same keyword API, one place that checks them.

``ResidualQuadEnv(**kwargs)`` and ``gym.make("ResidualQuad-v0", **kwargs)`` take exactly the
config's fields (names, order, defaults), build ``env.config`` and read every setting from it;
building the config refuses what the env refuses, with the same message. Two gaps found by a
fuzz: a number beyond the float range (``10**400``) is the usual ``ValueError`` naming the
argument, and ``wind_tau`` is bounded (``MAX_WIND_TAU_S``) when the env is built instead of
overflowing at ``reset``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys

import gymnasium as gym
import numpy as np
import pytest

from residual_quad.envs.checks import real
from residual_quad.envs.config import SETTINGS, EnvConfig
from residual_quad.envs.disturbances import MAX_WIND_TAU_S, WindModel
from residual_quad.envs.registration import ENV_ID
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

NAN, INF = math.nan, math.inf
HUGE = 10**400  # an int beyond the float range: float() of it raises OverflowError


def test_the_keyword_arguments_are_the_config_fields():
    """Names, order and defaults of the env's signature are the config's argument fields."""
    params = list(inspect.signature(ResidualQuadEnv).parameters.values())
    fields = [f for f in dataclasses.fields(EnvConfig) if f.init]
    assert [p.name for p in params] == [f.name for f in fields] == list(SETTINGS)
    for param, field in zip(params, fields, strict=True):
        assert param.default == field.default, param.name
    assert len(SETTINGS) == 35


def test_the_env_reads_its_settings_from_its_config():
    kwargs = {
        "payload": "extra",
        "wind": "windy",
        "trajectory": "helix",
        "max_body_rate": [3, 3, 1],
        "preset": "realistic",
        "seed": np.int64(4),
        "preview": (3, 0.05),
    }
    env = gym.make(ENV_ID, **kwargs).unwrapped
    config = env.config
    assert config == EnvConfig(**kwargs)
    assert config.max_body_rate == (3.0, 3.0, 1.0) and type(config.seed) is int
    assert env.payload_kg == config.payload_kg == 0.75
    assert env.wind_model is config.wind_model and env.trajectory is config.reference
    assert env.plant_options == config.plant_options and env.plant_options.rotor_tau_s == 0.06
    assert env.sensors.imu_bias is config.bias and config.bias.on  # the preset's level
    assert env.crash_conditions is config.crash_conditions
    assert env.preview_spec == config.preview_spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.payload = "none"  # type: ignore[misc]
    # the settings as keyword arguments build the same config again
    assert ResidualQuadEnv(**config.kwargs()).config == config


def test_the_defaults_build_the_default_config():
    env = ResidualQuadEnv()
    assert env.config == EnvConfig()
    assert env.config.kwargs() == {
        name: p.default for name, p in inspect.signature(ResidualQuadEnv).parameters.items()
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"control_hz": NAN},
        {"physics_hz": 250.0},
        {"episode_s": 0.004},
        {"wind_tau": 0.0},
        {"wind": (3.0, INF)},
        {"payload": "heavy!"},
        {"trajectory": 3},
        {"max_tilt": 4.0},
        {"reward_weights": {"nope": 1.0}},
        {"sensor_noise": "x"},
        {"pos_noise": 0.1, "sensor_noise": None, "imu_noise": -1.0},
        {"imu_bias": "unknown"},
        {"preset": "fast"},
        {"events": [{"kind": "payload", "t_s": 30.0, "mass_kg": 0.1}]},
        {"preview": (10, 1e17)},
        {"action_mode": "thrust", "control_hz": NAN},  # the first bad one, in the env's order
    ],
)
def test_the_config_refuses_what_the_env_refuses_with_the_same_message(kwargs):
    with pytest.raises(ValueError) as env_error:
        ResidualQuadEnv(**kwargs)
    with pytest.raises(ValueError) as config_error:
        EnvConfig(**kwargs)
    assert str(config_error.value) == str(env_error.value)


# ------------------------------------------------------------------ beyond the float range
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"control_hz": HUGE}, "control_hz"),
        ({"physics_hz": HUGE}, "physics_hz"),
        ({"episode_s": HUGE}, "episode_s"),
        ({"wind_tau": HUGE}, "wind_tau"),
        ({"wind_direction": -HUGE}, "wind_direction"),
        ({"wind": (HUGE, 1.0)}, "wind mean"),
        ({"wind": (1.0, HUGE)}, "wind sigma"),
        ({"max_tilt": HUGE}, "max_tilt"),
        ({"crash_speed": -HUGE}, "crash_speed"),
        ({"max_position_error": HUGE}, "max_position_error"),
        ({"k_rate": HUGE}, "k_rate"),
        ({"rotor_tau_s": HUGE}, "rotor_tau_s"),
        ({"preview": (5, HUGE)}, "preview"),
        ({"payload": HUGE}, "payload"),
    ],
)
def test_a_number_beyond_the_float_range_is_a_value_error_naming_the_argument(kwargs, name):
    """``10**400`` is a real number whose ``float()`` raises ``OverflowError``: refused as any
    out-of-range value, naming the argument (it was an ``OverflowError``)."""
    for build in (ResidualQuadEnv, EnvConfig):
        with pytest.raises(ValueError, match=name):
            build(**kwargs)


def test_real_shows_a_number_beyond_the_float_range_by_its_magnitude():
    with pytest.raises(ValueError) as err:
        real("k_rate", HUGE, low=0.0, unit="1/s")
    message = str(err.value)
    assert message.startswith("k_rate must be a finite real number >= 0 (1/s), got 1e400")
    assert len(message) < 120  # not the 401 digits
    with pytest.raises(ValueError, match=r"got -1e5000 \(int"):  # past Python's str limit
        real("k_rate", -(10**5000))


# ------------------------------------------------------------------ wind_tau
@pytest.mark.parametrize(
    "tau", [sys.float_info.max, 1e308, 4.5e307, 1e300, MAX_WIND_TAU_S * (1 + 1e-9), INF, -1.0]
)
def test_wind_tau_beyond_its_bound_is_refused_when_the_env_is_built(tau):
    """A correlation time near the largest float passed construction and overflowed the wind
    sampler's block length ``int(4τ/dt)`` at ``reset``: refused now, naming ``wind_tau``, in the
    single and the vector env and in a ``WindModel``."""
    with pytest.raises(ValueError, match=r"wind_tau must be a finite real number in \(0, 1e\+09\]"):
        ResidualQuadEnv(wind="windy", wind_tau=tau)
    with pytest.raises(ValueError, match="wind_tau"):
        ResidualQuadVectorEnv(2, nthread=1, wind="windy", wind_tau=tau)
    with pytest.raises(ValueError, match="wind_tau"):
        WindModel(mean=1.0, sigma=1.0, tau=tau)


@pytest.mark.parametrize(
    "rates",
    [
        {"control_hz": 1e5, "physics_hz": 1e5, "episode_s": 0.001},  # the shortest physics step
        {"control_hz": 1 / 3600, "physics_hz": 1 / 3600, "episode_s": 3600.0},  # the longest
        {},
    ],
)
@pytest.mark.parametrize("tau", [MAX_WIND_TAU_S, 5e-324])
def test_the_extreme_wind_taus_fly_in_both_envs(rates, tau):
    """The longest accepted correlation time (and the least subnormal) give finite gusts at the
    shortest and the longest physics step, single and vector env alike."""
    env = ResidualQuadEnv(wind="windy", wind_tau=tau, **rates)
    env.reset(seed=0)
    for _ in range(min(env.max_steps, 3)):
        *_, info = env.step(np.zeros(4))
        assert np.all(np.isfinite(info["wind"]))
    venv = ResidualQuadVectorEnv(2, nthread=1, wind="windy", wind_tau=tau, **rates)
    venv.reset(seed=0)
    *_, info = venv.step(np.zeros((2, 4)))
    assert np.all(np.isfinite(info["wind"]))
    venv.close()
