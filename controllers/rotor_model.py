"""The controller's model of lagged rotors: what the rotors produce, from what was commanded.

The observation reports the thrusts the plant was *commanded* over the last period. Behind a
first-order rotor lag (the env's ``rotor_tau_s``) the rotors produce something else while they
spin up or down, and every measurement that pairs the commanded thrust with the measured motion
(the residual of ``geo_rls``, the angular disturbance observer of ``geo_rls_dob``) reads the
difference as a disturbance and feeds it back. A tracker told the rotors' time constant
(``rotor_tau_s`` option) runs the same first-order model on the commands it sees,
``â ← u + (â − u)·e^{−Δt/τ}`` per control period (exact for a command held over the period), and
hands its estimate ``â`` of the thrusts at the period's end to everything downstream in place of
the commanded ones. ``rotor_tau_s = 0`` (the default) is no model: the observation as it is.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from residual_quad.envs.observation import ObsLayout as L


class RotorState(NamedTuple):
    """The rotor model's state, one row per env."""

    thrusts: np.ndarray  # N, (n, 4): the estimate at the last period's end
    known: np.ndarray  # (n,) bool: whether there is an estimate yet (none before the first)


class RotorModel:
    """First-order model of the four rotors, time constant ``tau_s`` (s), stepped once per
    control period ``dt`` (s). Its state is a :class:`RotorState` kept by the law."""

    def __init__(self, tau_s: float, dt: float):
        if not (math.isfinite(tau_s) and tau_s > 0.0):
            raise ValueError(f"rotor_tau_s must be a finite number of s > 0, got {tau_s!r}")
        self.tau_s = float(tau_s)  # s
        self.decay = math.exp(-dt / self.tau_s)  # of the lag over one control period

    def init_state(self, n: int) -> RotorState:
        """No estimate yet: the first observation's thrusts are taken as the rotors' (the env
        starts in hover with the rotors at the hover command)."""
        return RotorState(thrusts=np.zeros((n, 4)), known=np.zeros(n, dtype=bool))

    def observe_one(self, state: RotorState, obs: np.ndarray) -> tuple[RotorState, np.ndarray]:
        """One vehicle: the model after the period ``obs`` reports, and ``obs`` with its
        thrusts replaced by the estimate (a new array). An observation whose thrusts are not
        finite is returned as it is and leaves the model unchanged."""
        u = np.asarray(obs[L.thrusts], dtype=float)
        if not np.all(np.isfinite(u)):
            return state, obs
        a = u.copy() if not state.known else u + (state.thrusts - u) * self.decay
        out = np.array(obs, dtype=float)
        out[L.thrusts] = a
        return RotorState(thrusts=a, known=True), out

    def observe(self, state: RotorState, obs: np.ndarray) -> tuple[RotorState, np.ndarray]:
        """:meth:`observe_one` of each row of ``obs`` (n, D): the same first-order update, so
        every row's estimate has the one-vehicle model's bits."""
        u = obs[:, L.thrusts]
        ok = np.isfinite(u).all(axis=1)
        step = (ok & state.known)[:, None]
        first = (ok & ~state.known)[:, None]
        a = state.thrusts
        a = np.where(step, u + (a - u) * self.decay, np.where(first, u, a))
        out = np.array(obs, dtype=float)
        out[ok, L.thrusts] = a[ok]
        return RotorState(thrusts=a, known=state.known | ok), out


class ThrustLine(NamedTuple):
    """The thrusts of the last periods, one row per env."""

    line: np.ndarray  # N, (n, d, 4): the thrusts of the last ``d`` observations, oldest first
    known: np.ndarray  # (n,) bool: whether the line is filled (not before the first observation)


class SensedThrusts:
    """The thrusts of the sensed motion's own period, for the estimators.

    Behind ``steps`` periods of sensor latency the observation's motion (position, velocity,
    attitude, rates, accelerometer) was measured ``steps`` periods ago while its thrusts are the
    last period's (the flight computer knows what it flew). A measurement that pairs the two —
    INDI's torque increment, the residual's acceleration balance, the observers — would read
    the motion of one period against the thrusts of another; this hands them the thrusts
    ``steps`` observations back instead (after the rotor model, if any). Its state is a
    :class:`ThrustLine` kept by the law."""

    def __init__(self, steps: int):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
        self.steps = steps  # control periods of sensor latency

    def init_state(self, n: int) -> ThrustLine:
        """Not filled: the first observation's thrusts fill the line (the env starts in hover
        with the sensed fields the reset's, repeated)."""
        return ThrustLine(line=np.zeros((n, self.steps, 4)), known=np.zeros(n, dtype=bool))

    def forget(self, state: ThrustLine, rows: np.ndarray) -> ThrustLine:
        """The rows ``rows`` refilled from their next observation."""
        known = state.known.copy()
        known[rows] = False
        return state._replace(known=known)

    def forget_one(self, state: ThrustLine) -> ThrustLine:
        """One vehicle's line, refilled from its next observation."""
        return state._replace(known=np.False_)

    def pair_one(self, state: ThrustLine, obs: np.ndarray) -> tuple[ThrustLine, np.ndarray]:
        """One vehicle: ``obs`` (a new array) with the thrusts of its sensed fields' period,
        and the line with this observation's thrusts pushed."""
        u = np.asarray(obs[L.thrusts], dtype=float)
        line = state.line if state.known else np.repeat(u[None], self.steps, axis=0)
        out = np.array(obs, dtype=float)
        out[L.thrusts] = line[0]
        return ThrustLine(np.concatenate((line[1:], u[None])), np.True_), out

    def pair(self, state: ThrustLine, obs: np.ndarray) -> tuple[ThrustLine, np.ndarray]:
        """:meth:`pair_one` of each row of ``obs`` (n, D)."""
        u = obs[:, L.thrusts]
        line = np.where(state.known[:, None, None], state.line, u[:, None, :])
        out = np.array(obs, dtype=float)
        out[:, L.thrusts] = line[:, 0]
        line = np.concatenate((line[:, 1:], u[:, None]), axis=1)
        return ThrustLine(line, np.ones_like(state.known)), out
