"""The trackers' latency predictor: known answers of its model, its disturbance estimates, the
one-vehicle = batch bits, and the flights it saves behind two periods of latency each way."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.driver import LawBatch
from residual_quad.controllers.latency import DISTURBANCE_GAIN, LatencyPredictor
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import run_episode

FRAME = Airframe()
DT = 0.01  # s


def _hover_obs(z: float = 1.0, vz: float = 0.0) -> np.ndarray:
    obs = np.zeros(OBS_DIM)
    obs[L.z], obs[L.vz] = z, vz
    obs[L.rot] = np.eye(3).ravel()
    obs[L.thrusts] = FRAME.hover_thrust / 4.0
    return obs


def test_at_hover_the_prediction_is_the_observed_state():
    p = LatencyPredictor(FRAME, DT, 1, 1)
    state, out = p.predict(p.init_state(1), _hover_obs()[None])
    assert np.allclose(out[0, L.pos], [0.0, 0.0, 1.0], atol=1e-12)
    assert np.allclose(out[0, L.vel], 0.0, atol=1e-12)
    assert np.allclose(out[0, L.rot], np.eye(3).ravel(), atol=1e-15)
    assert np.allclose(out[0, L.omega_b], 0.0, atol=1e-15)


def test_a_climb_command_is_predicted_as_the_constant_acceleration_it_makes():
    """Ideal rotors, level: 1.2× hover thrust sent over the H = 3 periods gives
    a = 0.2 g up, Δv = a·HΔt and Δz = ½·a·(HΔt)² exactly (the model integrates a constant
    acceleration exactly); the reference moves ahead by the command latency."""
    p = LatencyPredictor(FRAME, DT, obs_delay=1, action_delay=2)
    state = p.init_state(1)
    climb = np.full((1, 4), 1.2 * FRAME.hover_thrust / 4.0)
    for _ in range(3):
        state = p.record(state, climb)
    obs = _hover_obs(z=2.0, vz=0.5)[None]
    obs[0, L.ref_vel], obs[0, L.ref_acc] = [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]
    _, out = p.predict(state, obs)
    a, t = 0.2 * FRAME.gravity, 3 * DT
    assert out[0, L.vz] == pytest.approx(0.5 + a * t, rel=1e-12)
    assert out[0, L.z] == pytest.approx(2.0 + 0.5 * t + 0.5 * a * t * t, rel=1e-12)
    lead = 2 * DT
    assert np.allclose(out[0, L.ref_pos], [lead, 0.5 * 2.0 * lead * lead, 0.0], rtol=1e-12)
    assert np.allclose(out[0, L.ref_vel], [1.0, 2.0 * lead, 0.0], rtol=1e-12)


def test_a_roll_torque_is_predicted_as_the_rotation_it_makes():
    """A differential command about x from rest: the predicted rate is τ/J·HΔt and the tilt
    its integral, the rotation still orthonormal."""
    p = LatencyPredictor(FRAME, DT, 1, 1)
    state = p.init_state(1)
    torque = np.array([0.0, 0.02, 0.0, 0.0])  # N·m about x only
    f = np.linalg.solve(FRAME.allocation, [FRAME.hover_thrust, *torque[1:]])
    for _ in range(2):
        state = p.record(state, f[None])
    _, out = p.predict(state, _hover_obs()[None])
    wdot = 0.02 / FRAME.inertia[0]
    assert out[0, L.omega_b][0] == pytest.approx(wdot * 2 * DT, rel=1e-9)
    R = out[0, L.rot].reshape(3, 3)
    assert np.allclose(R.T @ R, np.eye(3), atol=1e-14)
    assert np.arcsin(R[2, 1]) == pytest.approx(0.5 * wdot * (2 * DT) ** 2, rel=1e-6)


def test_an_unmodelled_force_is_learned_and_predicted():
    """The vehicle sinks at 1 m/s² more than the hover command explains (a heavier vehicle):
    the estimate converges to it at the filter's rate and the prediction includes it."""
    p = LatencyPredictor(FRAME, DT, 1, 1)
    state = p.init_state(1)
    hover = np.full((1, 4), FRAME.hover_thrust / 4.0)
    vz = 0.0
    for _ in range(60):
        state, out = p.predict(state, _hover_obs(vz=vz)[None])
        state = p.record(state, hover)
        vz -= 1.0 * DT
    assert state.accel_dist[0, 2] == pytest.approx(-1.0, abs=(1 - DISTURBANCE_GAIN) ** 58 + 1e-9)
    # the prediction: the observed velocity minus 1 m/s² over the two periods
    assert out[0, L.vz] == pytest.approx(vz + DT - 2 * DT, abs=1e-6)


def test_a_predictor_needs_latency_and_a_tracker_says_so():
    with pytest.raises(ValueError, match="at least one period of latency"):
        LatencyPredictor(FRAME, DT, 0, 0)
    with pytest.raises(ValueError, match="at least one period of latency"):
        make_controller("pid", ControlContext(), predict_latency=True)
    assert make_controller("pid").predictor is None
    lagged = ControlContext(rotor_tau_s=0.06, obs_delay_steps=1, action_delay_steps=1)
    assert make_controller("geo", lagged).predictor.horizon == 2
    assert make_controller("geo", lagged, predict_latency=False).predictor is None


@pytest.mark.parametrize(
    ("name", "options", "exact"),
    [
        ("pid", {"attitude_loop": "pd"}, True),
        ("hnewton", {"attitude_loop": "pd"}, True),
        ("pid", {}, False),
        ("geo_rls", {}, False),
        ("geo_rls_dob", {}, False),
    ],
)
def test_a_batch_with_the_predictor_flies_the_single_trackers_bits(name, options, exact):
    """Closed loop on three latency plants' envs, a NaN row and an autoreset of one env: the
    batch's actions equal the single trackers' — bit for bit with the PD attitude loop, and
    with the defaults there (INDI, the RLS) within their documented 1e-9 row-by-row contracts."""
    kw = {"preset": "realistic", "action_delay_steps": 2, "obs_delay_steps": 1}
    scen = [("none", "windy", "helix"), ("extra", "breezy", "figure8"), ("heavy", "windy", "hover")]
    envs = [ResidualQuadEnv(payload=p, wind=w, trajectory=t, **kw) for p, w, t in scen]
    context = ControlContext.from_env(envs[0])
    assert (context.obs_delay_steps, context.action_delay_steps) == (1, 2)
    batch = make_batch_controller(name, len(envs), context, **options)
    assert isinstance(batch, LawBatch) and batch.predictor.horizon == 3
    singles = [make_controller(name, context, **options) for _ in envs]
    batch.reset_batch([0, 1, 2])
    for i, ctl in enumerate(singles):
        ctl.reset(i)
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    for k in range(150):
        rows = obs.copy()
        if k == 40:
            rows[1, L.pos.start] = np.nan
        got = batch.policy_batch(rows)
        want = np.stack([ctl.policy(o) for ctl, o in zip(singles, rows, strict=True)])
        if exact:
            assert np.array_equal(got, want), k
        else:
            assert np.abs(got - want).max() <= 1e-9, k
        for i, env in enumerate(envs):
            obs[i] = env.step(got[i])[0]
        if k == 90:
            obs[2] = envs[2].reset(seed=7)[0]
            batch.reset_env(2)
            singles[2].reset(7)


def test_the_predictor_flies_two_periods_each_way_where_the_plain_loop_crashes():
    """An 80 ms rotor, two periods of latency each way, extra payload, gusts, helix: ``pid``'s
    defaults (with the predictor) fly; without it the same loop tilts over (the PD attitude loop;
    INDI, a default there too, is measured in docs/controllers.md)."""
    plant = dict(preset="realistic", rotor_tau_s=0.08, action_delay_steps=2, obs_delay_steps=2)
    scenario = dict(payload="extra", wind="windy", trajectory="helix", episode_s=8.0, **plant)
    flown = run_episode("pid:attitude_loop=pd", seed=0, **scenario)
    assert not flown.diverged and flown.rmse < 0.3
    plain = run_episode("pid:attitude_loop=pd,predict_latency=false", seed=0, **scenario)
    assert plain.diverged
