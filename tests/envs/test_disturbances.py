"""The disturbance models against known answers: payload levels, OU statistics, drag formula, ground
effect gain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.envs.disturbances import (
    DragModel,
    GroundEffect,
    WindModel,
    WindProcess,
    resolve_payload,
)


# ------------------------------------------------------------------------------------ payload
def test_payload_float_and_negative():
    assert resolve_payload(0.33) == 0.33
    assert resolve_payload("extra") == 0.75
    with pytest.raises(ValueError, match="payload"):
        resolve_payload(-0.2)
    with pytest.raises(ValueError, match="payload"):
        resolve_payload(float("nan"))
    # an integer too large for a float (a YAML literal can be one) is out of range, not an
    # OverflowError; an integer mass in range is a mass
    with pytest.raises(ValueError, match="payload"):
        resolve_payload(10**400)
    assert resolve_payload(1) == 1.0 and resolve_payload(np.float32(0.25)) == 0.25


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


# ------------------------------------------------------------------------------------ ground
def test_ground_effect_gain():
    ge = GroundEffect(rotor_radius=0.127, max_gain=1.5)
    assert ge.gain(10.0) == pytest.approx(1.0, abs=1e-4)
    assert ge.gain(0.3) == pytest.approx(1.0 / (1.0 - (0.127 / 1.2) ** 2))
    assert ge.gain(0.01) == 1.5
    assert ge.gain(0.2) > ge.gain(0.4) > 1.0
