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
The torque and the gyro derivative go through the same filter (the "synchronised filters" of
[INDI16], [INDI21]) and the estimate is ``a_f − J·ω̇_f`` of the filtered signals, so the
inertia ``J`` can be corrected online: with ``adapt`` the filtered increments between periods
identify it per axis (normalized LMS, the adaptive INDI of [INDI16]) — measured necessary behind
the realistic plant, where the nominal inertia of an extra-payload vehicle crashed (the inertia
error's term fed back through the lags).

The filter is a Butterworth low-pass (ζ = 1/√2) of natural frequency ``indi_hz``, discretized by
the bilinear transform at the control period and run in direct form II transposed — the same
arithmetic as :func:`scipy.signal.lfilter` with :func:`scipy.signal.butter`'s coefficients, so a
step disturbance is followed as the filter's step response (the known answer of its test). A
period whose residual is not finite or implausible (``max_accel``, a crash or a reset) leaves
the filters as they were.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.rotations import cross

DEFAULT_INDI_HZ = 8.0  # Hz, the filter's natural frequency (measured: docs/controllers.md)
MAX_ACCEL = 200.0  # rad/s², a residual beyond this is a crash or a reset, not a disturbance
INERTIA_RANGE = (0.5, 5.0)  # × nominal, the bounds of the identified inertia
ADAPT_EPS = 1e-2  # (rad/s²)², the normalization's floor (no correction from a still period)
#: the fields one filtered period updates, in :meth:`IndiLoop._filtered`'s order
FILTERED = ("za1", "za2", "zw1", "zw2", "a_f", "w_f", "inertia", "estimate")


class IndiState(NamedTuple):
    """The INDI loop's state, one row per env (filters in direct form II transposed)."""

    za1: np.ndarray  # N·m, (n, 3): the first state of the torque's filter
    za2: np.ndarray  # N·m, (n, 3): its second state
    zw1: np.ndarray  # rad/s², (n, 3): the first state of the angular acceleration's filter
    zw2: np.ndarray  # rad/s², (n, 3): its second state
    a_f: np.ndarray  # N·m, body, (n, 3): the filtered ``τ − ω × Jω``
    w_f: np.ndarray  # rad/s², body, (n, 3): the filtered ``ω̇``
    inertia: np.ndarray  # kg·m², (n, 3): the inertia the loop uses (adapted with indi_adapt)
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


class Biquad:
    """The low-pass of :func:`butterworth` as one second-order section in direct form II
    transposed (:func:`scipy.signal.lfilter`'s arithmetic): the step every INDI filter takes,
    on floats or arrays of any shape, its two states kept by the caller."""

    def __init__(self, hz: float, dt: float):
        self.b, self.a = butterworth(hz, dt)
        self._c = (*self.b.tolist(), *self.a[1:].tolist())  # b0, b1, b2, a1, a2

    def step(self, x: np.ndarray, z1: np.ndarray, z2: np.ndarray) -> tuple[np.ndarray, ...]:
        """The filter one sample on ``x``: the next states and the output, ``(z1, z2, y)``."""
        b0, b1, b2, a1, a2 = self._c
        y = b0 * x + z1
        return b1 * x - a1 * y + z2, b2 * x - a2 * y, y


def below_nyquist(name: str, hz: float, control_dt: float, off: str = "") -> float:
    """``hz`` (a filter's natural frequency, Hz) if it is in (0, Nyquist) of the control period
    ``control_dt`` (s); else a ``ValueError`` naming the option ``name`` (``off``: what a 0
    means for it, added to the message)."""
    nyquist = 0.5 / control_dt
    if not (0.0 < hz < nyquist):
        raise ValueError(
            f"{name} must be in (0, {nyquist:g}) Hz (the Nyquist frequency of the control "
            f"rate){off}, got {hz!r}"
        )
    return float(hz)


class IndiLoop:
    """The INDI torque increment of the attitude loop (see the module docstring).

    Args:
        airframe: nominal inertia (kg·m²) and rotor geometry (torque of the thrusts).
        control_dt: control period, s.
        indi_hz: natural frequency of the residual's filter, Hz (below the Nyquist frequency).
        lagged: whether the thrusts handed in are a rotor model's end-of-period estimates (the
            period's torque is then the trapezoid of its start and end) rather than commands.
        adapt: step of the inertia's online identification (0: the nominal inertia). As in the
            adaptive INDI of [INDI16], the filtered increments of torque and angular
            acceleration between periods, ``Δa = J·Δω̇`` (a slowly varying disturbance drops
            out), correct each axis's inertia by normalized LMS, bounded to
            [:data:`INERTIA_RANGE`] × nominal.
        max_accel: rad/s², a period whose residual exceeds ``J·max_accel`` is left out.
    """

    def __init__(
        self,
        airframe: Airframe,
        control_dt: float,
        indi_hz: float = DEFAULT_INDI_HZ,
        *,
        lagged: bool = False,
        adapt: float = 0.0,
        max_accel: float = MAX_ACCEL,
    ):
        below_nyquist("indi_hz", indi_hz, control_dt)
        if not (0.0 <= adapt <= 1.0):
            raise ValueError(f"indi_adapt must be a step in [0, 1], got {adapt!r}")
        self.J = np.asarray(airframe.inertia, dtype=float)  # kg·m², nominal, principal axes
        self.allocation = airframe.allocation[1:]  # rotor thrusts (N) → body torque (N·m)
        self.dt = float(control_dt)
        self.indi_hz = float(indi_hz)
        self.lagged = bool(lagged)
        self.adapt = float(adapt)
        self.filter = Biquad(self.indi_hz, self.dt)  # the torque's and the rate's, synchronised
        self.b, self.a = self.filter.b, self.filter.a
        self.max_accel_sq = float(max_accel) ** 2  # (rad/s²)²
        self.j_min, self.j_max = INERTIA_RANGE[0] * self.J, INERTIA_RANGE[1] * self.J

    def init_state(self, n: int) -> IndiState:
        """No estimate, no previous rate, the nominal inertia."""
        z = [np.zeros((n, 3)) for _ in range(7)]
        inertia = np.empty((n, 3))
        inertia[...] = self.J
        return IndiState(
            *z[:6], inertia, z[6], np.zeros((n, 3)), np.zeros((n, 4)),
            np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64),
        )  # fmt: skip

    def forget(self, state: IndiState, rows: np.ndarray) -> IndiState:
        """The next observation of the envs ``rows`` does not follow their last one: no rate
        difference spans the gap; the estimate and the filter are kept."""
        state.have_prev[rows] = False
        return state

    def forget_one(self, state: IndiState) -> IndiState:
        """:meth:`forget` of one vehicle."""
        return state._replace(have_prev=False)

    def torque_and_accel(
        self, omega: np.ndarray, prev_omega: np.ndarray, thrusts: np.ndarray, prev: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The period's ``τ − ω × Jω`` (N·m, body; ``J`` nominal, ω at mid-period) and ``ω̇``
        (rad/s², body) for the rates at its end and start and the thrusts reported at its end
        and start (N; (4,) or (n, 4)): one formula for one vehicle and a batch."""
        applied = 0.5 * (thrusts + prev) if self.lagged else thrusts
        tau = applied @ self.allocation.T  # N·m, body
        w = 0.5 * (omega + prev_omega)  # rad/s, mid-period rate
        return tau - cross(w, self.J * w), (omega - prev_omega) / self.dt

    def _filtered(self, s: IndiState, a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
        """Both filters one step on ``a`` and ``w``, then the inertia's correction and the
        estimate: ``(za1, za2, zw1, zw2, a_f, w_f, inertia, estimate)``."""
        za1, za2, a_f = self.filter.step(a, s.za1, s.za2)
        zw1, zw2, w_f = self.filter.step(w, s.zw1, s.zw2)
        inertia = s.inertia
        if self.adapt:
            dw, da = w_f - s.w_f, a_f - s.a_f
            step = self.adapt * (da - inertia * dw) * dw / (ADAPT_EPS + dw * dw)
            inertia = np.clip(inertia + step, self.j_min, self.j_max)
        return za1, za2, zw1, zw2, a_f, w_f, inertia, a_f - inertia * w_f

    def update_one(self, state: IndiState, obs: np.ndarray) -> IndiState:
        """Fold in the period that ended with ``obs`` (one vehicle)."""
        omega = np.array(obs[L.omega_b], dtype=float)
        thrusts = np.array(obs[L.thrusts], dtype=float)
        s, rejected = state, state.rejected
        if state.have_prev:
            a, w = self.torque_and_accel(omega, s.prev_omega, thrusts, s.prev_thrusts)
            d = a / s.inertia - w  # rad/s², the residual in angular acceleration
            if float(d @ d) <= self.max_accel_sq:  # NaN fails
                s = s._replace(**dict(zip(FILTERED, self._filtered(s, a, w), strict=True)))
            else:
                rejected += 1
        ok = bool(np.all(np.isfinite(omega)) and np.all(np.isfinite(thrusts)))
        return s._replace(prev_omega=omega, prev_thrusts=thrusts, have_prev=ok, rejected=rejected)

    def update(self, state: IndiState, obs: np.ndarray) -> IndiState:
        """:meth:`update_one` of each env: ``obs`` (n, D)."""
        omega = np.array(obs[:, L.omega_b], dtype=float)
        thrusts = np.array(obs[:, L.thrusts], dtype=float)
        have = state.have_prev
        s, rejected = state, state.rejected
        if have.any():
            a, w = self.torque_and_accel(omega, s.prev_omega, thrusts, s.prev_thrusts)
            d = a / s.inertia - w
            ok = have & (np.einsum("ni,ni->n", d, d) <= self.max_accel_sq)
            okc = ok[:, None]
            new = self._filtered(s, np.where(okc, a, 0.0), np.where(okc, w, 0.0))
            s = s._replace(
                **{f: np.where(okc, v, getattr(s, f)) for f, v in zip(FILTERED, new, strict=True)}
            )
            rejected = rejected + (have & ~ok)
        ok = np.all(np.isfinite(omega), axis=1) & np.all(np.isfinite(thrusts), axis=1)
        return s._replace(prev_omega=omega, prev_thrusts=thrusts, have_prev=ok, rejected=rejected)
