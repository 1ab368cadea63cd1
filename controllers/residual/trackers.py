"""``geo_res`` and ``geo_rls``: the geometric tracker plus residual feed-forward.

Both override only :meth:`Tracker.residual_world` of the shared tracker, so the inner loop,
gains and saturation are those of ``geo``: ``a_eff = a_cmd − Δâ``. The estimate comes from a
:class:`~residual_quad.controllers.residual.estimator.ResidualEstimator`:

* ``geo_res`` predicts Δâ with the offline network (body frame, rotated to world);
* ``geo_rls`` additionally rewrites the network's last layer online by recursive least squares
  from the residual it *measures* from observables (accelerometer by default, or the velocity
  difference) [RES §5].

Settings come from ``configs/residual.yaml`` (:class:`ResidualConfig`, strict: unknown keys are
errors) and can be overridden per controller (see :func:`residual_config`). Both are laws
(:mod:`residual_quad.controllers.law`): the estimator's state is the ``estimator`` part of the
tracker's state (``controller.state.estimator``), one row per env in a batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.feedforward import LAG_FF_LEAD_S
from residual_quad.controllers.indi import DEFAULT_INDI_HZ
from residual_quad.controllers.options import (
    NON_NEGATIVE,
    Domain,
    Instance,
    Optional,
    Range,
    Text,
)
from residual_quad.controllers.residual.application import commanded_axis_residual
from residual_quad.controllers.residual.config import (
    RESIDUAL_OPTIONS,
    ResidualConfig,
    residual_config,
)
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.trackers import (
    ATTITUDE,
    GAIN_RANGES,
    LOOP_OPTIONS,
    GeoTracker,
    TrackerState,
)

#: options of every residual tracker: the config, the network and the inner-loop gains, then the
#: residual settings (:data:`~residual_quad.controllers.residual.config.RESIDUAL_OPTIONS`)
RESIDUAL_TRACKER_OPTIONS: dict[str, Domain] = {
    "config": Optional(Text("a residual config path or shipped name", (Path, ResidualConfig))),
    "network": Optional(Instance((ResidualMLP,), "a ResidualMLP")),
    "attitude": ATTITUDE,
    "rotor_tau_s": NON_NEGATIVE,  # s, the rotors' time constant the tracker is told
    **LOOP_OPTIONS,
    **RESIDUAL_OPTIONS,
}


#: the audit's objective and training scenarios of every tracker on the residual network
NETWORK_OBJECTIVE = "network: mean squared error of the measured residual"
NETWORK_SCENARIOS = (
    "the network: 81 excited geo flights (payloads none–heavy, 3 winds, the matrix's 3 "
    "trajectory shapes, env seeds 1000–1002)"
)


def applied_estimate(
    estimator: ResidualEstimator,
    state: Any,
    obs: np.ndarray,
    R: np.ndarray,
    a_cmd: np.ndarray,
) -> tuple[Any, np.ndarray]:
    """The estimator's next state and the Δâ a residual tracker subtracts from ``a_cmd`` (world,
    m/s²; one vehicle (3,) or N envs (n, 3)): the estimator's, with its body-z part on the axis
    its ``thrust_axis`` setting names (:mod:`~residual_quad.controllers.residual.application`);
    the effective command the estimator records for its next features is then the one
    actually sent."""
    one = np.ndim(a_cmd) == 1
    if one:
        state, estimate = estimator.estimate_one(state, obs, R, a_cmd)
    else:
        state, estimate = estimator.estimate(state, obs, R, a_cmd)
    if estimator.config.thrust_axis == "achieved":
        return state, estimate
    applied = commanded_axis_residual(a_cmd, estimate, R, estimator.gravity)
    if one:
        return estimator.set_command_one(state, a_cmd - applied), applied
    return estimator.set_command(state, a_cmd - applied), applied


class EstimatorParts:
    """The estimator's part of a residual tracker law (``geo_res``, ``geo_rls``,
    ``hnewton_rls``): its state in the tracker's (``estimator``), its estimate as the
    tracker's residual, told of a bad sample. Put before the tracker base class; the subclass
    sets ``self.estimator`` before the base's ``__init__``."""

    estimator: ResidualEstimator
    #: s, the feed-forward's lead behind lagging rotors
    lag_ff_lead_s = LAG_FF_LEAD_S

    def init_state(self, n: int) -> TrackerState:
        state = super().init_state(n)  # type: ignore[misc]
        return state._replace(estimator=self.estimator.init_state(n))

    def init_one(self) -> TrackerState:
        state = super().init_one()  # type: ignore[misc]
        return state._replace(estimator=self.estimator.init_one())

    def forget(self, state: TrackerState, rows: np.ndarray) -> TrackerState:
        state = super().forget(state, rows)  # type: ignore[misc]
        return state._replace(estimator=self.estimator.forget(state.estimator, rows))

    def forget_one(self, state: TrackerState) -> TrackerState:
        state = super().forget_one(state)  # type: ignore[misc]
        return state._replace(estimator=self.estimator.forget_one(state.estimator))

    def residual(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        est, applied = applied_estimate(self.estimator, state.estimator, obs, R, a_cmd)
        return state._replace(estimator=est), applied

    residual_one = residual


#: s, the estimate's output low-pass behind rotor lag: unfiltered, geo_rls's online estimate
#: put pid's error back up (heavy / extra, windy, realistic plant: 0.092 / 0.109 m against pid's
#: 0.068 / 0.076 m, at +5 % control effort); low-passed at 0.2 s, 0.042 / 0.044 m at pid's
#: effort (docs/controllers.md, "Lagged rotors")
LAG_ESTIMATE_TAU_S = 0.2


def lag_settings(context: ControlContext, config: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with what every residual tracker (``geo_res``, ``geo_rls``,
    ``geo_rls_dob``, ``hnewton_rls``) does behind lagging rotors when no ``config`` is given:
    the estimate applied along the commanded thrust axis and low-passed at
    :data:`LAG_ESTIMATE_TAU_S` (an option given wins; docs/controllers.md, "Lagged rotors")."""
    if config is not None or context.rotor_tau_s <= 0.0:
        return overrides
    out = {"thrust_axis": "commanded", **overrides}
    if not {"tau", "output_filter"} & set(out):
        out["tau"] = LAG_ESTIMATE_TAU_S
    return out


class ResidualGeoTracker(EstimatorParts, GeoTracker):
    """``geo_res``: geometric tracking + offline residual network feed-forward.

    Args:
        context: nominal airframe and control period.
        config: a :class:`ResidualConfig`, a YAML path, or ``None`` for ``configs/residual.yaml``.
        network: a :class:`ResidualMLP` to use instead of ``config.weights`` (deep-copied).
        attitude: inner-loop gains.
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal rotors; ``None``:
            the context's); the
            residual is then measured against its model of the lagged thrusts (:class:`Tracker`).
        attitude_loop, mixer, indi_hz, indi_adapt, predict_latency, outer_indi_hz, ff_lead_s:
            the attitude loop (``"pd"`` or ``"indi"``), the mixer, the latency predictor,
            outer-loop INDI and the feed-forward's lead, as every tracker's.
        **overrides: settings overriding the config (see :func:`residual_config`).

    The estimator's state is ``state.estimator`` of the driver (:class:`~residual_quad.
    controllers.residual.estimator.EstimatorState`: ``last_estimate``, ``rls``, ... — ``rls`` is
    ``None`` here); its network is :attr:`estimator` ``.net``.
    """

    name = "geo_res"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="previous command (a network input); Δâ low-pass τ 0.2 s",
        residual_estimate="offline network",
        tuning="geo's gains; output low-pass τ: 4 values measured, 0.2 s kept (docs/adaptive.md)",
        learned="residual",
        objective=NETWORK_OBJECTIVE,
        tuning_trials=4,
        training_scenarios=NETWORK_SCENARIOS,
    )
    OPTIONS: dict[str, Domain] = RESIDUAL_TRACKER_OPTIONS
    #: the gains and the estimate's output low-pass (s)
    TUNABLE: dict[str, Range] = {**GAIN_RANGES, "tau": Range(0.01, 0.5, log=True)}
    #: identify the network's last layer online (``geo_rls``)
    learn = False
    #: settings this tracker applies over ``configs/residual.yaml`` when no ``config`` is given
    #: (keyword overrides still win): ``geo_res`` low-passes its estimate with 0.2 s — the
    #: unfiltered offline prediction sustained a 13–19° tilt oscillation in the payload hovers
    #: (control cost +6 % over ``geo``, ``docs/adaptive.md``)
    default_settings: dict[str, Any] = {"output_filter": {"tau": 0.2}}

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float | None = None,  # s, the rotors' time constant (None: the context's)
        attitude_loop: str | None = None,
        mixer: str | None = None,
        indi_hz: float = DEFAULT_INDI_HZ,  # Hz
        indi_adapt: float | None = None,
        predict_latency: bool | None = None,
        outer_indi_hz: float = 0.0,  # Hz (0: no outer-loop INDI)
        ff_lead_s: float | None = None,  # s (None: the context's default)
        **overrides: Any,
    ):
        context = context or ControlContext()
        overrides = lag_settings(context, config, overrides)
        self.config = cfg = self.settings(config, **overrides)
        self.estimator = ResidualEstimator(context, cfg, network, learn=self.learn)
        super().__init__(
            context,
            kp=cfg.kp,
            kd=cfg.kd,
            attitude=attitude,
            rotor_tau_s=rotor_tau_s,
            attitude_loop=attitude_loop,
            mixer=mixer,
            indi_hz=indi_hz,
            indi_adapt=indi_adapt,
            predict_latency=predict_latency,
            outer_indi_hz=outer_indi_hz,
            ff_lead_s=ff_lead_s,
        )

    @classmethod
    def settings(
        cls, config: str | Path | ResidualConfig | None = None, **overrides: Any
    ) -> ResidualConfig:
        """The settings of this tracker: ``config`` (``None``: ``configs/residual.yaml`` with
        :attr:`default_settings`) with ``overrides``."""
        if config is None:
            overrides = {**cls.default_settings, **overrides}
        return residual_config(config, **overrides)


class RLSGeoTracker(ResidualGeoTracker):
    """``geo_rls``: ``geo_res`` whose last layer is identified online by RLS.

    Each ``policy`` call first measures the residual of the period that just ended and updates
    the RLS, then predicts with the layer the RLS exposes (the offline one during warm-up); see
    :class:`ResidualEstimator`.
    """

    name = "geo_rls"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="previous command and observation; RLS state (λ 0.99, ≈ 1 s)",
        residual_estimate="offline network, last layer by online RLS",
        tuning="geo's gains; the source's RLS settings [RES] (p0 0.01, λ 0.99, warm-up 100)",
        learned="residual",
        objective=NETWORK_OBJECTIVE,
        training_scenarios=NETWORK_SCENARIOS,
    )
    learn = True
    default_settings: dict[str, Any] = {}  # the shipped config as it is (the source's geo_rls)
    #: the gains, the RLS forgetting factor and prior covariance (normalized units)
    TUNABLE: dict[str, Range] = {
        **GAIN_RANGES,
        "forgetting": Range(0.95, 0.999),
        "p0": Range(1e-3, 1.0, log=True),
    }
