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

A law (:mod:`residual_quad.controllers.law`): the observer's state is the ``observer`` part of
the tracker's state, one row per env in a batch; its torque reaches the shared inner loop as the
attitude loop's torque feed-forward.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from residual_quad import configs
from residual_quad.controllers.attitude import AttitudeGains, default_attitude_loop
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.options import NON_NEGATIVE, Domain, Flag, Range
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import (
    NETWORK_OBJECTIVE,
    NETWORK_SCENARIOS,
    RLSGeoTracker,
)
from residual_quad.controllers.trackers import TrackerState
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.rotations import cross

DEFAULT_OBSERVER_TAU = 0.02  # s, low-pass of the angular disturbance estimate (measured)


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
    alpha_nominal = (torque - cross(w, J * w)) / J
    return (omega - prev_omega) / dt - alpha_nominal


class ObserverState(NamedTuple):
    """The angular disturbance observer's state, one row per env (rad/s², body)."""

    estimate: np.ndarray  # (n, 3): Δα̂
    last_raw: np.ndarray  # (n, 3): the unfiltered estimate of the last period
    rejected: np.ndarray  # (n,) int: raw estimates not used (implausible or non-finite)
    prev_omega: np.ndarray  # rad/s, body, (n, 3): the previous rate
    have_prev: np.ndarray  # (n,) bool: whether there is a previous rate


class AngularDisturbanceObserver:
    """Filtered angular-acceleration residual ``Δα̂`` (rad/s², body) from successive
    observations, over an explicit :class:`ObserverState`.

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

    def init_state(self, n: int) -> ObserverState:
        """No estimate and no previous rate."""
        return ObserverState(
            estimate=np.zeros((n, 3)),
            last_raw=np.zeros((n, 3)),
            rejected=np.zeros(n, dtype=np.int64),
            prev_omega=np.zeros((n, 3)),
            have_prev=np.zeros(n, dtype=bool),
        )

    def forget(self, state: ObserverState, rows: np.ndarray) -> ObserverState:
        """The next observation of the envs ``rows`` does not follow their last one (a bad
        sample came between): no rate difference spans the gap; the estimate is kept."""
        state.have_prev[rows] = False
        return state

    def forget_one(self, state: ObserverState) -> ObserverState:
        """:meth:`forget` of one vehicle."""
        return state._replace(have_prev=False)

    def update_one(self, state: ObserverState, obs: np.ndarray) -> ObserverState:
        """Fold in the period that ended with ``obs`` (one vehicle)."""
        omega = np.array(obs[L.omega_b], dtype=float)
        estimate, last_raw, rejected = state.estimate, state.last_raw, state.rejected
        if state.have_prev:
            tau = self.allocation @ obs[L.thrusts]  # N·m, body, applied over the period
            raw = angular_residual(omega, state.prev_omega, tau, self.J, self.dt)
            sq = float(raw @ raw)
            if sq <= self.max_accel_sq:  # NaN fails
                last_raw = raw
                estimate = estimate + self.gain * (raw - estimate)
            else:
                rejected += 1
        return ObserverState(estimate, last_raw, rejected, omega, bool(np.all(np.isfinite(omega))))

    def update(self, state: ObserverState, obs: np.ndarray) -> ObserverState:
        """:meth:`update_one` of each env: ``obs`` (n, 36)."""
        omega = np.array(obs[:, L.omega_b], dtype=float)
        have = state.have_prev
        estimate, last_raw, rejected = state.estimate, state.last_raw, state.rejected
        if have.any():
            torque = np.einsum("ij,nj->ni", self.allocation, obs[:, L.thrusts])  # N·m, body
            raw = angular_residual(omega, state.prev_omega, torque, self.J, self.dt)
            sq = np.einsum("ni,ni->n", raw, raw)
            ok = have & (sq <= self.max_accel_sq)  # NaN fails
            okc = ok[:, None]
            last_raw = np.where(okc, raw, last_raw)
            estimate = np.where(okc, estimate + self.gain * (raw - estimate), estimate)
            rejected = rejected + (have & ~ok)
        return ObserverState(
            estimate, last_raw, rejected, omega, np.all(np.isfinite(omega), axis=1)
        )


class DOBRLSGeoTracker(RLSGeoTracker):
    """``geo_rls_dob``: ``geo_rls`` (guarded, EFRA) + angular disturbance observer feed-forward.

    Args:
        context: nominal airframe and control period.
        config: residual settings; default ``configs/adaptive.yaml`` (the OOD guard on, EFRA).
        network: a :class:`ResidualMLP` instead of ``config.weights``.
        attitude: inner-loop gains.
        observer_tau: low-pass time constant of the disturbance observer, s.
        observer: ``False`` flies without the observer (the guarded, EFRA ``geo_rls`` alone; for
            comparisons); ``None``: the observer unless the attitude loop is INDI (the default
            behind lagging rotors), which takes its place — the two are not stacked.
        **overrides: residual settings, as for ``geo_rls``.

    The observer's state is ``state.observer`` (:class:`ObserverState`); the torque the attitude
    loop cancels is :meth:`disturbance_torque` of it.
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
        observer: bool | None = None,
        **overrides: Any,
    ):
        context = context or ControlContext()
        loop = overrides.get("attitude_loop")
        if observer is None:  # the observer unless INDI (the default behind lag) takes its place
            observer = (loop or default_attitude_loop(context.rotor_tau_s)) == "pd"
        elif observer is True and loop is None:  # the observer chosen: the PD it feeds
            overrides["attitude_loop"] = "pd"
        if not isinstance(observer, bool):
            raise ValueError(f"observer must be true or false, got {observer!r}")
        if observer and overrides.get("attitude_loop", "pd") != "pd":
            raise ValueError(
                "geo_rls_dob's observer is its own torque feed-forward; attitude_loop=indi "
                "needs observer=false"
            )
        self.use_observer = observer
        self.observer = AngularDisturbanceObserver(
            context.airframe, context.control_dt, tau=float(observer_tau)
        )
        super().__init__(
            context,
            config=config,  # None: configs/adaptive.yaml (settings), the plant's defaults on it
            network=network,
            attitude=attitude,
            **overrides,
        )

    @classmethod
    def settings(
        cls, config: str | Path | ResidualConfig | None = None, **overrides: Any
    ) -> ResidualConfig:
        """The residual settings: ``config`` (``None``: ``configs/adaptive.yaml``) with
        ``overrides``."""
        return super().settings(
            config if config is not None else configs.shipped("adaptive"), **overrides
        )

    def init_state(self, n: int) -> TrackerState:
        return super().init_state(n)._replace(observer=self.observer.init_state(n))

    def forget(self, state: TrackerState, rows: np.ndarray) -> TrackerState:
        state = super().forget(state, rows)
        return state._replace(observer=self.observer.forget(state.observer, rows))

    def forget_one(self, state: TrackerState) -> TrackerState:
        state = super().forget_one(state)
        return state._replace(observer=self.observer.forget_one(state.observer))

    def torque_feedforward(
        self, state: TrackerState, obs: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        if not self.use_observer:
            if self.indi is not None:
                return super().torque_feedforward(state, obs)
            return state, np.zeros(obs.shape[:-1] + (3,))
        update = self.observer.update_one if obs.ndim == 1 else self.observer.update
        observer = update(state.observer, obs)
        return state._replace(observer=observer), -self.observer.J * observer.estimate

    def disturbance_torque(self, state: TrackerState) -> np.ndarray:
        """The torque estimate the attitude loop cancels, ``J·Δα̂`` (N·m, body; per env)."""
        return self.observer.J * state.observer.estimate
