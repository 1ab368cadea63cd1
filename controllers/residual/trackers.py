"""``geo_res`` and ``geo_rls``: the geometric tracker plus residual feed-forward.

Both override only :meth:`Tracker.residual_world` of the shared tracker, so the inner loop,
gains and saturation are those of ``geo``: ``a_eff = a_cmd − Δâ``.

* ``geo_res`` predicts Δâ with the offline network (body frame, rotated to world).
* ``geo_rls`` additionally rewrites the network's last layer online with :class:`LastLayerRLS`,
  from the residual it *measures* from observables (accelerometer by default, or the velocity
  difference; act → step → observe: the measurement for the period that just ended is taken at
  the start of the next ``policy`` call).

Each tracker holds a private :class:`FastMLP` built from a deep copy of the network; ``reset()``
restores its last layer and the RLS from that private copy, so no run can contaminate another
(the source document lost days to a shared, in-place-modified network).

Settings come from ``configs/residual.yaml`` (:class:`ResidualConfig`, strict: unknown keys are
errors) and can be overridden per controller.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.configs import from_dict, load_yaml_config, shipped
from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.residual import (
    FastMLP,
    ResidualMLP,
    features_from_obs,
    imu_residual,
    load_network,
    measured_residual,
)
from residual_quad.controllers.rls import LastLayerRLS, RLSConfig
from residual_quad.controllers.trackers import GeoTracker

DEFAULT_CONFIG = shipped("residual")
MEASUREMENT_SOURCES = ("velocity", "imu")


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class MeasurementConfig:
    """How the online learner measures the residual (see :func:`measured_residual`)."""

    source: str = "imu"  # "imu" (accelerometer sample) or "velocity" (period average)
    lowpass_tau: float = 0.0  # s, same first-order low-pass on RLS target and regressor; 0 = off

    def __post_init__(self) -> None:
        if self.source not in MEASUREMENT_SOURCES:
            raise ValueError(
                f"measurement.source {self.source!r}; valid choices: "
                f"{', '.join(MEASUREMENT_SOURCES)}"
            )
        if not (self.lowpass_tau >= 0.0 and math.isfinite(self.lowpass_tau)):
            raise ValueError(f"measurement.lowpass_tau must be >= 0 s, got {self.lowpass_tau}")


@dataclass(frozen=True)
class ResidualConfig:
    """Settings of ``geo_res``/``geo_rls`` (``configs/residual.yaml``)."""

    weights: str = "default"  # "default", "none" (untrained) or a path
    kp: float = 20.0  # 1/s²
    kd: float = 8.0  # 1/s
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)
    rls: RLSConfig = field(default_factory=RLSConfig)


def load_residual_config(
    config: str | Path | ResidualConfig | None = None, **overrides: Any
) -> ResidualConfig:
    """The packaged ``configs/residual.yaml`` (or ``config``), with keyword overrides.

    Overrides are top-level keys (``weights``, ``kp``, ``kd``) or, for the sections, mappings
    merged into them (``rls={"p0": 0.1}``) — also given flat (``p0=0.1``) when unambiguous.
    """
    if isinstance(config, ResidualConfig):
        base = config
    else:
        base = load_yaml_config(ResidualConfig, config or DEFAULT_CONFIG)
    data = dataclasses.asdict(base)
    sections = {"measurement": MeasurementConfig, "rls": RLSConfig}
    for key, value in overrides.items():
        if key in sections:
            if not isinstance(value, dict):
                value = dataclasses.asdict(value)
            data[key].update(value)
        elif key in data:
            data[key] = value
        else:
            owner = [
                s for s, cls in sections.items() if key in {f.name for f in dataclasses.fields(cls)}
            ]
            if len(owner) != 1:
                valid = sorted(
                    set(data) | {f.name for c in sections.values() for f in dataclasses.fields(c)}
                )
                raise ValueError(f"unknown residual-tracker setting {key!r}; valid: {valid}")
            data[owner[0]][key] = value
    return from_dict(ResidualConfig, data, "residual config")


# ----------------------------------------------------------------------------- trackers
class ResidualGeoTracker(GeoTracker):
    """``geo_res``: geometric tracking + offline residual network feed-forward.

    Args:
        context: nominal airframe and control period.
        config: a :class:`ResidualConfig`, a YAML path, or ``None`` for ``configs/residual.yaml``.
        network: a :class:`ResidualMLP` to use instead of ``config.weights`` (deep-copied).
        attitude: inner-loop gains.
        **overrides: settings overriding the config (see :func:`load_residual_config`).
    """

    name = "geo_res"

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        attitude: AttitudeGains | None = None,
        **overrides: Any,
    ):
        self.config = cfg = load_residual_config(config, **overrides)
        net = network.copy() if network is not None else load_network(cfg.weights)
        self.net = FastMLP(net)  # private copy; FastMLP copies again (theta0 is never written)
        self.network_metadata = dict(net.metadata)
        self._x = np.empty(net.sizes[0])
        super().__init__(context, kp=cfg.kp, kd=cfg.kd, attitude=attitude)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.net.theta[...] = self.net.theta0
        self.last_estimate = np.zeros(3)  # m/s², world, Δâ applied at the last step
        self.last_a_eff = np.zeros(3)  # m/s², world, a_cmd − Δâ sent to the inner loop
        self.steps = 0

    def _features(self, obs: np.ndarray, R: np.ndarray) -> np.ndarray:
        """Regressor ``phi`` (the network's last-layer input) of this observation.

        The "commanded acceleration" feature is the previous step's command *as sent to the inner
        loop*, ``a_eff = a_cmd − Δâ``, i.e. the acceleration the nominal model expected from the
        thrust that was applied. The training data come from plain ``geo``, where ``a_eff = a_cmd``;
        using ``a_eff`` keeps the relation between this feature and the normalized thrust the
        same in closed loop as in the data. With the pre-compensation ``a_cmd`` instead, a hovering
        ``geo_res`` shows the network ``a_cmd ≈ 0`` with a heavy-payload thrust — a combination
        the data never contain — and the payload estimate collapsed (1.3 m/s² vertical bias,
        helix/heavy/windy RMSE 0.095 m instead of 0.06 m).
        """
        x = features_from_obs(obs, R, self.last_a_eff, self.airframe.mass, out=self._x)
        return self.net.hidden(x)

    def _applied(self, est: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """Record the estimate and the effective command of this step; return the estimate."""
        self.last_estimate = est
        self.last_a_eff = a_cmd - est
        self.steps += 1
        return est

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return self._applied(R @ self.net.output(self._features(obs, R)), a_cmd)


class RLSGeoTracker(ResidualGeoTracker):
    """``geo_rls``: ``geo_res`` whose last layer is identified online by RLS.

    Each ``policy`` call first measures the residual of the period that just ended (from the
    previous and the current observation, :func:`measured_residual`), expresses it in the body
    frame of the previous observation, and updates the RLS with the previous regressor; then it
    predicts with the layer the RLS exposes (:attr:`LastLayerRLS.applied`: the offline one during
    warm-up). State for analysis: :attr:`last_estimate`, :attr:`last_measured`,
    :attr:`last_prediction_error` (measured − applied estimate, world, m/s²),
    :attr:`warmup_end_step`.
    """

    name = "geo_rls"

    def __init__(self, context: ControlContext | None = None, **kw: Any):
        super().__init__(context, **kw)  # calls reset() before the RLS exists
        self.rls = LastLayerRLS(self.net.theta0, self.config.rls)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        n = self.net.phi.size
        self._have_prev = False
        self._prev_obs = np.zeros(36)
        self._prev_R = np.eye(3)
        self._prev_phi = np.zeros(n)
        self._phi_f = np.zeros(n)  # low-pass filtered regressor and target
        self._y_f = np.zeros(3)
        self.last_measured = np.zeros(3)  # m/s², world
        self.last_prediction_error = np.zeros(3)  # m/s², world
        # index (0-based) of the first policy call that applied the RLS layer
        self.warmup_end_step: int | None = None
        if hasattr(self, "rls"):
            self.rls.reset()
            if self.rls.warmup_done:  # warmup_steps = 0
                self.warmup_end_step = 0

    def _learn(self, obs: np.ndarray, R: np.ndarray) -> None:
        """One RLS update: the residual of the period that just ended, in the body frame of the
        previous observation, paired with the previous regressor (whose prediction it tests).

        ``velocity``: averaged over the period (:func:`measured_residual`). ``imu``: sampled at
        its end (:func:`imu_residual`, rotated through the world frame). Pairing the IMU sample
        with the *current* regressor instead was measured and is not better (helix/extra/windy
        0.031/0.025/0.037 m vs 0.028/0.024/0.036 m).
        """
        ctx = self.airframe
        if self.config.measurement.source == "velocity":
            meas_w = measured_residual(self._prev_obs, obs, self.dt, ctx.mass, ctx.gravity)
        else:
            meas_w = R @ imu_residual(obs, ctx.mass)
        meas_b = meas_w @ self._prev_R  # R₀ᵀ Δa
        phi = self._prev_phi
        self.last_measured = meas_w
        self.last_prediction_error = meas_w - self.last_estimate
        net = self.net
        y = (meas_b - net.y_mean) * (1.0 / net.scale)
        tau = self.config.measurement.lowpass_tau
        if tau > 0.0:
            a = self.dt / (tau + self.dt)
            if self.rls.steps == 0:
                self._phi_f[...] = phi
                self._y_f[...] = y
            else:
                self._phi_f += a * (phi - self._phi_f)
                self._y_f += a * (y - self._y_f)
            phi, y = self._phi_f, self._y_f
        self.rls.update(phi, y)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        phi = self._features(obs, R)
        if self._have_prev:
            self._learn(obs, R)
            if self.warmup_end_step is None and self.rls.warmup_done:
                self.warmup_end_step = self.steps
        est = R @ self.net.output(phi, self.rls.applied)
        self._prev_phi[...] = phi
        self._prev_obs[...] = obs
        self._prev_R[...] = R
        self._have_prev = True
        return self._applied(est, a_cmd)
