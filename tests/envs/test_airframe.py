"""The airframe's allocation and saturating mixer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.attitude import mix_batch
from residual_quad.envs.airframe import Airframe, allocation_matrix, mix, wrench


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


def _spread(frame: Airframe, tau) -> tuple[float, float]:
    delta = [a * tau[0] + b * tau[1] + c * tau[2] for a, b, c in frame.mix_rows]
    return min(delta), max(delta)


def test_desaturating_at_the_top_the_collective_yields_and_the_torque_is_kept():
    """Every rotor asked for its full thrust (a loaded take-off) plus an attitude torque: the
    desaturating mixer delivers the torque exactly and the collective gives way by the highest
    rotor's share; the squeeze, holding the collective at the top, delivers no torque at all."""
    frame = Airframe()
    fmax = frame.max_rotor_thrust
    tau = np.array([0.3, -0.1, 0.02])
    assert wrench(frame, mix(frame, 4.0 * fmax + 5.0, tau))[1:] == pytest.approx([0.0] * 3)
    f = mix(frame, 4.0 * fmax + 5.0, tau, desaturate=True)
    w = wrench(frame, f)
    np.testing.assert_allclose(w[1:], tau, atol=1e-12)
    _, hi = _spread(frame, tau)
    assert w[0] == pytest.approx(4.0 * (fmax - hi), abs=1e-9)
    assert f.max() == pytest.approx(fmax, abs=1e-12) and f.min() >= 0.0
    # a spread wider than the box at full collective: scaled to span it exactly, not to zero
    big = np.array([3.0, 0.0, 0.0])
    lo, hi = _spread(frame, big)
    w = wrench(frame, mix(frame, 4.0 * fmax, big, desaturate=True))
    assert w[1] == pytest.approx(3.0 * fmax / (hi - lo), rel=1e-12)


@pytest.mark.parametrize("desaturate", [False, True])
def test_at_the_bottom_the_collective_is_kept_and_the_torque_squeezed(desaturate):
    """A small collective with a roll demand beyond it, either mixer: the collective is not
    raised, the torque keeps its direction and shrinks until the lowest rotor reaches zero."""
    frame = Airframe()
    tau = np.array([0.3, 0.1, 0.0])
    f = mix(frame, 1.0, tau, desaturate)
    w = wrench(frame, f)
    assert w[0] == pytest.approx(1.0, abs=1e-12)
    lo, _ = _spread(frame, tau)
    np.testing.assert_allclose(w[1:], tau * (0.25 / -lo), atol=1e-12)
    assert f.min() == pytest.approx(0.0, abs=1e-12)


MIX_INPUTS = st.tuples(
    st.floats(-5.0, 40.0), st.floats(-2.0, 2.0), st.floats(-2.0, 2.0), st.floats(-0.5, 0.5)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MIX_INPUTS, min_size=1, max_size=12), st.booleans())
def test_the_batched_mixer_is_the_single_one_bit_for_bit_and_inside_the_box(rows, desaturate):
    frame = Airframe()
    T, tx, ty, tz = (np.array(col) for col in zip(*rows, strict=True))
    got = mix_batch(frame, T, np.stack([tx, ty, tz], axis=1), desaturate)
    for k, (t, *tau) in enumerate(rows):
        one = mix(frame, t, tau, desaturate)
        assert got[k].tobytes() == one.tobytes()
        assert np.all(one >= 0.0) and np.all(one <= frame.max_rotor_thrust)
        w = wrench(frame, one)
        # the torque never turns: it is the demand scaled by a factor in [0, 1]
        norm = float(np.dot(tau, tau))
        if norm > 1e-12:
            scale = float(np.dot(w[1:], tau)) / norm
            assert -1e-9 <= scale <= 1.0 + 1e-9
            np.testing.assert_allclose(w[1:], scale * np.asarray(tau), atol=1e-9)
        # the collective is never raised above the command's
        assert w[0] <= min(max(t, 0.0), 4.0 * frame.max_rotor_thrust) + 1e-9
