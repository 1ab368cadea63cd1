"""The action mapping: rotor thrusts, the ctbr rate loop, clipping and bad actions."""

from __future__ import annotations

import types

import numpy as np
import pytest

from residual_quad.envs.actions import (
    ACTION_MODES,
    CtbrActions,
    RotorActions,
    clip_action,
    make_action_mapping,
)
from residual_quad.envs.airframe import Airframe, mix


def _data(omega_b):
    """A stand-in for ``MjData`` with body rates ``omega_b`` (free joint: ``qvel[3:6]``)."""
    return types.SimpleNamespace(qvel=np.array([0.0, 0.0, 0.0, *omega_b]))


def test_clip_action_clips_and_returns_floats():
    assert clip_action(np.array([2.0, -3.0, 0.25, -1.0], dtype=np.float32)) == [
        1.0,
        -1.0,
        0.25,
        -1.0,
    ]
    assert all(type(v) is float for v in clip_action([1, 0, 0, 0]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_clip_action_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="finite"):
        clip_action([0.0, bad, 0.0, 0.0])


def test_clip_action_rejects_wrong_size():
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        clip_action(np.zeros(3))


def test_rotor_mode_maps_minus_one_to_zero_and_one_to_max():
    frame = Airframe()
    actions = RotorActions(frame)
    assert actions.rotor_thrusts([-1.0, 0.0, 0.5, 1.0], None) == [0.0, 3.0, 4.5, 6.0]


def test_ctbr_zero_rates_at_rest_split_the_collective_evenly():
    frame = Airframe()
    actions = CtbrActions(frame)
    f = actions.rotor_thrusts([0.0, 0.0, 0.0, 0.0], _data([0.0, 0.0, 0.0]))
    assert f == pytest.approx([3.0, 3.0, 3.0, 3.0])  # (0 + 1)/2 · 24 N, evenly


def test_ctbr_rate_loop_torque_by_hand():
    """``τ = J·k_rate·(ω_des − ω) + ω × Jω`` with ``ω_des = a_{1:4}·max_body_rate``."""
    frame = Airframe()
    actions = CtbrActions(frame, max_body_rate=(4.0, 4.0, 2.0), k_rate=20.0)
    omega = np.array([0.2, -0.1, 0.05])
    a = [-0.2, 0.1, -0.05, 0.3]
    J = np.array(frame.inertia)
    omega_des = np.array([0.4, -0.2, 0.6])
    torque = J * 20.0 * (omega_des - omega) + np.cross(omega, J * omega)
    thrust = 0.8 * 0.5 * 24.0
    got = actions.rotor_thrusts(a, _data(omega))
    assert np.array_equal(got, mix(frame, thrust, torque))


def test_make_action_mapping_modes_and_unknown_mode():
    frame = Airframe()
    assert [make_action_mapping(mode, frame).mode for mode in ACTION_MODES] == list(ACTION_MODES)
    with pytest.raises(ValueError, match="rotor, ctbr"):
        make_action_mapping("torque", frame)
