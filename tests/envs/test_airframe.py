"""The airframe's allocation and saturating mixer."""

from __future__ import annotations

import numpy as np
import pytest

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
