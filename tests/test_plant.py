"""The disturbance plant against known answers: masses, inertias, OU statistics, drag formula."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from residual_quad.envs.airframe import Airframe, allocation_matrix, mix, wrench
from residual_quad.envs.disturbances import (
    PAYLOAD_LEVELS,
    DragModel,
    GroundEffect,
    WindModel,
    WindProcess,
    resolve_payload,
)
from residual_quad.envs.model import BODY, PAYLOAD_BODY, build_model
from residual_quad.envs.plant import QuadrotorPlant


# ------------------------------------------------------------------------------------ payload
@pytest.mark.parametrize("level", list(PAYLOAD_LEVELS))
def test_payload_subtree_mass(level):
    model = build_model(payload_kg=PAYLOAD_LEVELS[level])
    quad = model.body(BODY).id
    assert model.body_subtreemass[quad] == pytest.approx(0.95 + PAYLOAD_LEVELS[level], abs=1e-12)


def test_payload_float_and_negative():
    assert resolve_payload(0.33) == 0.33
    assert resolve_payload("extra") == 0.75
    with pytest.raises(ValueError, match="payload"):
        resolve_payload(-0.2)
    with pytest.raises(ValueError, match="payload"):
        resolve_payload(float("nan"))


def test_payload_inertia_consistent_with_parallel_axis():
    """Composite inertia about the joint COM equals frame + point-ish sphere by Steiner's rule."""
    m_f, m_p, d, r = 0.95, 0.75, 0.10, 0.03
    model = build_model(payload_kg=m_p)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    quad = model.body(BODY).id
    load = model.body(PAYLOAD_BODY).id
    # MuJoCo's view: each body's inertia about its own COM, and its COM position
    assert model.body_mass[load] == pytest.approx(m_p)
    assert model.body_inertia[load] == pytest.approx([0.4 * m_p * r * r] * 3)
    assert model.body_inertia[quad] == pytest.approx([7.5e-3, 7.5e-3, 1.3e-2])
    # composite about the combined COM, by hand
    z_c = -m_p * d / (m_f + m_p)
    ixx = 7.5e-3 + 0.4 * m_p * r * r + m_f * z_c**2 + m_p * (d + z_c) ** 2
    assert data.subtree_com[quad][2] - data.xpos[quad][2] == pytest.approx(z_c)
    # composite from MuJoCo's mass matrix: rotational block of the free joint about the body origin
    M = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, M)
    ixx_origin = M[3, 3]  # about the frame origin, body x axis
    assert ixx_origin == pytest.approx(ixx + (m_f + m_p) * z_c**2, rel=1e-9)
    ratio = ixx / 7.5e-3
    assert 1.5 < ratio < 1.7  # [RES §3.3]: "about 1.6x" for +0.75 kg


# ------------------------------------------------------------------------------------ wind
@pytest.mark.parametrize("dt", [0.1, 0.5])  # s; τ = 1 s
def test_ou_stationary_std_exact_at_any_step(dt):
    model = WindModel(mean=3.2, sigma=1.8, tau=1.0)
    proc = WindProcess(model, dt, np.random.default_rng(123))
    w = proc.take(200_000)
    std = w.std(axis=0)
    assert std[:2] == pytest.approx([1.8, 1.8], rel=0.03)
    assert std[2] == pytest.approx(0.9, rel=0.03)  # vertical scaled by 0.5
    assert w.mean(axis=0) == pytest.approx([3.2, 0.0, 0.0], abs=0.1)
    # lag-1 autocorrelation of the exact discretization is e^{-dt/τ}
    g = w[:, 0] - w[:, 0].mean()
    rho = (g[1:] @ g[:-1]) / (g @ g)
    assert rho == pytest.approx(math.exp(-dt), abs=0.01)


def test_wind_block_boundaries_do_not_change_the_sequence():
    model = WindModel(mean=1.5, sigma=0.9, tau=2.0)
    a = WindProcess(model, 0.002, np.random.default_rng(5), block=500, chunk=5).take(5)
    b = WindProcess(model, 0.002, np.random.default_rng(5), block=7).take(5)
    assert np.allclose(a[0], b[0])  # same stationary start from the same generator


def test_wind_levels_and_custom():
    assert WindModel.from_spec("windy").mean == 3.2
    assert WindModel.from_spec((2.0, 0.5)).sigma == 0.5
    with pytest.raises(ValueError, match="calm, breezy, windy"):
        WindModel.from_spec("gale")
    with pytest.raises(ValueError, match="mean, sigma"):
        WindModel.from_spec((1.0,))


# ------------------------------------------------------------------------------------ drag
def test_drag_opposes_air_relative_velocity():
    drag = DragModel()
    rng = np.random.default_rng(0)
    for _ in range(100):
        v = rng.normal(size=3) * 5.0
        f = drag.body_force(v)
        assert f @ v < 0.0
        for i in range(3):
            assert f[i] * v[i] <= 0.0  # each axis opposes its own component


def test_drag_magnitude_at_10_mps_matches_formula():
    drag = DragModel()
    fx = drag.body_force(np.array([10.0, 0.0, 0.0]))
    assert fx == pytest.approx([-(0.055 * 100 + 0.020 * 10), 0.0, 0.0])
    fz = drag.body_force(np.array([0.0, 0.0, -10.0]))
    assert fz == pytest.approx([0.0, 0.0, 0.090 * 100 + 0.020 * 10])
    # ≈ 60 % of the nominal weight horizontally at 10 m/s
    assert -fx[0] / (0.95 * 9.81) == pytest.approx(0.61, abs=0.02)
    v = np.array([6.0, 8.0, 0.0])  # |v_h| = 10 couples the horizontal axes
    assert drag.body_force(v)[:2] == pytest.approx(-(0.055 * 10 + 0.02) * v[:2])


def _plant(**kw):
    plant = QuadrotorPlant(**kw)
    plant.reset(np.random.default_rng(0), np.array([0.0, 0.0, 5.0]), 0.3)
    return plant


def test_plant_assigns_drag_in_world_frame_every_substep():
    """The applied force equals the formula for the last substep's state (not a sum)."""
    plant = _plant(ground_effect=None)
    plant.data.qvel[0:3] = [10.0, -3.0, 1.0]
    plant.step(np.full(4, 2.33))
    d = plant.data
    # recompute for the state at the start of the last substep from the stored force
    f = d.xfrc_applied[plant.body_id, 0:3]
    assert np.array_equal(f, plant.drag_force)
    # formula check on the current state (one substep later, so only approximately equal)
    R = d.xmat[plant.body_id].reshape(3, 3)
    expected = R @ plant.drag.body_force(R.T @ d.qvel[0:3])
    assert f == pytest.approx(expected, rel=0.02)
    assert np.linalg.norm(f) < 7.0  # one substep's worth, ~5.7 N, not five accumulated


def test_plant_drag_on_a_velocity_step_decelerates_at_formula_rate():
    plant = _plant(ground_effect=None)
    plant.data.qvel[0:3] = [10.0, 0.0, 0.0]
    hover = np.full(4, plant.airframe.hover_thrust / 4)
    v0 = plant.data.qvel[0]
    plant.step(hover)
    decel = (plant.data.qvel[0] - v0) / plant.control_dt
    assert decel == pytest.approx(-(0.055 * 100 + 0.2) / 0.95, rel=0.02)


# ------------------------------------------------------------------------------------ ground
def test_ground_effect_gain():
    ge = GroundEffect(rotor_radius=0.127, max_gain=1.5)
    assert ge.gain(10.0) == pytest.approx(1.0, abs=1e-4)
    assert ge.gain(0.3) == pytest.approx(1.0 / (1.0 - (0.127 / 1.2) ** 2))
    assert ge.gain(0.01) == 1.5
    assert ge.gain(0.2) > ge.gain(0.4) > 1.0


def test_ground_effect_raises_thrust_near_floor():
    plant = QuadrotorPlant(ground_effect=GroundEffect())
    plant.reset(np.random.default_rng(0), np.array([0.0, 0.0, 0.12]), 0.0)
    hover = np.full(4, plant.airframe.hover_thrust / 4)
    plant.step(hover)
    assert plant.ground_gain > 1.05
    assert plant.data.qvel[2] > 0.0  # nominal hover thrust climbs in ground effect


# ------------------------------------------------------------------------------------ mixer
def test_mixer_round_trip_and_saturation():
    frame = Airframe()
    A = allocation_matrix(frame)
    rng = np.random.default_rng(1)
    for _ in range(200):
        T = rng.uniform(2.0, 20.0)
        tau = rng.normal(size=3) * [0.05, 0.05, 0.01]
        f = mix(frame, T, tau)
        assert np.all(f >= 0.0) and np.all(f <= frame.max_rotor_thrust)
        w = wrench(frame, f)
        if np.allclose(A @ np.linalg.solve(A, [T, *tau]), w):
            continue
        # saturated: collective kept, torque scaled along its own direction
        assert w[0] == pytest.approx(T, rel=1e-9) or f.min() == 0.0 or f.max() == 6.0
    f = mix(frame, 9.32, np.array([0.0, 0.0, 0.0]))
    assert wrench(frame, f) == pytest.approx([9.32, 0.0, 0.0, 0.0], abs=1e-12)
    f = mix(frame, 9.32, np.array([0.1, -0.2, 0.05]))
    assert wrench(frame, f) == pytest.approx([9.32, 0.1, -0.2, 0.05], abs=1e-12)


def test_mixer_yaw_budget_at_hover_is_about_014():
    frame = Airframe()
    f = mix(frame, frame.hover_thrust, np.array([0.0, 0.0, 10.0]))  # ask for far too much yaw
    assert wrench(frame, f)[3] == pytest.approx(0.015 * frame.hover_thrust, rel=1e-9)
    assert wrench(frame, f)[3] == pytest.approx(0.14, abs=0.005)
