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
