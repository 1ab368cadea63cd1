"""Rotor lag, command and sensor latency and the plant presets: analytic responses, exact shifts,
single env == vector env, bad input."""

from __future__ import annotations

import math
import warnings

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.envs.imu_bias import ImuBias
from residual_quad.envs.latency import SENSED, delay_step, hover_action
from residual_quad.envs.model import build_model
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.plant import QuadrotorPlant
from residual_quad.envs.presets import PRESETS, PlantOptions, plant_options
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

NOT_SENSED = np.setdiff1d(np.arange(36), SENSED)


# ---------------------------------------------------------------- rotor lag
@pytest.mark.parametrize("tau", [0.02, 0.05, 0.08])
def test_rotor_lag_step_response_is_one_minus_exp_at_the_substeps(tau):
    """A unit step of the command: the thrust of substep k is 1 − e^{−(k+1)h/τ} (the continuous
    first-order response at the substep's end), to rounding."""
    model = build_model(physics_hz=500.0, rotor_tau_s=tau)
    data = mujoco.MjData(model)
    model.opt.gravity[:] = 0.0  # the response does not depend on the motion
    data.ctrl[:] = 1.0
    h = model.opt.timestep
    for k in range(100):
        mujoco.mj_step(model, data)
        expected = 1.0 - math.exp(-(k + 1) * h / tau)
        np.testing.assert_allclose(data.actuator_force, expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(data.act, expected, rtol=0, atol=1e-12)


def test_rotor_lag_time_constant_is_tau():
    """After τ the thrust has covered 1 − 1/e of a step, after 3τ 1 − 1/e³ (τ = 50 ms = 25
    substeps at 500 Hz: both land on substeps)."""
    plant = QuadrotorPlant(rotor_tau_s=0.05)
    plant.model.opt.gravity[:] = 0.0
    plant.reset(np.random.default_rng(0), np.array([0.0, 0.0, 50.0]), 0.0)
    f0, f1 = plant.command.copy(), np.full(4, 5.0)
    fractions = []
    for _ in range(15):  # 15 periods of 10 ms
        plant.step(f1)
        fractions.append((plant.thrusts - f0) / (f1 - f0))
    np.testing.assert_allclose(fractions[4], 1 - math.exp(-1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(fractions[14], 1 - math.exp(-3), rtol=0, atol=1e-12)
    assert np.array_equal(plant.command, f1)  # the command is what was asked


def test_rotor_lag_off_is_the_stateless_model():
    assert build_model().na == 0 and QuadrotorPlant().model.na == 0
    env = ResidualQuadEnv()
    assert env.plant.model.na == 0 and env.plant_options == PlantOptions()


def test_lagged_rotors_start_at_hover_and_ground_effect_scales_the_lagged_thrust():
    """At reset the rotors hold hover (no spin-up transient); near the floor the actuator force
    is the ground-effect gain times the lagged thrust (the gain is not filtered)."""
    env = ResidualQuadEnv(rotor_tau_s=0.06)
    _, info = env.reset(seed=0, options={"position_offset": [0.0, 0.0, -1.35]})
    np.testing.assert_array_equal(info["rotor_thrusts"], np.full(4, env.airframe.hover_thrust / 4))
    _, _, _, _, info = env.step(np.full(4, 0.2))
    d = env.plant.data
    assert info["ground_gain"] > 1.02
    np.testing.assert_array_equal(info["rotor_thrusts"], d.act)
    np.testing.assert_allclose(d.actuator_force, info["ground_gain"] * d.act, rtol=1e-14, atol=0)


# ---------------------------------------------------------------- latency
def test_delay_step_is_a_shift():
    line = np.zeros((2, 3, 1))
    line[:] = -1.0
    out = [delay_step(line, slice(None), np.full((2, 1), float(t))) for t in range(6)]
    assert [o[0, 0] for o in out] == [-1.0, -1.0, -1.0, 0.0, 1.0, 2.0]
    assert delay_step(np.zeros((2, 0, 1)), slice(None), np.ones((2, 1))) is not None


@pytest.mark.parametrize("mode", ["rotor", "ctbr"])
@pytest.mark.parametrize("k", [1, 3])
def test_command_latency_is_an_exact_shift_of_the_actions(mode, k):
    """An env with a delay of k flies exactly what an undelayed env flies when given the hover
    action k times and then the same actions: equal observations and info, bit for bit."""
    rng = np.random.default_rng(1)
    actions = rng.uniform(-0.25, 0.05, (40, 4))
    if mode == "ctbr":
        actions[:, 0] = rng.uniform(-0.3, -0.1, 40)
    kw = dict(wind="windy", trajectory="helix", payload="light", action_mode=mode)
    delayed = ResidualQuadEnv(action_delay_steps=k, **kw)
    plain = ResidualQuadEnv(**kw)
    hover = hover_action(plain.action_mapping, plain.airframe.hover_thrust)
    shifted = np.vstack([np.tile(hover, (k, 1)), actions[:-k]])
    o1, _ = delayed.reset(seed=4)
    o2, _ = plain.reset(seed=4)
    assert np.array_equal(o1, o2)
    for t in range(len(actions)):
        o1, _, _, _, i1 = delayed.step(actions[t])
        o2, _, _, _, i2 = plain.step(shifted[t])
        assert np.array_equal(o1, o2), t
        assert np.array_equal(i1["rotor_thrusts"], i2["rotor_thrusts"])
        assert i1["position_error"] == i2["position_error"]
    if mode == "rotor":  # the hover action commands hover
        np.testing.assert_allclose(
            (hover + 1.0) * plain.airframe.max_rotor_thrust / 2, plain.airframe.hover_thrust / 4
        )


@pytest.mark.parametrize("k", [1, 2])
def test_sensor_latency_is_an_exact_shift_of_the_sensed_fields(k):
    """The sensed fields (with their noise) are those of k steps earlier (the reset
    observation's before that), reference and thrusts current; reward and info unchanged."""
    rng = np.random.default_rng(2)
    actions = rng.uniform(-0.25, 0.05, (30, 4))
    kw = dict(wind="breezy", trajectory="figure8", pos_noise=0.01, gyro_noise=0.02)
    delayed = ResidualQuadEnv(obs_delay_steps=k, **kw)
    plain = ResidualQuadEnv(**kw)
    seq = [plain.reset(seed=9)[0]]
    got = [delayed.reset(seed=9)[0]]
    for a in actions:
        o2, r2, _, _, i2 = plain.step(a)
        o1, r1, _, _, i1 = delayed.step(a)
        seq.append(o2)
        got.append(o1)
        assert r1 == r2 and i1["position_error"] == i2["position_error"]
    for t in range(len(seq)):
        assert np.array_equal(got[t][SENSED], seq[max(t - k, 0)][SENSED]), t
        assert np.array_equal(got[t][NOT_SENSED], seq[t][NOT_SENSED]), t
    assert np.array_equal(delayed.last_true_observation, plain.last_true_observation)


def test_sensed_fields_are_the_measured_ones():
    want = np.r_[L.pos, L.vel, L.rot, L.omega_b, L.imu]
    assert np.array_equal(SENSED, want)
    assert not set(SENSED) & set(np.r_[L.ref_pos, L.ref_vel, L.ref_acc, L.thrusts].tolist())


# ---------------------------------------------------------------- presets
def test_realistic_preset_values_and_the_override_rule():
    env = ResidualQuadEnv(preset="realistic")
    opts = env.plant_options
    assert opts == PRESETS["realistic"]
    assert opts.rotor_tau_s >= 0.05 and opts.action_delay_steps >= 1 and opts.obs_delay_steps >= 1
    assert env.plant.model.na == 4
    np.testing.assert_array_equal(env.plant.model.actuator_dynprm[:, 0], opts.rotor_tau_s)
    assert env.sensors.imu_bias == ImuBias.from_spec(opts.imu_bias) != ImuBias()
    over = ResidualQuadEnv(preset="realistic", rotor_tau_s=0.0, obs_delay_steps=0, imu_bias={})
    assert over.plant_options == PlantOptions(0.0, opts.action_delay_steps, 0, opts.imu_bias)
    assert over.plant.model.na == 0
    assert over.sensors.imu_bias == ImuBias()  # the explicit (zero) bias overrides the preset's
    assert plant_options("ideal") == plant_options(None) == PlantOptions()


@pytest.mark.parametrize("preset", ["Realistic", "real", "", 1, ("realistic",)])
def test_unknown_preset_lists_the_valid_ones(preset):
    with pytest.raises(ValueError, match="preset.*ideal, realistic"):
        ResidualQuadEnv(preset=preset)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["action_delay_steps", "obs_delay_steps"]),
    value=st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=1001),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=3),
    ),
)
def test_bad_delays_are_value_errors_naming_them(name, value):
    with pytest.raises(ValueError, match=name):
        plant_options(**{name: value})


@pytest.mark.parametrize("tau", [-0.01, math.nan, math.inf, 11.0, "0.05", True, [0.05]])
def test_bad_rotor_tau_is_a_value_error_naming_it(tau):
    with pytest.raises(ValueError, match="rotor_tau_s"):
        ResidualQuadEnv(rotor_tau_s=tau)


@pytest.mark.parametrize("mode", ["rotor", "ctbr"])
def test_check_env_is_clean_with_the_realistic_preset(mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(ResidualQuadEnv(preset="realistic", action_mode=mode), skip_render_check=True)


# ---------------------------------------------------------------- single env == vector env
SCENARIOS = [
    {"payload": "heavy", "wind": "windy", "trajectory": "helix"},
    {"payload": "extra", "wind": "breezy", "trajectory": "figure8"},
    # in the ground-effect and contact band, sinking: the per-env plant path and the gain
    {"payload": "light", "options": {"position_offset": [0, 0, -1.2], "velocity": [0, 0, -0.3]}},
]


@pytest.mark.parametrize(
    "option",
    [
        {"rotor_tau_s": 0.06},
        {"rotor_tau_s": 0.03, "ground_effect": False},
        {"action_delay_steps": 2},
        {"obs_delay_steps": 2, "pos_noise": 0.01},
        {"preset": "realistic"},
        {"preset": "realistic", "action_mode": "ctbr"},
    ],
)
def test_vector_env_equals_single_envs_with_the_option(option):
    """Same seeds: flags, info's rotor thrusts and ground gain and the observations bit for bit
    (the accelerometer, the batched ``Δv/Δt``, to 1e-9), rewards to 1e-12 (as without options:
    the batched reward's arithmetic)."""
    n, steps = len(SCENARIOS), 60
    rng = np.random.default_rng(5)
    actions = rng.uniform(-0.3, 0.0, (steps, n, 4))
    vec = ResidualQuadVectorEnv(n, scenarios=SCENARIOS, nthread=1, episode_s=0.5, **option)
    singles = [
        ResidualQuadEnv(**{k: v for k, v in s.items() if k != "options"}, episode_s=0.5, **option)
        for s in SCENARIOS
    ]
    obs, _ = vec.reset(seed=3)
    for i, env in enumerate(singles):
        o, _ = env.reset(seed=3 + i, options=SCENARIOS[i].get("options"))
        assert np.array_equal(o, obs[i])
    imu = np.r_[L.imu]
    other = np.setdiff1d(np.arange(36), imu)
    done = [False] * n
    for t in range(steps):
        obs, rew, term, trunc, info = vec.step(actions[t])
        for i, env in enumerate(singles):
            if done[i]:
                o, _ = env.reset(options=SCENARIOS[i].get("options"))
                done[i] = False
                assert np.array_equal(o[other], obs[i][other]), (t, i)
                continue
            o, r, te, tr, inf = env.step(actions[t][i])
            done[i] = te or tr
            assert np.array_equal(o[other], obs[i][other]), (t, i)
            np.testing.assert_allclose(o[imu], obs[i][imu], rtol=0, atol=1e-9)
            assert abs(r - rew[i]) <= 1e-12 and (te, tr) == (term[i], trunc[i]), (t, i)
            assert np.array_equal(inf["rotor_thrusts"], info["rotor_thrusts"][i]), (t, i)
            assert inf["ground_gain"] == info["ground_gain"][i]
    vec.close()
