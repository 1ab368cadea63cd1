"""The INDI attitude loop (``attitude_loop: indi``): its filter, a known answer, one vehicle = a
batch, and a torque disturbance rejected in closed loop where the PD keeps an offset."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal

from residual_quad.controllers import make_controller
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.indi import IndiLoop, butterworth
from residual_quad.controllers.law import one_vehicle
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.events import RotorEvent
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import run_episode

DT = 0.01  # s


def _obs(omega_b, thrusts) -> np.ndarray:
    obs = np.zeros(OBS_DIM)
    obs[L.rot] = np.eye(3).ravel()
    obs[L.omega_b] = omega_b
    obs[L.thrusts] = thrusts
    return obs


@pytest.mark.parametrize("hz", [2.0, 8.0, 30.0])
def test_the_filter_is_scipys_butterworth(hz):
    b, a = butterworth(hz, DT)
    B, A = scipy.signal.butter(2, hz, fs=1.0 / DT)
    np.testing.assert_allclose(b, B, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a, A, rtol=1e-12, atol=1e-15)


def test_a_constant_disturbance_torque_is_followed_as_the_filters_step_response():
    # equal thrusts (no applied torque), a rate growing about x only (ω × Jω = 0): the whole
    # measured J·ω̇ is a disturbance d; the residual is −d every period, and the estimate is
    # the filter's step response to it, which scipy computes independently
    frame = Airframe()
    loop = IndiLoop(frame, DT, 8.0)
    d = np.array([0.02, 0.0, 0.0])  # N·m, body, the disturbance torque
    alpha = d / np.asarray(frame.inertia)  # rad/s²
    state = one_vehicle(loop.init_state(1))
    estimates = []
    for k in range(60):
        state = loop.update_one(state, _obs(alpha * k * DT, (2.0, 2.0, 2.0, 2.0)))
        estimates.append(state.estimate.copy())
    raw = np.tile(-d, (59, 1))  # the first call only stores the rate
    expected = scipy.signal.lfilter(loop.b, loop.a, raw, axis=0)
    np.testing.assert_allclose(np.array(estimates[1:]), expected, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(estimates[-1], -d, rtol=1e-3)  # settled on the disturbance


def test_the_batch_update_equals_one_vehicle_row_by_row():
    frame = Airframe()
    rng = np.random.default_rng(3)
    for lagged in (False, True):
        loop = IndiLoop(frame, DT, 12.0, lagged=lagged)
        n = 5
        batch = loop.init_state(n)
        singles = [one_vehicle(loop.init_state(1)) for _ in range(n)]
        for k in range(80):
            obs = np.stack(
                [_obs(rng.normal(0.0, 0.5, 3), rng.uniform(1.0, 4.0, 4)) for _ in range(n)]
            )
            if k % 9 == 4:
                obs[k % n, L.omega_b.start] = math.nan  # a bad rate: no difference spans it
            if k == 40:
                obs[1, L.omega_b] = 50.0  # an implausible jump: left out
            batch = loop.update(batch, obs)
            singles = [loop.update_one(s, o) for s, o in zip(singles, obs, strict=True)]
        np.testing.assert_allclose(
            batch.estimate, np.stack([s.estimate for s in singles]), rtol=1e-12, atol=1e-15
        )
        assert batch.rejected.tolist() == [s.rejected for s in singles]
        assert batch.rejected.sum() > 0


def test_a_tracker_with_indi_flies_the_same_as_one_vehicle_or_in_a_batch():
    # 3 envs stepped on the batch's actions, 3 single controllers fed the same observations
    import gymnasium as gym

    envs = [
        gym.make("ResidualQuad-v0", payload=p, wind="windy", trajectory="helix", rotor_tau_s=0.02)
        for p in ("none", "light", "heavy")
    ]
    opts = {"attitude_loop": "indi", "rotor_tau_s": 0.02}
    batch = make_batch_controller("geo_rls", 3, envs[0], **opts)
    singles = [make_controller("geo_rls", envs[0], **opts) for _ in envs]
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    for k in range(200):
        if k == 77:
            obs[2, L.vel.start] = math.nan
        actions = batch.policy_batch(obs)
        one = np.stack([c.policy(o) for c, o in zip(singles, obs, strict=True)])
        np.testing.assert_allclose(actions, one, rtol=0, atol=1e-9)
        obs = np.stack([e.step(a)[0] for e, a in zip(envs, actions, strict=True)])
    for e in envs:
        e.close()


def test_indi_removes_the_tilt_offset_a_weak_rotor_leaves_the_pd():
    # rotor 0 at 80 % from 3 s: a roll/pitch torque the nominal model does not know. The PD
    # holds it with a steady attitude error θ = d/k_R, which the position loop answers with a
    # horizontal offset ≈ g·θ/kp; INDI measures the torque and cancels it (geo has no
    # integrator, so the offset is the attitude loop's alone)
    frame = Airframe()
    event = [RotorEvent(t_s=3.0, rotor=0, efficiency=0.8)]
    kw = dict(payload="none", wind="calm", trajectory="hover", seed=0, episode_s=10.0)
    pd = run_episode("geo", events=event, **kw)
    indi = run_episode(make_controller("geo", attitude_loop="indi"), events=event, **kw)
    late = pd.t >= 8.0
    offset_pd = np.linalg.norm((pd.pos - pd.ref)[late, :2], axis=1).mean()
    offset_indi = np.linalg.norm((indi.pos - indi.ref)[late, :2], axis=1).mean()
    # the prediction: at equilibrium the rotors deliver the hover wrench, so the commands are
    # f = diag(η)⁻¹·M⁻¹·(mg, 0, 0, 0) and the PD commands the torque M·f beyond it, which it
    # holds with the attitude error θ = τ/k_R (roll/pitch; k_R = J·ω_n²)
    M = np.asarray(frame.allocation)
    eta = np.array([0.8, 1.0, 1.0, 1.0])
    f = np.linalg.solve(M, [frame.mass * frame.gravity, 0.0, 0.0, 0.0]) / eta
    torque = (M @ f)[1:3]  # N·m
    theta = np.linalg.norm(torque) / (frame.inertia[0] * 18.0**2)  # rad
    predicted = frame.gravity * theta / 20.0  # m (kp = 20 1/s²)
    assert offset_pd == pytest.approx(predicted, rel=0.1)
    assert offset_indi < 0.1 * offset_pd


@pytest.mark.parametrize("hz", [0.0, -1.0, 50.0, 200.0])
def test_indi_hz_beyond_its_range_is_refused(hz):
    with pytest.raises(ValueError, match="indi_hz"):
        make_controller("geo", attitude_loop="indi", indi_hz=hz)


def test_the_dob_observer_and_indi_are_not_stacked():
    with pytest.raises(ValueError, match="observer=false"):
        make_controller("geo_rls_dob", attitude_loop="indi", observer=True)
    assert not make_controller("geo_rls_dob", attitude_loop="indi").use_observer  # INDI's place
    assert make_controller("geo_rls_dob").use_observer
    lagged = ControlContext(rotor_tau_s=0.06)  # INDI by default: the observer yields
    assert not make_controller("geo_rls_dob", lagged).use_observer
    chosen = make_controller("geo_rls_dob", lagged, observer=True)  # the observer and its PD
    assert chosen.use_observer and chosen.attitude_loop == "pd"


def test_the_adapted_inertia_converges_on_the_vehicles():
    # a vehicle 1.6× heavier in roll/pitch inertia than the nominal model (the extra payload's),
    # excited by random roll and pitch torques under a constant disturbance torque: the
    # filtered increments identify the true inertia; without adaptation it stays nominal
    frame = Airframe()
    J_nom = np.asarray(frame.inertia)
    J_true = J_nom * np.array([1.6, 1.6, 1.0])
    M = np.asarray(frame.allocation)
    rng = np.random.default_rng(7)
    for adapt in (0.0, 0.05):
        loop = IndiLoop(frame, DT, 8.0, adapt=adapt)
        state = one_vehicle(loop.init_state(1))
        omega = np.zeros(3)
        torque = np.zeros(3)
        for k in range(3000):
            if k % 10 == 0:  # a new torque every 0.1 s (roll, pitch)
                torque = np.array([*rng.normal(0.0, 0.05, 2), 0.0])
            thrusts = np.linalg.solve(M, [8.0, *torque])  # N, this torque at 8 N collective
            disturbance = np.array([0.01, -0.02, 0.0])  # N·m, constant
            # one period of J·ω̇ = τ + d − ω × Jω, integrated finely (the rates stay small)
            for _ in range(10):
                omega = (
                    omega
                    + (DT / 10) * (torque + disturbance - np.cross(omega, J_true * omega)) / J_true
                )
            state = loop.update_one(state, _obs(omega.copy(), thrusts))
        if adapt:
            np.testing.assert_allclose(state.inertia[:2], J_true[:2], rtol=0.05)
        else:
            np.testing.assert_array_equal(state.inertia, J_nom)
    # the batch identifies the same inertia row by row
    batch = loop.init_state(2)
    single = one_vehicle(loop.init_state(1))
    rng = np.random.default_rng(8)
    for _ in range(200):
        obs = np.stack([_obs(rng.normal(0.0, 0.3, 3), rng.uniform(1.0, 4.0, 4)) for _ in range(2)])
        batch = loop.update(batch, obs)
        single = loop.update_one(single, obs[1])
    np.testing.assert_allclose(batch.inertia[1], single.inertia, rtol=1e-12)
    np.testing.assert_allclose(batch.estimate[1], single.estimate, rtol=1e-9, atol=1e-15)


def test_indi_adapt_outside_its_range_is_refused():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="indi_adapt"):
            make_controller("geo", attitude_loop="indi", indi_adapt=bad)
