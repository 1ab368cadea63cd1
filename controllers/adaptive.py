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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.attitude import AttitudeGains, InnerLoop
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.options import NON_NEGATIVE, Domain, Flag
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

DEFAULT_OBSERVER_TAU = 0.02  # s, low-pass of the angular disturbance estimate (measured)


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
            w = 0.5 * (omega + self._prev_omega)  # rad/s, mid-period rate
            J = self.J
            alpha_nominal = (tau - np.cross(w, J * w)) / J
            raw = (omega - self._prev_omega) / self.dt - alpha_nominal
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
    OPTIONS: dict[str, Domain] = {
        **RLSGeoTracker.OPTIONS,
        "observer_tau": NON_NEGATIVE,  # s, 0: the raw one-period estimate
        "observer": Flag(),
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
