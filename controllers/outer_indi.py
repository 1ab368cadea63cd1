"""Outer-loop INDI: the acceleration the nominal model misses, measured by the accelerometer.

The cascaded INDI of [INDI18] closes the position loop on the measured linear acceleration the
way the attitude loop's INDI (:mod:`~residual_quad.controllers.indi`) closes it on the gyro:
over each control period it compares the specific force the accelerometer measured with the one
the thrusts explain,

    r = R·(f_imu − e_z·ΣT/m)            (m/s², world; ``T`` the thrusts the rotors produced)

— the residual acceleration ``Δa`` the residual trackers estimate — filters it with the same
second-order Butterworth low-pass and subtracts the estimate from the commanded acceleration.
With lagged rotors the thrusts are the tracker's rotor model's (the measurement and the thrust
it pairs with are the same period's: the "synchronised filters" of [INDI18], one filter on their
difference by linearity).

The estimate's body-z part — mostly a thrust-efficiency error: a payload makes the same
collective accelerate the vehicle less — acts along the thrust axis about to be commanded, its
body-x/y parts as measured (:mod:`~residual_quad.controllers.residual.application`, the
residual trackers' rule behind lag). Applied along the achieved axis instead, the payload's
deficit feeds the measured tilt back into the command (with the ``extra`` payload a positive
feedback of 0.79 of the lateral acceleration), which the lagged attitude loop cannot carry:
measured, ``geo`` with it orbits its hover point behind 60 ms rotors.

A tracker with its own estimate ``m`` of the residual (``geo_rls``'s RLS, ``geo_res``'s network)
keeps it and gets INDI on what it misses: the filter runs on ``r − m`` (``m`` the estimate of the
period that ended), so the total ``m + LPF(r − m)`` follows the measurement at low frequency and
the model's prediction above the filter (no double count of what the model already cancels).
For ``geo`` and ``pid`` (``m = 0``) it is plain outer-loop INDI, ``LPF(r)``.

A period whose measured residual is not finite or above ``max_accel`` (a crash or a reset)
leaves the filter as it was.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from residual_quad.controllers.indi import Biquad, below_nyquist
from residual_quad.controllers.residual.application import commanded_axis_residual
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

DEFAULT_OUTER_INDI_HZ = 2.0  # Hz, the filter's natural frequency (measured: docs/controllers.md)
MAX_ACCEL = 50.0  # m/s², a measured residual beyond this is a crash or a reset


class OuterIndiState(NamedTuple):
    """The outer INDI loop's state, one row per env (the filter in direct form II transposed)."""

    z1: np.ndarray  # m/s², world, (n, 3): the filter's first state
    z2: np.ndarray  # m/s², world, (n, 3): its second state
    estimate: np.ndarray  # m/s², world, (n, 3): the filtered residual the model misses
    rejected: np.ndarray  # (n,) int: periods left out (non-finite or implausible)


class OuterIndi:
    """The outer loop's INDI increment (see the module docstring).

    Args:
        airframe: nominal mass (kg): the thrusts' acceleration.
        control_dt: control period, s.
        hz: natural frequency of the residual's filter, Hz (below the Nyquist frequency).
        max_accel: m/s², a period whose measured residual exceeds it is left out.
    """

    def __init__(
        self,
        airframe: Airframe,
        control_dt: float,
        hz: float = DEFAULT_OUTER_INDI_HZ,
        *,
        max_accel: float = MAX_ACCEL,
    ):
        self.hz = below_nyquist("outer_indi_hz", hz, control_dt, off=", or 0 for none")
        self.mass = float(airframe.mass)  # kg, nominal
        self.gravity = float(airframe.gravity)  # m/s²
        self.filter = Biquad(self.hz, float(control_dt))
        self.max_accel_sq = float(max_accel) ** 2  # (m/s²)²

    def init_state(self, n: int) -> OuterIndiState:
        """No estimate, the filter at rest."""
        return OuterIndiState(
            np.zeros((n, 3)), np.zeros((n, 3)), np.zeros((n, 3)), np.zeros(n, dtype=np.int64)
        )

    def measured(self, obs: np.ndarray, R: np.ndarray) -> np.ndarray:
        """``r = R·(f_imu − e_z·ΣT/m)`` (m/s², world) of one vehicle's ``obs`` (D,) with
        ``R`` (3, 3), or of a batch (n, D) with (n, 3, 3): one formula for both."""
        f = np.array(obs[..., L.imu], dtype=float)
        t = obs[..., L.thrusts]
        f[..., 2] -= (((t[..., 0] + t[..., 1]) + t[..., 2]) + t[..., 3]) / self.mass
        return np.einsum("...ij,...j->...i", R, f)

    def applied(self, a_v: np.ndarray, estimate: np.ndarray, R: np.ndarray) -> np.ndarray:
        """The increment to subtract from the command ``a_v`` (world, m/s²; the tracker's own
        estimate already subtracted): ``estimate``'s body-z part along the thrust axis about to
        be commanded, its body-x/y parts as measured (one vehicle or a batch)."""
        return commanded_axis_residual(a_v, estimate, R, self.gravity)

    def _filtered(
        self, s: OuterIndiState, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The filter one step on ``x``: ``(z1, z2, y)``."""
        return self.filter.step(x, s.z1, s.z2)

    def update(
        self, state: OuterIndiState, obs: np.ndarray, R: np.ndarray, model: np.ndarray
    ) -> OuterIndiState:
        """Fold in the period that ended with ``obs`` (n, D), ``R`` (n, 3, 3): the filter runs
        on the measured residual minus ``model`` (n, 3), the tracker's own estimate for that
        period (zeros: none)."""
        r = self.measured(obs, R)
        ok = np.einsum("ni,ni->n", r, r) <= self.max_accel_sq  # NaN fails
        okc = ok[:, None]
        z1, z2, y = self._filtered(state, np.where(okc, r - model, 0.0))
        return OuterIndiState(
            np.where(okc, z1, state.z1),
            np.where(okc, z2, state.z2),
            np.where(okc, y, state.estimate),
            state.rejected + ~ok,
        )

    def update_one(
        self, state: OuterIndiState, obs: np.ndarray, R: np.ndarray, model: np.ndarray
    ) -> OuterIndiState:
        """:meth:`update` of one vehicle: ``obs`` (D,), ``R`` (3, 3), ``model`` (3,) (the
        state's rows are (3,), its count an int)."""
        r = self.measured(obs, R)
        if not float(r @ r) <= self.max_accel_sq:  # NaN fails
            return state._replace(rejected=state.rejected + 1)
        return OuterIndiState(*self._filtered(state, r - model), state.rejected)
