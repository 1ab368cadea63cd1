"""Incremental nonlinear dynamic inversion (INDI) of the attitude loop, for every tracker.

The attitude PD commands the torque the nominal model says gives the desired angular
acceleration; whatever the model misses — drag torque, a centre-of-mass offset, the payload's
inertia, a weak rotor — leaves a steady attitude error. INDI [INDI16] closes that gap with
measurements instead of a model: over each control period it compares the angular acceleration
the gyro measured with the one the applied torque explains,

    d = τ_applied − ω × Jω − J·ω̇            (N·m, body; ω̇ the rate difference over the period)

(the torque the model misses, ``−J·Δα`` of :mod:`~residual_quad.controllers.adaptive`), filters
it with a second-order low-pass and adds the estimate to the commanded torque. ``τ_applied`` is
the torque of the thrusts the rotors *produced* over the period: behind lagged rotors the
tracker's rotor model (``rotor_tau_s``) estimates them at each period's end, and the period's
torque is the mean of its start and end (trapezoid); on ideal rotors it is the commanded one.
Filtering the residual once is filtering the gyro derivative and the torque through the same
filter (the "synchronised filters" of [INDI16], [INDI21]): the filter is linear and the
gyroscopic term is evaluated at mid-period.

The filter is a Butterworth low-pass (ζ = 1/√2) of natural frequency ``indi_hz``, discretized by
the bilinear transform at the control period and run in direct form II transposed — the same
arithmetic as :func:`scipy.signal.lfilter` with :func:`scipy.signal.butter`'s coefficients, so a
step disturbance is followed as the filter's step response (the known answer of its test). A
period whose residual is not finite or implausible (``max_accel``, a crash or a reset) leaves
the filter as it was.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

DEFAULT_INDI_HZ = 8.0  # Hz, the filter's natural frequency (measured: docs/controllers.md)
MAX_ACCEL = 200.0  # rad/s², a residual beyond this is a crash or a reset, not a disturbance


class IndiState(NamedTuple):
    """The INDI loop's state, one row per env."""

    z1: np.ndarray  # N·m, (n, 3): the filter's first state (direct form II transposed)
    z2: np.ndarray  # N·m, (n, 3): its second state
    estimate: np.ndarray  # N·m, body, (n, 3): the filtered torque the model misses
    prev_omega: np.ndarray  # rad/s, body, (n, 3): the rate at the previous period's end
    prev_thrusts: np.ndarray  # N, (n, 4): the rotors' thrusts then (the model's estimate)
    have_prev: np.ndarray  # (n,) bool: whether a previous rate is known
    rejected: np.ndarray  # (n,) int: periods left out (non-finite or implausible)


def butterworth(indi_hz: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """``(b, a)`` of the second-order Butterworth low-pass of natural frequency ``indi_hz`` (Hz)
    at sample period ``dt`` (s), by the bilinear transform with pre-warping (``a[0] = 1``)."""
    k = 1.0 / math.tan(math.pi * indi_hz * dt)  # pre-warped 1/tan(ω_c·dt/2)
    q = math.sqrt(2.0)
    norm = 1.0 / (k * k + q * k + 1.0)
    b = np.array([norm, 2.0 * norm, norm])
    a = np.array([1.0, 2.0 * (1.0 - k * k) * norm, (k * k - q * k + 1.0) * norm])
    return b, a


class IndiLoop:
    """The INDI torque increment of the attitude loop (see the module docstring).

    Args:
        airframe: nominal inertia (kg·m²) and rotor geometry (torque of the thrusts).
        control_dt: control period, s.
        indi_hz: natural frequency of the residual's filter, Hz (below the Nyquist frequency).
        lagged: whether the thrusts handed in are a rotor model's end-of-period estimates (the
            period's torque is then the trapezoid of its start and end) rather than commands.
        max_accel: rad/s², a period whose residual exceeds ``J·max_accel`` is left out.
    """

    def __init__(
        self,
        airframe: Airframe,
        control_dt: float,
        indi_hz: float = DEFAULT_INDI_HZ,
        *,
        lagged: bool = False,
        max_accel: float = MAX_ACCEL,
    ):
        nyquist = 0.5 / control_dt
        if not (0.0 < indi_hz < nyquist):
            raise ValueError(
                f"indi_hz must be in (0, {nyquist:g}) Hz (the Nyquist frequency of the control "
                f"rate), got {indi_hz!r}"
            )
        self.J = np.asarray(airframe.inertia, dtype=float)  # kg·m², nominal, principal axes
        self.allocation = airframe.allocation[1:]  # rotor thrusts (N) → body torque (N·m)
        self.dt = float(control_dt)
        self.indi_hz = float(indi_hz)
        self.lagged = bool(lagged)
        self.b, self.a = butterworth(self.indi_hz, self.dt)
        self._b0, self._b1, self._b2 = self.b.tolist()
        self._a1, self._a2 = self.a[1:].tolist()
        self.max_residual_sq = float(np.sum((self.J * max_accel) ** 2))  # (N·m)²

    def init_state(self, n: int) -> IndiState:
        """No estimate, no previous rate."""
        return IndiState(
            z1=np.zeros((n, 3)),
            z2=np.zeros((n, 3)),
            estimate=np.zeros((n, 3)),
            prev_omega=np.zeros((n, 3)),
            prev_thrusts=np.zeros((n, 4)),
            have_prev=np.zeros(n, dtype=bool),
            rejected=np.zeros(n, dtype=np.int64),
        )

    def forget(self, state: IndiState, rows: np.ndarray) -> IndiState:
        """The next observation of the envs ``rows`` does not follow their last one: no rate
        difference spans the gap; the estimate and the filter are kept."""
        state.have_prev[rows] = False
        return state

    def forget_one(self, state: IndiState) -> IndiState:
        """:meth:`forget` of one vehicle."""
        return state._replace(have_prev=False)

    def residual(
        self, omega: np.ndarray, prev_omega: np.ndarray, thrusts: np.ndarray, prev: np.ndarray
    ) -> np.ndarray:
        """The period's torque the model misses, ``τ − ω × Jω − J·ω̇`` (N·m, body), for the
        rates at its end and start and the thrusts reported at its end and start (N; (4,) or
        (n, 4)): one formula for one vehicle and a batch."""
        applied = 0.5 * (thrusts + prev) if self.lagged else thrusts
        tau = applied @ self.allocation.T  # N·m, body
        w = 0.5 * (omega + prev_omega)  # rad/s, mid-period rate
        return tau - np.cross(w, self.J * w) - self.J * (omega - prev_omega) / self.dt

    def update_one(self, state: IndiState, obs: np.ndarray) -> IndiState:
        """Fold in the period that ended with ``obs`` (one vehicle)."""
        omega = np.array(obs[L.omega_b], dtype=float)
        thrusts = np.array(obs[L.thrusts], dtype=float)
        z1, z2, estimate, rejected = state.z1, state.z2, state.estimate, state.rejected
        if state.have_prev:
            d = self.residual(omega, state.prev_omega, thrusts, state.prev_thrusts)
            if float(d @ d) <= self.max_residual_sq:  # NaN fails
                estimate = self._b0 * d + z1
                z1 = self._b1 * d - self._a1 * estimate + z2
                z2 = self._b2 * d - self._a2 * estimate
            else:
                rejected += 1
        ok = bool(np.all(np.isfinite(omega)) and np.all(np.isfinite(thrusts)))
        return IndiState(z1, z2, estimate, omega, thrusts, ok, rejected)

    def update(self, state: IndiState, obs: np.ndarray) -> IndiState:
        """:meth:`update_one` of each env: ``obs`` (n, D)."""
        omega = np.array(obs[:, L.omega_b], dtype=float)
        thrusts = np.array(obs[:, L.thrusts], dtype=float)
        have = state.have_prev
        z1, z2, estimate, rejected = state.z1, state.z2, state.estimate, state.rejected
        if have.any():
            d = self.residual(omega, state.prev_omega, thrusts, state.prev_thrusts)
            ok = (have & (np.einsum("ni,ni->n", d, d) <= self.max_residual_sq))[:, None]
            y = self._b0 * d + z1
            estimate = np.where(ok, y, estimate)
            z1_new = self._b1 * d - self._a1 * y + z2
            z2 = np.where(ok, self._b2 * d - self._a2 * y, z2)
            z1 = np.where(ok, z1_new, z1)
            rejected = rejected + (have & ~ok[:, 0])
        ok = np.all(np.isfinite(omega), axis=1) & np.all(np.isfinite(thrusts), axis=1)
        return IndiState(z1, z2, estimate, omega, thrusts, ok, rejected)
