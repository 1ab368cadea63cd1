"""Events during an episode: known answers of each effect, bad input, and the vector env equal to
the single env."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from residual_quad.controllers import make_controller
from residual_quad.envs.events import (
    EVENT_KINDS,
    PayloadEvent,
    RotorEvent,
    WindEvent,
    parse_events,
    ramp,
)
from residual_quad.envs.model import build_model
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

G = 9.81  # m/s²
HOVER = np.full(4, 2.0 * 0.95 * G / 4 / 6.0 - 1.0)  # rotor action of the nominal hover thrust
ALL_EVENTS = (
    {"kind": "wind", "t_s": 0.05, "mean_mps": [2.0, -1.0, 0.5], "rise_s": 0.1},
    {"kind": "rotor", "t_s": 0.1, "rotor": 2, "efficiency": 0.6},
    {"kind": "payload", "t_s": 0.15, "mass_kg": 0.5},
    {"kind": "payload", "t_s": 0.3, "mass_kg": 0.1},  # a partial drop
    {"kind": "wind", "t_s": 0.35, "mean_mps": [0.0, 0.0, 0.0], "rise_s": 0.0},  # a step
)


def _fly_hover(env, steps, ctrl="geo", seed=0):
    """Fly ``ctrl`` for ``steps`` steps; the commanded rotor thrusts (N) and infos per step."""
    controller = make_controller(ctrl, env)
    controller.reset(seed)
    obs, _ = env.reset(seed=seed)
    thrusts, infos = [], []
    for _ in range(steps):
        obs, _, term, _, info = env.step(controller.policy(obs))
        assert not term
        thrusts.append(obs[L.thrusts])
        infos.append(info)
    return np.array(thrusts), infos


# ----------------------------------------------------------------------------------- known answers
MODEL_FIELDS = (
    "body_mass",
    "body_inertia",
    "body_ipos",
    "body_iquat",
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "dof_M0",
)


@pytest.mark.parametrize("mass", [0.1, 0.3, 0.5, 0.75, 1.7])
def test_payload_event_gives_the_model_of_that_payload_and_reset_restores_it(mass):
    """Mass and inertia consistent: the model after the event is, bit for bit, the model MuJoCo
    compiles with that payload."""
    env = ResidualQuadEnv(events=[PayloadEvent(t_s=0.0, mass_kg=mass)])
    env.reset(seed=0)
    env.step(HOVER)
    built = build_model(payload_kg=mass)
    model = env.plant.model
    for name in MODEL_FIELDS:
        assert getattr(model, name).tolist() == getattr(built, name).tolist(), name
    assert env.plant.true_mass == pytest.approx(0.95 + mass, abs=1e-12)
    _, info = env.reset(seed=0)
    assert (info["payload_kg"], info["true_mass"], info["events_fired"]) == (0.0, 0.95, 0)
    assert model.body_mass[model.body("payload").id] == 0.0


def test_hover_thrust_goes_from_m_g_to_m_plus_dm_g_after_a_pickup():
    """At steady hover the rotors carry the weight: ΣT·ground_gain = M·g, before and after."""
    env = ResidualQuadEnv(episode_s=14.0, events=[{"kind": "payload", "t_s": 5.0, "mass_kg": 0.5}])
    thrusts, infos = _fly_hover(env, 1400)
    gain = np.array([i["ground_gain"] for i in infos])
    lift = thrusts.sum(axis=1) * gain  # N
    assert lift[400:500].mean() == pytest.approx(0.95 * G, rel=2e-3)
    assert lift[1300:1400].mean() == pytest.approx(1.45 * G, rel=2e-3)
    assert infos[499]["payload_kg"] == 0.0 and infos[500]["payload_kg"] == 0.5


def test_rotor_fault_scales_the_actual_rotor_force_and_the_mixer_compensates():
    """Steady hover needs zero torque: with the X frame that means equal *actual* thrusts, so the
    commanded thrust of the weak rotor is 1/efficiency times the others'."""
    env = ResidualQuadEnv(episode_s=12.0, events=[RotorEvent(t_s=3.0, rotor=1, efficiency=0.7)])
    thrusts, infos = _fly_hover(env, 1200)
    assert infos[-1]["rotor_efficiency"].tolist() == [1.0, 0.7, 1.0, 1.0]
    # what MuJoCo applied over the last substep: gain · efficiency · command
    data = env.plant.data
    gain = infos[-1]["ground_gain"]
    np.testing.assert_allclose(
        data.actuator_force, gain * np.array([1, 0.7, 1, 1]) * data.ctrl, rtol=1e-15
    )
    steady = thrusts[1100:].mean(axis=0)
    actual = steady * np.array([1.0, 0.7, 1.0, 1.0])
    np.testing.assert_allclose(actual, np.full(4, actual.mean()), rtol=3e-3)
    assert steady[1] / steady[0] == pytest.approx(1 / 0.7, rel=3e-3)


def test_wind_step_ramps_with_the_1_cosine_and_reaches_b_after_the_rise_time():
    rise = 0.5  # s
    env = ResidualQuadEnv(
        wind=(2.0, 0.0),
        events=[WindEvent(t_s=0.1, mean_mps=(-1.0, 3.0, 0.0), rise_s=rise)],
    )
    env.reset(seed=0)
    means = [env.step(np.zeros(4))[4]["mean_wind"] for _ in range(70)]
    a, b = np.array([2.0, 0.0, 0.0]), np.array([-1.0, 3.0, 0.0])
    # info after step k: the mean at the last substep of period k - 1, substep 5k - 1 since reset
    for k, mean in enumerate(means, start=1):
        u = (5 * k - 1 - 50) / (rise * 500)
        np.testing.assert_allclose(mean, a + (b - a) * ramp(np.array(u)), rtol=0, atol=1e-15)
    assert means[9].tolist() == a.tolist()
    assert means[10 + 50].tolist() == b.tolist()  # reached one rise time after the event
    assert ramp(np.array(0.5)) == pytest.approx(0.5, abs=1e-16)


def test_wind_is_the_mean_plus_the_gusts():
    env = ResidualQuadEnv(
        wind=(0.0, 0.0), events=[WindEvent(t_s=0.0, mean_mps=(1.0, 2.0, 3.0), rise_s=0.0)]
    )
    env.reset(seed=0)
    info = env.step(np.zeros(4))[4]
    assert info["wind"].tolist() == info["mean_wind"].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(("t_s", "control_hz"), [(0.3, 100.0), (0.7, 100.0), (5.0, 100.0)])
@pytest.mark.parametrize("kind", EVENT_KINDS)
def test_an_event_on_a_control_step_boundary_fires_on_that_step(t_s, control_hz, kind):
    spec = {
        "payload": {"kind": "payload", "mass_kg": 0.25},
        "wind": {"kind": "wind", "mean_mps": [1.0, 0.0, 0.0], "rise_s": 0.0},
        "rotor": {"kind": "rotor", "rotor": 0, "efficiency": 0.5},
    }[kind]
    env = ResidualQuadEnv(control_hz=control_hz, events=[{**spec, "t_s": t_s}], episode_s=6.0)
    env.reset(seed=0)
    boundary = round(t_s * control_hz)  # the period that starts at t_s
    fired = [env.step(HOVER)[4]["events_fired"] for _ in range(boundary + 1)]
    assert fired[boundary - 1] == 0 and fired[boundary] == 1


def test_events_that_have_not_fired_change_nothing():
    """Rotor and wind events leave the flight bit for bit as without them until they fire."""
    late = [RotorEvent(t_s=19.0, rotor=0, efficiency=0.5), WindEvent(19.0, (1.0, 1.0, 0.0))]
    a = ResidualQuadEnv(wind="windy", trajectory="helix", events=late)
    b = ResidualQuadEnv(wind="windy", trajectory="helix")
    ctrl = make_controller("geo", a)
    oa, _ = a.reset(seed=4)
    ob, _ = b.reset(seed=4)
    for _ in range(150):
        act = ctrl.policy(oa)
        oa, ra, *_ = a.step(act)
        ob, rb, *_ = b.step(act)
        assert oa.tolist() == ob.tolist() and ra == rb


# ----------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("events", "match"),
    [
        ([{"kind": "gust", "t_s": 1.0}], "valid choices: payload, wind, rotor"),
        ([{"t_s": 1.0}], "valid choices: payload, wind, rotor"),
        ([{"kind": "payload", "t_s": 1.0, "mass_kg": -0.1}], "mass_kg"),
        ([{"kind": "payload", "t_s": 1.0}], "missing field"),
        ([{"kind": "payload", "t_s": 1.0, "mass_kg": 0.1, "where": 2}], "unknown field"),
        ([{"kind": "rotor", "t_s": 1.0, "rotor": 4, "efficiency": 0.5}], "rotor event rotor"),
        ([{"kind": "rotor", "t_s": 1.0, "rotor": 1, "efficiency": 0.0}], "efficiency"),
        ([{"kind": "rotor", "t_s": 1.0, "rotor": 1, "efficiency": 1.2}], "efficiency"),
        ([{"kind": "rotor", "t_s": 1.0, "rotor": True, "efficiency": 0.5}], "rotor event rotor"),
        ([{"kind": "wind", "t_s": 1.0, "mean_mps": [1.0, 2.0]}], "mean_mps"),
        ([{"kind": "wind", "t_s": 1.0, "mean_mps": [1, 0, 0], "rise_s": -1}], "rise_s"),
        ([{"kind": "wind", "t_s": math.nan, "mean_mps": [1, 0, 0]}], "t_s"),
        ([{"kind": "payload", "t_s": -0.5, "mass_kg": 0.1}], "t_s"),
        ([{"kind": "payload", "t_s": 20.0, "mass_kg": 0.1}], r"outside the episode"),
        ("payload", "events must be a list"),
        ([3.0], "an event must be"),
    ],
)
def test_bad_events_are_value_errors_naming_the_field(events, match):
    with pytest.raises(ValueError, match=match):
        ResidualQuadEnv(events=events)


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0.0 < x <= 1.0))
def test_efficiency_outside_zero_one_is_refused(x):
    with pytest.raises(ValueError, match=r"efficiency must be a finite real number in \(0, 1\]"):
        RotorEvent(t_s=1.0, rotor=0, efficiency=x)


def test_dict_and_dataclass_events_parse_alike_and_sort_by_time():
    dicts = [
        {"kind": "rotor", "t_s": 2.0, "rotor": 3, "efficiency": 0.8},
        {"kind": "wind", "t_s": 1.0, "mean_mps": [1, 2, 3]},
    ]
    assert parse_events(dicts, 5.0) == (
        WindEvent(1.0, (1.0, 2.0, 3.0), 1.0),
        RotorEvent(2.0, 3, 0.8),
    )


# ----------------------------------------------------------------------- single env = vector env
SCENARIOS = [
    {"trajectory": "hover"},
    {"trajectory": "helix", "wind": "windy"},
    # starts at 0.3 m, in the contact band: stepped by its own plant, not by rollout
    {"trajectory": "hover", "payload": "light", "options": {"position_offset": [0, 0, -1.2]}},
]


@pytest.mark.parametrize("plant", [{}, {"rotor_tau_s": 0.06}], ids=["ideal", "lagged"])
def test_every_event_flies_the_same_in_the_vector_env_as_in_the_single_env(plant):
    """Rollout envs and an env in the contact band, over an autoreset (the payload restored, the
    events fired again): the events' truth, wind, positions, velocities and rewards exactly; the
    accelerometer to the vector env's 1e-9. With lagged rotors too (each env's rollout model then
    carries its gains: ground effect × rotor efficiency)."""
    n, steps = len(SCENARIOS), 130
    kwargs = {"events": ALL_EVENTS, "episode_s": 0.8, **plant}
    vec = ResidualQuadVectorEnv(n, scenarios=SCENARIOS, nthread=1, **kwargs)
    singles = [
        ResidualQuadEnv(**{k: v for k, v in s.items() if k != "options"}, **kwargs)
        for s in SCENARIOS
    ]
    ctrl = make_controller("geo", singles[0])
    obs, _ = vec.reset(seed=7)
    ref = [
        e.reset(seed=7 + i, options=SCENARIOS[i].get("options"))[0] for i, e in enumerate(singles)
    ]
    np.testing.assert_array_equal(obs, np.array(ref))
    exact = np.r_[L.pos, L.vel, L.rot, L.omega_b, L.thrusts]
    keys = ("payload_kg", "true_mass", "mean_wind", "rotor_efficiency", "events_fired", "wind")
    done = [False] * n
    fired, payload = [], []  # env 0 per step
    for k in range(steps):
        actions = np.array([ctrl.policy(o) for o in obs])
        obs, rew, term, trunc, info = vec.step(actions)
        for i, env in enumerate(singles):
            if done[i]:  # the vector env reset this env (NEXT_STEP autoreset)
                o, inf = env.reset(options=SCENARIOS[i].get("options"))
                r, te, tr = 0.0, False, False
                done[i] = False
            else:
                o, r, te, tr, inf = env.step(actions[i])
                done[i] = te or tr
            assert o[exact].tolist() == obs[i, exact].tolist(), (k, i)
            np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-9)
            assert (r, te, tr) == (rew[i], term[i], trunc[i])
            for key in keys:
                assert np.asarray(inf[key]).tolist() == np.asarray(info[key][i]).tolist(), key
        fired.append(int(info["events_fired"][0]))
        payload.append(float(info["payload_kg"][0]))
    # 80 steps, the autoreset (payload and events back to the start), 49 steps more
    assert (fired[79], fired[80], fired[-1]) == (5, 0, 5)
    assert (payload[79], payload[80], payload[100]) == (0.1, 0.0, 0.5)


def test_envs_with_and_without_events_mix_in_one_vector_env():
    """Per-env events through the scenarios: envs without events batched with envs with them
    fly as their single envs do, bit for bit."""
    rotor = [RotorEvent(0.05, 3, 0.5)]
    scenarios = [
        {"events": ALL_EVENTS},
        {"wind": "windy"},
        {"events": rotor, "trajectory": "helix"},
    ]
    vec = ResidualQuadVectorEnv(3, scenarios=scenarios, nthread=1, episode_s=1.0)
    singles = [ResidualQuadEnv(episode_s=1.0, **s) for s in scenarios]
    ctrl = make_controller("geo", singles[0])
    obs, _ = vec.reset(seed=2)
    ref = np.array([e.reset(seed=2 + i)[0] for i, e in enumerate(singles)])
    assert ref.tolist() == obs.tolist()
    exact = np.r_[L.pos, L.vel, L.rot, L.omega_b, L.thrusts]
    for _ in range(40):
        actions = np.array([ctrl.policy(o) for o in obs])
        obs, rew, _, _, info = vec.step(actions)
        for i, env in enumerate(singles):
            o, r, _, _, inf = env.step(actions[i])
            assert o[exact].tolist() == obs[i, exact].tolist() and r == rew[i]
            assert inf["rotor_efficiency"].tolist() == info["rotor_efficiency"][i].tolist()
    assert info["events_fired"].tolist() == [5, 0, 1]


def test_a_vector_env_without_events_reports_the_same_truth_keys():
    vec = ResidualQuadVectorEnv(2, nthread=1)
    vec.reset(seed=0)
    info = vec.step(np.zeros((2, 4)))[4]
    assert info["rotor_efficiency"].tolist() == [[1.0] * 4] * 2
    assert info["events_fired"].tolist() == [0, 0]
    assert info["mean_wind"].tolist() == [[0.0] * 3] * 2


def test_set_payload_mass_touches_no_flight_state():
    env = ResidualQuadEnv(events=[PayloadEvent(0.05, 0.5)])
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.zeros(4))
    before = np.empty(mujoco.mj_stateSize(env.plant.model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(env.plant.model, env.plant.data, before, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    env.plant.set_payload(0.7)
    after = np.empty_like(before)
    mujoco.mj_getState(env.plant.model, env.plant.data, after, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    assert before.tolist() == after.tolist()
