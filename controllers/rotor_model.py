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

import numpy as np

from residual_quad.envs.observation import ObsLayout as L


class RotorModel:
    """First-order model of the four rotors, time constant ``tau_s`` (s), stepped once per
    control period ``dt`` (s)."""

    def __init__(self, tau_s: float, dt: float):
        if not (math.isfinite(tau_s) and tau_s > 0.0):
            raise ValueError(f"rotor_tau_s must be a finite number of s > 0, got {tau_s!r}")
        self.tau_s = float(tau_s)  # s
        self.decay = math.exp(-dt / self.tau_s)  # of the lag over one control period
        self.reset()

    def reset(self) -> None:
        """No estimate yet: the first observation's thrusts are taken as the rotors' (the env
        starts in hover with the rotors at the hover command)."""
        self.thrusts: np.ndarray | None = None  # N, the estimate at the last period's end

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` with its thrusts replaced by the model's estimate after the period they were
        commanded over (a new array). An observation whose thrusts are not finite is returned
        as it is and leaves the model unchanged (the controller's guard answers it)."""
        u = np.asarray(obs[L.thrusts], dtype=float)
        if not np.all(np.isfinite(u)):
            return obs
        a = self.thrusts
        self.thrusts = u.copy() if a is None else u + (a - u) * self.decay
        out = np.array(obs, dtype=float)
        out[L.thrusts] = self.thrusts
        return out


class BatchedRotorModel:
    """:class:`RotorModel` for N envs: the same first-order update on each env's row, so every
    row's estimate has the single model's bits."""

    def __init__(self, tau_s: float, dt: float, n_envs: int):
        self.single = RotorModel(tau_s, dt)  # checks ``tau_s``; holds the decay
        self.thrusts = np.zeros((n_envs, 4))  # N, each env's estimate at its last period's end
        self.known = np.zeros(n_envs, dtype=bool)  # whether the env has an estimate yet

    def reset(self, index: int | slice | np.ndarray) -> None:
        """No estimate yet for the envs ``index`` (see :meth:`RotorModel.reset`)."""
        self.known[index] = False

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` (N, 36) with each row's thrusts replaced by its env's estimate (a new array);
        a row whose thrusts are not finite is left as it is and its env's model unchanged."""
        u = obs[:, L.thrusts]
        ok = np.isfinite(u).all(axis=1)
        step = ok & self.known
        a = self.thrusts
        a[step] = u[step] + (a[step] - u[step]) * self.single.decay
        first = ok & ~self.known
        a[first] = u[first]
        self.known |= ok
        out = np.array(obs, dtype=float)
        out[ok, L.thrusts] = a[ok]
        return out
