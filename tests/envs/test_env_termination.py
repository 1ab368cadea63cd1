"""Termination: each crash condition gives its reason, checked in a fixed order."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.termination import (
    TERMINATION_REASONS,
    CrashConditions,
    termination_code,
    termination_reason,
)


class _Plant:
    """A stand-in for the plant: simulated time, contact count and the floor-contact speed."""

    def __init__(self, time=0.01, ncon=0, contact_speed=0.0, warned=False):
        self.data = types.SimpleNamespace(time=time, ncon=ncon)
        self._speed = contact_speed
        self._warned = warned

    def floor_contact_speed(self):
        return self._speed

    def unstable(self):
        return self._warned


def _upright():
    obs = np.zeros(OBS_DIM)
    obs[ObsLayout.rot] = np.eye(3).ravel()
    return obs


def _reason(obs, plant=None, pos_error=0.0, conditions=None):
    """The reason of one observation; the batch form (one row) must give the same code."""
    plant = plant or _Plant()
    conditions = conditions or CrashConditions()
    speed = plant.floor_contact_speed() if plant.data.ncon else 0.0
    args = (plant.unstable(), plant.data.time, 0.01, speed)
    reason = termination_reason(conditions, obs.tolist(), pos_error, *args)
    batch = termination_code(conditions, obs[None], np.array([pos_error]), *map(np.array, args))
    assert batch.tolist() == [-1 if reason is None else TERMINATION_REASONS.index(reason)]
    return reason


def test_crash_conditions_defaults():
    c = CrashConditions()
    assert (c.max_tilt, c.crash_speed, c.max_position_error) == (math.pi / 2, 1.0, 5.0)
    assert c.cos_max_tilt == math.cos(math.pi / 2)


def test_upright_and_close_is_no_termination():
    assert _reason(_upright(), pos_error=1.0) is None


def test_each_reason():
    tilted = _upright()
    tilted[ObsLayout.R22] = math.cos(0.5)
    assert _reason(tilted, conditions=CrashConditions(max_tilt=0.4)) == "tilt"
    assert _reason(tilted, conditions=CrashConditions(max_tilt=0.6)) is None
    assert _reason(_upright(), pos_error=5.01) == "position_error"
    assert _reason(_upright(), _Plant(ncon=1, contact_speed=1.5)) == "ground_contact"
    assert _reason(_upright(), _Plant(ncon=1, contact_speed=0.5)) is None
    bad = _upright()
    bad[ObsLayout.z] = np.nan
    assert _reason(bad) == "non_finite"
    # MuJoCo warns and resets the data on an unstable state (older versions: time included)
    assert _reason(_upright(), _Plant(warned=True)) == "simulation_unstable"
    assert _reason(_upright(), _Plant(time=0.0)) == "simulation_unstable"


def test_reasons_are_checked_in_order():
    obs = _upright()
    obs[ObsLayout.R22] = -1.0  # upside down
    plant = _Plant(ncon=1, contact_speed=2.0)
    assert _reason(obs, plant, pos_error=9.0) == "tilt"
    obs[ObsLayout.vx] = np.inf
    assert _reason(obs, plant, pos_error=9.0) == "non_finite"
    assert _reason(obs, _Plant(ncon=1, contact_speed=2.0, warned=True)) == "simulation_unstable"
    assert TERMINATION_REASONS == (
        "simulation_unstable",
        "non_finite",
        "tilt",
        "position_error",
        "ground_contact",
    )


@pytest.mark.parametrize("max_position_error", [0.2, 5.0])
def test_env_position_error_limit(make_env, max_position_error):
    env = make_env(trajectory="hover", max_position_error=max_position_error)
    env.reset(seed=0, options={"position_offset": [0.3, 0.0, 0.0]})
    _, _, terminated, _, info = env.step(np.zeros(4) + 0.5)
    expected = "position_error" if max_position_error < 0.3 else None
    assert info["termination"] == expected and terminated == (expected is not None)
