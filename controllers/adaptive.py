"""``geo_rls_dob``: ``geo_rls`` plus an angular disturbance observer in the attitude loop.

The remaining ``extra``/``windy`` error of ``geo_rls`` is rotational: drag acts on the frame above
the payload-lowered centre of mass, the attitude PD has no integral, so a steady tilt error stays
that a translational residual cannot see (``docs/adaptive.md``). This controller estimates the
*angular-acceleration residual* online from observables only,

    Δα = ω̇_measured − J⁻¹(τ_applied − ω × Jω)            (rad/s², body frame)

with ``ω̇`` the difference of successive body rates over one control period, ``τ_applied`` the
body torque of the rotor thrusts the observation reports as applied over that period and ``J``
the *nominal* inertia; a first-order low-pass of time constant ``observer_tau`` smooths it, and
the attitude loop adds ``−J·Δα̂`` to its torque (a disturbance observer; with
``observer_tau → 0`` it becomes incremental nonlinear dynamic inversion [INDI16], [INDI21]).
Whatever does not match the nominal rotational model — drag torque, a centre-of-mass offset, the
payload's inertia — is fed back through one period of delay, so a constant disturbance torque
leaves no steady attitude error.

The translational part is ``geo_rls`` with the out-of-distribution guard on and the RLS's EFRA
covariance management [EFRA] (settings in ``configs/adaptive.yaml``). Controllers never read
``info``: every input here is in the observation.

:class:`BatchedDOBRLSGeoTracker` is its twin for N envs (batched ``geo_rls`` around
:class:`BatchedAngularDisturbanceObserver` and :class:`BatchedObserverInnerLoop`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.attitude import AttitudeGains, BatchedInnerLoop, InnerLoop
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.batch import check_n_envs
from residual_quad.controllers.options import NON_NEGATIVE, Domain, Flag, Range
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import (
    NETWORK_OBJECTIVE,
    NETWORK_SCENARIOS,
    BatchedRLSGeoTracker,
    RLSGeoTracker,
)
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

DEFAULT_OBSERVER_TAU = 0.02  # s, low-pass of the angular disturbance estimate (measured)
#: options of ``geo_rls_dob`` that are the observer's, not residual settings
_OBSERVER_OPTIONS = ("observer_tau", "observer")


def angular_residual(
    omega: np.ndarray,
    prev_omega: np.ndarray,
    torque: np.ndarray,
    J: np.ndarray,
    dt: float,
) -> np.ndarray:
    """Raw angular-acceleration residual ``ω̇ − J⁻¹(τ − ω × Jω)`` (rad/s², body) of one period,
    the one formula of the single and the batched observer: rates ``omega``/``prev_omega``
    (rad/s, body; (3,) or (N, 3)) at its end and start, applied torque ``torque`` (N·m, body),
    nominal principal inertia ``J`` (kg·m²), period ``dt`` (s); ω at mid-period."""
    w = 0.5 * (omega + prev_omega)  # rad/s, mid-period rate
    alpha_nominal = (torque - np.cross(w, J * w)) / J
    return (omega - prev_omega) / dt - alpha_nominal


class AngularDisturbanceObserver:
    """Filtered angular-acceleration residual ``Δα̂`` (rad/s², body) from successive observations.

    Args:
        airframe: nominal inertia (kg·m²) and rotor geometry (torque of the applied thrusts).
        control_dt: control period, s.
        tau: low-pass time constant, s (0: the raw one-period estimate).
        max_accel: rad/s², a raw estimate of larger norm (or non-finite) is not used (a reset
            or a crash, never a disturbance the rotors could cancel).
    """

    def __init__(
        self,
        airframe: Airframe,
        control_dt: float,
        tau: float = DEFAULT_OBSERVER_TAU,  # s
        max_accel: float = 200.0,  # rad/s²
    ):
        if not (tau >= 0.0 and math.isfinite(tau)):
            raise ValueError(f"observer_tau must be >= 0 s and finite, got {tau}")
        if not (max_accel > 0.0 and math.isfinite(max_accel)):
            raise ValueError(f"observer max_accel must be > 0 rad/s², got {max_accel}")
        self.J = np.asarray(airframe.inertia, dtype=float)  # kg·m², nominal, principal axes
        self.allocation = airframe.allocation[1:]  # rotor thrusts (N) → body torque (N·m)
        self.dt = float(control_dt)
        self.tau = float(tau)
        self.gain = self.dt / (self.tau + self.dt)
        self.max_accel_sq = float(max_accel) ** 2
        self.reset()

    def reset(self) -> None:
        """No estimate and no previous rate."""
        self.estimate = np.zeros(3)  # rad/s², body, Δα̂
        self.last_raw = np.zeros(3)  # rad/s², body, the unfiltered estimate of the last period
        self.rejected = 0  # raw estimates not used (implausible or non-finite)
        self._prev_omega: np.ndarray | None = None

    def forget_previous_sample(self) -> None:
        """The next observation does not follow the last one (a bad sample came between): no
        rate difference spans the gap; the estimate is kept."""
        self._prev_omega = None

    def update(self, obs: np.ndarray) -> np.ndarray:
        """Fold in the period that ended with ``obs``; returns ``Δα̂`` (rad/s², body)."""
        omega = np.array(obs[L.omega_b], dtype=float)
        if self._prev_omega is not None:
            tau = self.allocation @ obs[L.thrusts]  # N·m, body, applied over the period
            raw = angular_residual(omega, self._prev_omega, tau, self.J, self.dt)
            sq = float(raw @ raw)
            if sq <= self.max_accel_sq:  # NaN fails
                self.last_raw = raw
                self.estimate = self.estimate + self.gain * (raw - self.estimate)
            else:
                self.rejected += 1
        self._prev_omega = omega if np.all(np.isfinite(omega)) else None
        return self.estimate


class ObserverInnerLoop(InnerLoop):
    """:class:`InnerLoop` whose attitude torque also cancels a torque estimate.

    ``torque_ff`` (N·m, body) is added to the geometric PD's torque before the mixer; it is set
    each step by the tracker (``−J·Δα̂``).
    """

    def __init__(self, airframe: Airframe, gains: AttitudeGains | None = None):
        super().__init__(airframe, gains)
        self.torque_ff = np.zeros(3)  # N·m, body

    def attitude_torque(
        self,
        R: Sequence[float],
        omega_b: np.ndarray,
        b3: tuple[float, float, float],
        yaw_des: float,
        yaw_rate_des: float = 0.0,
    ) -> tuple[float, float, float]:
        tx, ty, tz = super().attitude_torque(R, omega_b, b3, yaw_des, yaw_rate_des)
        fx, fy, fz = self.torque_ff.tolist()
        return tx + fx, ty + fy, tz + fz


class DOBRLSGeoTracker(RLSGeoTracker):
    """``geo_rls_dob``: ``geo_rls`` (guarded, EFRA) + angular disturbance observer feed-forward.

    Args:
        context: nominal airframe and control period.
        config: residual settings; default ``configs/adaptive.yaml`` (the OOD guard on, EFRA).
        network: a :class:`ResidualMLP` instead of ``config.weights``.
        attitude: inner-loop gains.
        observer_tau: low-pass time constant of the disturbance observer, s.
        observer: ``False`` flies without the observer (the guarded, EFRA ``geo_rls`` alone; for
            comparisons).
        **overrides: residual settings, as for ``geo_rls``.
    """

    name = "geo_rls_dob"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="as geo_rls (EFRA, OOD guard); angular disturbance observer (τ 0.02 s)",
        residual_estimate="offline network + online RLS; angular disturbance observer",
        tuning="geo_rls's; observer: 3 designs and 2 τ measured, τ 0.02 s kept (docs/adaptive.md)",
        learned="residual",
        objective=NETWORK_OBJECTIVE,
        tuning_trials=5,
        training_scenarios=NETWORK_SCENARIOS,
    )
    OPTIONS: dict[str, Domain] = {
        **RLSGeoTracker.OPTIONS,
        "observer_tau": NON_NEGATIVE,  # s, 0: the raw one-period estimate
        "observer": Flag(),
    }
    #: geo_rls's, and the observer's bandwidth (its low-pass time constant, s)
    TUNABLE: dict[str, Range] = {
        **RLSGeoTracker.TUNABLE,
        "observer_tau": Range(0.005, 0.1, log=True),
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        attitude: AttitudeGains | None = None,
        observer_tau: float = DEFAULT_OBSERVER_TAU,  # s
        observer: bool = True,
        **overrides: Any,
    ):
        context = context or ControlContext()
        if not isinstance(observer, bool):
            raise ValueError(f"observer must be true or false, got {observer!r}")
        self.use_observer = observer
        self.observer = AngularDisturbanceObserver(
            context.airframe, context.control_dt, tau=float(observer_tau)
        )
        super().__init__(
            context,
            config=config if config is not None else configs.shipped("adaptive"),
            network=network,
            attitude=attitude,
            **overrides,
        )
        self.inner = ObserverInnerLoop(self.airframe, attitude)
        self.reset()

    @classmethod
    def settings(
        cls, config: str | Path | ResidualConfig | None = None, **overrides: Any
    ) -> ResidualConfig:
        """The residual settings: ``config`` (``None``: ``configs/adaptive.yaml``) with
        ``overrides``."""
        return super().settings(
            config if config is not None else configs.shipped("adaptive"), **overrides
        )

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.observer.reset()
        if isinstance(self.inner, ObserverInnerLoop):
            self.inner.torque_ff[...] = 0.0

    def act(self, obs: np.ndarray) -> np.ndarray:
        if self.use_observer:
            alpha = self.observer.update(obs)
            self.inner.torque_ff[...] = -self.observer.J * alpha
        return super().act(obs)

    def forget_previous_sample(self) -> None:
        super().forget_previous_sample()
        self.observer.forget_previous_sample()

    @property
    def disturbance_torque(self) -> np.ndarray:
        """The torque estimate the attitude loop cancels, ``J·Δα̂`` (N·m, body)."""
        return self.observer.J * self.observer.estimate


# ----------------------------------------------------------------------------- N envs
class BatchedAngularDisturbanceObserver:
    """:class:`AngularDisturbanceObserver` for N envs: per env the estimate, the last raw
    estimate, the rejection count and the previous rate (with a flag whether there is one).

    Args: as :class:`AngularDisturbanceObserver`, plus ``n_envs``.
    """

    #: attributes holding one row of state per env
    ROW_STATE: tuple[str, ...] = ("estimate", "last_raw", "rejected", "_prev_omega", "_have_prev")

    def __init__(
        self,
        airframe: Airframe,
        control_dt: float,
        n_envs: int,
        tau: float = DEFAULT_OBSERVER_TAU,  # s
        max_accel: float = 200.0,  # rad/s²
    ):
        single = AngularDisturbanceObserver(airframe, control_dt, tau, max_accel)  # checks
        self.J, self.allocation, self.dt = single.J, single.allocation, single.dt
        self.tau, self.gain, self.max_accel_sq = single.tau, single.gain, single.max_accel_sq
        self.n_envs = N = int(n_envs)
        self.estimate = np.zeros((N, 3))  # rad/s², body, Δα̂
        self.last_raw = np.zeros((N, 3))  # rad/s², body
        self.rejected = np.zeros(N, dtype=np.int64)
        self._prev_omega = np.zeros((N, 3))  # rad/s, body
        self._have_prev = np.zeros(N, dtype=bool)

    def reset(self, index: int | slice = slice(None)) -> None:
        """No estimate and no previous rate for the envs ``index`` (default: all)."""
        self.estimate[index] = 0.0
        self.last_raw[index] = 0.0
        self.rejected[index] = 0
        self._prev_omega[index] = 0.0
        self._have_prev[index] = False

    def forget_previous_sample(self, rows: np.ndarray) -> None:
        """As :meth:`AngularDisturbanceObserver.forget_previous_sample` for the envs ``rows``."""
        self._have_prev[rows] = False

    def update(self, obs: np.ndarray) -> np.ndarray:
        """Fold in the period that ended with ``obs`` (N, 36); returns ``Δα̂`` (N, 3) rad/s²."""
        omega = np.array(obs[:, L.omega_b], dtype=float)
        have = self._have_prev
        if have.any():
            torque = np.einsum("ij,nj->ni", self.allocation, obs[:, L.thrusts])  # N·m, body
            raw = angular_residual(omega, self._prev_omega, torque, self.J, self.dt)
            sq = np.einsum("ni,ni->n", raw, raw)
            ok = have & (sq <= self.max_accel_sq)  # NaN fails
            okc = ok[:, None]
            self.last_raw = np.where(okc, raw, self.last_raw)
            est = self.estimate
            self.estimate = np.where(okc, est + self.gain * (raw - est), est)
            self.rejected += have & ~ok
        self._have_prev = np.all(np.isfinite(omega), axis=1)
        self._prev_omega = omega
        return self.estimate


class BatchedObserverInnerLoop(BatchedInnerLoop):
    """:class:`ObserverInnerLoop` for N envs: ``torque_ff`` (N, 3) N·m body, one row per env."""

    def __init__(self, airframe: Airframe, n_envs: int, gains: AttitudeGains | None = None):
        super().__init__(airframe, n_envs, gains)
        self.torque_ff = np.zeros((n_envs, 3))  # N·m, body

    def attitude_torque(
        self,
        r: np.ndarray,
        omega_b: np.ndarray,
        b3: tuple[np.ndarray, np.ndarray, np.ndarray],
        yaw_des: np.ndarray,
        yaw_rate_des: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tx, ty, tz = super().attitude_torque(r, omega_b, b3, yaw_des, yaw_rate_des)
        ff = self.torque_ff
        return tx + ff[:, 0], ty + ff[:, 1], tz + ff[:, 2]


class BatchedDOBRLSGeoTracker(BatchedRLSGeoTracker):
    """``geo_rls_dob`` for N envs: batched ``geo_rls`` (guard, EFRA) with one angular disturbance
    observer row and one torque feed-forward row per env.

    Args: as :class:`DOBRLSGeoTracker`, plus ``n_envs``.
    """

    name = "geo_rls_dob"
    single = DOBRLSGeoTracker
    not_settings = (*BatchedRLSGeoTracker.not_settings, *_OBSERVER_OPTIONS)

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        attitude: AttitudeGains | None = None,
        observer_tau: float = DEFAULT_OBSERVER_TAU,  # s
        observer: bool = True,
        **overrides: Any,
    ):
        context = context or ControlContext()
        n_envs = check_n_envs(n_envs)
        if not isinstance(observer, bool):
            raise ValueError(f"observer must be true or false, got {observer!r}")
        self.use_observer = observer
        self.observer = BatchedAngularDisturbanceObserver(
            context.airframe, context.control_dt, n_envs, tau=float(observer_tau)
        )
        super().__init__(
            context, n_envs, config=config, network=network, attitude=attitude, **overrides
        )
        self.inner = BatchedObserverInnerLoop(self.airframe, n_envs, attitude)
        self.reset_batch()

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.observer.reset(index)
        if isinstance(self.inner, BatchedObserverInnerLoop):
            self.inner.torque_ff[index] = 0.0

    def _row_state(self) -> list[tuple[Any, str]]:
        obs = [(self.observer, a) for a in self.observer.ROW_STATE]
        return [*super()._row_state(), *obs, (self.inner, "torque_ff")]

    def _forget_rows(self, rows: np.ndarray) -> None:
        super()._forget_rows(rows)
        self.observer.forget_previous_sample(rows)

    def _act_batch(self, obs: np.ndarray) -> np.ndarray:
        if self.use_observer:
            alpha = self.observer.update(obs)
            self.inner.torque_ff[...] = -self.observer.J * alpha
        return super()._act_batch(obs)

    @property
    def disturbance_torque(self) -> np.ndarray:
        """(N, 3) the torque estimates the attitude loops cancel, ``J·Δα̂`` (N·m, body)."""
        return self.observer.J * self.observer.estimate


DOBRLSGeoTracker.batched = BatchedDOBRLSGeoTracker
