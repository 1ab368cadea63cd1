"""Property-based tests of the environment's promises under arbitrary input.

Whatever a caller passes — constructor arguments, reset options, actions, custom trajectories —
the environment either refuses it with a clear ``ValueError``/``TypeError`` that names the
argument, or flies: the observation is finite or the episode ends flagged (``diverged``). No
other exception type, ever. ``HYPOTHESIS_PROFILE=long`` runs ten times the examples.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from residual_quad.envs.config import EnvConfig
from residual_quad.envs.residual_quad_env import RESET_OPTIONS, ResidualQuadEnv
from residual_quad.envs.trajectories import Reference, Trajectory
from residual_quad.envs.turbulence import DrydenTurbulence
from residual_quad.envs.vector_env import ResidualQuadVectorEnv
from residual_quad.episode import run_episode

_SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1

#: an object's address in a repr ("<object object at 0x7f…>"): not part of a message's meaning
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def _settings(examples: int):
    return settings(
        max_examples=examples * _SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# numbers a fuzzer tries: NaN, ±inf, zero, tiny, huge, negative, ordinary
numbers = st.one_of(
    st.sampled_from([0, 0.0, -0.0, 1, -1, 1e-300, 1e300, -1e300, math.nan, math.inf, -math.inf]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(min_value=-100.0, max_value=100.0),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.lists(numbers, max_size=4),
    st.tuples(numbers, numbers),
    st.dictionaries(st.text(max_size=3), numbers, max_size=2),
    st.just(object()),
    st.complex_numbers(max_magnitude=10.0),
)
values = st.one_of(numbers, junk)
# integers beyond the float range: real numbers whose float() raises OverflowError
beyond_float = st.sampled_from([10**400, -(10**400), 2**1024])
# positive scales (a preview's dt, a turbulence length or airspeed, a gust correlation time):
# the ends of float64 — the least subnormal, the largest finite — values around the physical
# bounds and integers beyond the float range
scales = st.one_of(
    st.sampled_from([5e-324, 1e-300, 1e-17, 1e-6, 1e-3, 0.06, 1.0, 3600.0, 1e6, 1e9, 1e17, 1e300]),
    st.just(sys.float_info.max),
    st.floats(min_value=0.0, exclude_min=True, allow_infinity=False),
    numbers,
    beyond_float,
)
previews = st.one_of(
    st.tuples(st.integers(-1, 1001), scales),
    st.lists(st.one_of(st.integers(0, 20), scales), max_size=3),
    values,
)


@dataclass(frozen=True)
class _Dryden:
    """Dryden turbulence built in the test (a bad field is refused by ``DrydenTurbulence``
    itself, which the refusal contract covers as the env's own checks), flown in the mean wind
    ``mean`` m/s that sweeps it past when ``airspeed`` is ``None``."""

    sigma: float
    length_u: float
    length_v: float
    length_w: float
    airspeed: float | None
    airspeed_floor: float
    mean: float

    def kwargs(self) -> dict:
        lengths = (self.length_u, self.length_v, self.length_w)
        turbulence = DrydenTurbulence(
            self.sigma,
            self.sigma,
            self.sigma,
            *lengths,
            airspeed=self.airspeed,
            airspeed_floor=self.airspeed_floor,
        )
        return {"turbulence": turbulence, "wind": (self.mean, 0.0)}


turbulences = st.one_of(
    st.builds(
        _Dryden,
        sigma=st.sampled_from([0.0, 1.0, 1e3]),
        length_u=scales,
        length_v=scales,
        length_w=scales,
        airspeed=st.one_of(st.none(), scales),
        airspeed_floor=scales,
        mean=st.one_of(st.sampled_from([0.0, 3.2, 1e3, 1e6, 1e300]), st.floats(0.0, 1e308)),
    ),
    values,
)
#: the strategies of the arguments that take more than a number or a name, or a scale
VALUES = {"preview": previews, "turbulence": turbulences, "wind_tau": scales}

#: what each fuzzed argument's error message must mention
ARGUMENTS = {
    "payload": "payload",
    "wind": "wind",
    "trajectory": "trajectory",
    "ground_effect": "ground_effect",
    "control_hz": "control_hz",
    "physics_hz": "physics_hz",
    "episode_s": "episode_s",
    "action_mode": "action_mode",
    "render_mode": "render_mode",
    "wind_tau": "wind_tau",
    "wind_direction": "wind_direction",
    "seed": "seed",
    "max_tilt": "max_tilt",
    "crash_speed": "crash_speed",
    "max_position_error": "max_position_error",
    "max_body_rate": "max_body_rate",
    "k_rate": "k_rate",
    "reward_weights": "eward",  # reward_weights / RewardWeights
    "pos_noise": "noise",
    "vel_noise": "noise",
    "gyro_noise": "noise",
    "imu_noise": "noise",
    "width": "width",
    "height": "height",
    "drag": "drag",
    "airframe": "airframe",
    "sensor_noise": "sensor_noise",
    "turbulence": "turbulence",
    "imu_bias": "imu_bias",
    "preview": "preview",
}


def _hover_action(env: ResidualQuadEnv) -> np.ndarray:
    return np.full(4, 2.0 * env.airframe.hover_thrust / env.airframe.max_thrust - 1.0)


def _flies_or_flags(env: ResidualQuadEnv, steps: int = 3) -> None:
    """A few hover steps: each observation finite, or the episode ended flagged."""
    obs, _ = env.reset()
    assert np.all(np.isfinite(obs)) or True  # a reset start may lie beyond any bound
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(_hover_action(env))
        if terminated:
            assert info["diverged"] and info["termination"] is not None
            assert math.isfinite(reward)
            return
        assert np.all(np.isfinite(obs)) and math.isfinite(reward)
        if truncated:
            return


def _arguments(name: str, value) -> dict:
    """The constructor arguments of one fuzzed ``value`` of argument ``name`` (a correlation
    time in a gusty wind, which samples its gusts)."""
    if isinstance(value, _Dryden):
        return value.kwargs()
    return {name: value, "wind": "windy"} if name == "wind_tau" else {name: value}


@_settings(120)
@given(data=st.data())
def test_any_constructor_argument_is_refused_clearly_or_flies(data):
    # the arguments with their own strategies (a pair, a DrydenTurbulence: numbers and junk
    # rarely build one) are drawn about half the time
    names = st.one_of(st.sampled_from(sorted(ARGUMENTS)), st.sampled_from(sorted(VALUES)))
    name = data.draw(names, label="name")
    value = data.draw(VALUES.get(name, st.one_of(values, beyond_float)), label="value")
    kwargs = None
    try:
        kwargs = _arguments(name, value)
        env = ResidualQuadEnv(**kwargs)
    except ValueError as err:
        assert ARGUMENTS[name] in str(err), str(err)
        if kwargs is not None:  # built, refused by the env: the config refuses it alike
            with pytest.raises(ValueError) as config_err:
                EnvConfig(**kwargs)
            # the same message, but for the addresses of objects the config holds as copies
            assert _ADDRESS.sub("0x…", str(config_err.value)) == _ADDRESS.sub("0x…", str(err))
        return
    EnvConfig(**kwargs)  # builds as the env did
    _flies_or_flags(env)


@_settings(80)
@given(name=st.sampled_from(sorted(VALUES)), data=st.data())
def test_any_extreme_scale_is_refused_at_construction_or_flies_in_both_envs(name, data):
    """Extreme scales (a preview's dt up to 1.8e308 s, turbulence lengths and airspeeds from the
    least subnormal to the largest float, a mean wind sweeping it at 1e300 m/s, a gust
    correlation time ``wind_tau`` from the least subnormal to the largest float, integers beyond
    the float range) are refused when the env is built, naming the argument, or the single and
    the vector env reset and fly: never an OverflowError or ZeroDivisionError at reset."""
    kwargs = None
    try:
        kwargs = _arguments(name, data.draw(VALUES[name], label="value"))
        env = ResidualQuadEnv(**kwargs)
    except ValueError as err:
        assert ARGUMENTS[name] in str(err), str(err)
        if kwargs is not None:  # built, refused by the env: the vector env refuses it too
            with pytest.raises(ValueError, match=ARGUMENTS[name]):
                ResidualQuadVectorEnv(2, nthread=1, **kwargs)
        return
    _flies_or_flags(env)
    venv = ResidualQuadVectorEnv(2, nthread=1, **kwargs)
    obs, _ = venv.reset(seed=0)
    obs, *_ = venv.step(np.tile(_hover_action(env), (2, 1)))
    assert obs.shape == (2, env.obs_dim)
    venv.close()


@_settings(60)
@given(
    payload=st.one_of(st.sampled_from(["none", "extra"]), st.floats(0.0, 1e9)),
    mean=st.floats(0.0, 1e3),
    sigma=st.floats(0.0, 1e2),
    control_hz=st.sampled_from([1.0, 50.0, 100.0, 250.0]),
    substeps=st.integers(1, 8),
    episode_s=st.floats(0.0, 30.0),
)
def test_any_valid_setting_flies_or_ends_flagged(
    payload, mean, sigma, control_hz, substeps, episode_s
):
    try:
        env = ResidualQuadEnv(
            payload=payload,
            wind=(mean, sigma),
            control_hz=control_hz,
            physics_hz=control_hz * substeps,
            episode_s=episode_s,
        )
    except ValueError as err:  # only a too short episode is refused here
        assert "episode_s" in str(err) and episode_s < 1.0 / control_hz
        return
    _flies_or_flags(env)


option_values = st.one_of(
    values,
    st.lists(numbers, min_size=3, max_size=3),
    hnp.arrays(np.float64, st.sampled_from([(3,), (2,), (3, 1)]), elements=numbers),
)


@_settings(100)
@given(
    options=st.dictionaries(
        st.one_of(st.sampled_from(RESET_OPTIONS), st.text(max_size=4)),
        option_values,
        max_size=3,
    )
)
def test_any_reset_option_is_refused_clearly_or_flies(options):
    env = ResidualQuadEnv(trajectory="helix")
    try:
        env.reset(seed=0, options=options)
    except ValueError as err:
        assert any(key in str(err) for key in (*RESET_OPTIONS, "reset options")), str(err)
        return
    for _ in range(3):
        obs, reward, terminated, _, info = env.step(_hover_action(env))
        if terminated:
            assert info["diverged"] and info["termination"] is not None
            return
        assert np.all(np.isfinite(obs)) and math.isfinite(reward)


@_settings(60)
@given(
    velocity=st.lists(st.floats(-1e12, 1e12), min_size=3, max_size=3),
    offset=st.lists(st.floats(-1e12, 1e12), min_size=3, max_size=3),
    yaw=st.floats(-1e6, 1e6),
)
def test_any_finite_start_flies_or_ends_flagged_with_a_controller(velocity, offset, yaw):
    """Finite but absurd starts never raise inside the controller or the env."""
    result = run_episode(
        "geo",
        trajectory="helix",
        episode_s=0.3,
        reset_options={"velocity": velocity, "position_offset": offset, "yaw_offset": yaw},
    )
    assert result.diverged or np.all(np.isfinite(result.pos))


dtypes = st.one_of(
    hnp.floating_dtypes(),
    hnp.integer_dtypes(),
    hnp.unsigned_integer_dtypes(),
    hnp.complex_number_dtypes(),
    hnp.boolean_dtypes(),
    hnp.unicode_string_dtypes(max_len=3),
    st.just(np.dtype(object)),
)
actions = st.one_of(
    hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)),
    hnp.arrays(np.float64, (4,), elements=numbers),
    st.lists(values, min_size=0, max_size=5),
    values,
)


@_settings(150)
@given(action=actions)
def test_any_action_is_refused_clearly_or_stepped(action):
    env = ResidualQuadEnv()
    env.reset(seed=0)
    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except ValueError as err:
        assert "action" in str(err)
        return
    assert np.all(np.isfinite(obs)) and math.isfinite(reward)
    assert terminated == info["diverged"]


class _Fuzzed(Trajectory):
    """Returns ``value`` at every time."""

    def __init__(self, value):
        self.value = value

    def __call__(self, t):
        return self.value


field_values = st.one_of(
    hnp.arrays(
        st.sampled_from([np.float64, np.float32, np.int64, np.complex128, np.dtype("U2")]),
        st.sampled_from([(3,), (2,), (3, 1), ()]),
    ),
    hnp.arrays(np.float64, (3,), elements=numbers),
    values,
)
references = st.one_of(
    st.builds(Reference, field_values, field_values, field_values, values, values),
    st.builds(
        Reference,
        hnp.arrays(np.float64, (3,), elements=numbers),
        st.just(np.zeros(3)),
        st.just(np.zeros(3)),
        numbers,
        numbers,
    ),
    st.tuples(field_values, field_values, field_values, values),
    values,
)


@_settings(100)
@given(ref=references)
def test_any_custom_trajectory_is_refused_clearly_or_flies(ref):
    env = ResidualQuadEnv(trajectory=_Fuzzed(ref))
    try:
        env.reset(seed=0)
    except (TypeError, ValueError) as err:
        assert "trajectory _Fuzzed" in str(err), str(err)
        return
    _flies_or_flags(env)


@pytest.mark.parametrize("bad_at", [0.02, 0.05])
@_settings(40)
@given(bad=references)
def test_a_trajectory_going_wrong_mid_episode_is_named_or_flagged(bad_at, bad):
    good = Reference(np.array([0.0, 0.0, 1.5]), np.zeros(3), np.zeros(3), 0.0)

    class Late(Trajectory):
        def __call__(self, t):
            return good if t < bad_at else bad

    env = ResidualQuadEnv(trajectory=Late())
    env.reset(seed=0)
    try:
        for _ in range(8):
            obs, reward, terminated, _, info = env.step(_hover_action(env))
            if terminated:
                assert info["diverged"] and math.isfinite(reward)
                return
            assert np.all(np.isfinite(obs)) and math.isfinite(reward)
    except (TypeError, ValueError) as err:
        assert "trajectory Late" in str(err), str(err)
