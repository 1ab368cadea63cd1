"""``geo_res`` and ``geo_rls``: the geometric tracker plus residual feed-forward.

Both override only :meth:`Tracker.residual_world` of the shared tracker, so the inner loop,
gains and saturation are those of ``geo``: ``a_eff = a_cmd − Δâ``. The estimate comes from a
:class:`~residual_quad.controllers.residual.estimator.ResidualEstimator`:

* ``geo_res`` predicts Δâ with the offline network (body frame, rotated to world);
* ``geo_rls`` additionally rewrites the network's last layer online by recursive least squares
  from the residual it *measures* from observables (accelerometer by default, or the velocity
  difference) [RES §5].

Settings come from ``configs/residual.yaml`` (:class:`ResidualConfig`, strict: unknown keys are
errors) and can be overridden per controller (see :func:`residual_config`).

:class:`BatchedResidualGeoTracker` and :class:`BatchedRLSGeoTracker` are their twins for N envs
(batched ``geo`` around one
:class:`~residual_quad.controllers.residual.estimator.BatchedResidualEstimator`), for every
residual setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.batch import check_n_envs
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
from residual_quad.controllers.residual.estimator import (
    BatchedResidualEstimator,
    ResidualEstimator,
)
from residual_quad.controllers.residual.network import FastMLP, ResidualMLP
from residual_quad.controllers.rls import BatchedLastLayerRLS, LastLayerRLS
from residual_quad.controllers.trackers import ATTITUDE, GAIN_RANGES, BatchedTracker, GeoTracker

#: the options of a residual tracker that are not residual settings
_NOT_SETTINGS = ("config", "network", "attitude", "rotor_tau_s")

#: options of every residual tracker: the config, the network and the inner-loop gains, then the
#: residual settings (:data:`~residual_quad.controllers.residual.config.RESIDUAL_OPTIONS`)
RESIDUAL_TRACKER_OPTIONS: dict[str, Domain] = {
    "config": Optional(Text("a residual config path or shipped name", (Path, ResidualConfig))),
    "network": Optional(Instance((ResidualMLP,), "a ResidualMLP")),
    "attitude": ATTITUDE,
    "rotor_tau_s": NON_NEGATIVE,  # s, the rotors' time constant the tracker is told
    **RESIDUAL_OPTIONS,
}


#: the audit's objective and training scenarios of every tracker on the residual network
NETWORK_OBJECTIVE = "network: mean squared error of the measured residual"
NETWORK_SCENARIOS = (
    "the network: 81 excited geo flights (payloads none–heavy, 3 winds, the matrix's 3 "
    "trajectory shapes, env seeds 1000–1002)"
)


class EstimatorState:
    """The estimator's state as properties of a residual tracker, read by the TensorBoard logger,
    the tests and analyses: the single tracker's values, or one row per env in a batch (the
    batched estimator's arrays, ``-1`` for a warm-up end not reached)."""

    estimator: ResidualEstimator | BatchedResidualEstimator

    @property
    def net(self) -> FastMLP:
        """The private inference copy of the network."""
        return self.estimator.net

    @property
    def network_metadata(self) -> dict[str, Any]:
        return self.estimator.network_metadata

    @property
    def rls(self) -> LastLayerRLS | BatchedLastLayerRLS | None:
        """The last-layer RLS (``None`` for ``geo_res``)."""
        return self.estimator.rls

    @property
    def last_estimate(self) -> np.ndarray:
        """Δâ applied at the last step (world, m/s²)."""
        return self.estimator.last_estimate

    @property
    def last_a_eff(self) -> np.ndarray:
        """``a_cmd − Δâ`` sent to the inner loop at the last step (world, m/s²)."""
        return self.estimator.last_a_eff

    @property
    def last_measured(self) -> np.ndarray:
        """Residual measured over the last period (world, m/s²)."""
        return self.estimator.last_measured

    @property
    def last_prediction_error(self) -> np.ndarray:
        """Measured − applied estimate of the last period (world, m/s²)."""
        return self.estimator.last_prediction_error

    @property
    def rejected_updates(self) -> int | np.ndarray:
        """RLS updates skipped since the last reset for an implausible or non-finite sample."""
        return self.estimator.rejected_updates

    @property
    def nonfinite_estimates(self) -> int | np.ndarray:
        """Steps since the last reset whose non-finite estimate was replaced by zero."""
        return self.estimator.nonfinite_estimates

    @property
    def steps(self) -> int | np.ndarray:
        """Policy calls since the last reset."""
        return self.estimator.steps

    @property
    def warmup_end_step(self) -> int | None | np.ndarray:
        """Index (0-based) of the first policy call that applied the RLS layer."""
        return self.estimator.warmup_end_step


class EstimatorHooks:
    """The estimator's part of a single residual tracker (``geo_res``, ``geo_rls``,
    ``hnewton_rls``): reset with the tracker, told of a bad sample, and its estimate as the
    tracker's residual (the estimator keeps its own memories: previous observation, regressor,
    effective command a_cmd − Δâ). Put before the :class:`Tracker` base; the batched twin is
    :class:`EstimatorRows`."""

    estimator: ResidualEstimator

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)  # type: ignore[misc]
        self.estimator.reset(seed)

    def forget_previous_sample(self) -> None:
        self.estimator.forget_previous_sample()

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return applied_estimate(self.estimator, obs, R, a_cmd)


def applied_estimate(
    estimator: ResidualEstimator | BatchedResidualEstimator,
    obs: np.ndarray,
    R: np.ndarray,
    a_cmd: np.ndarray,
) -> np.ndarray:
    """The Δâ a residual tracker subtracts from ``a_cmd`` (world, m/s²; one vehicle or a batch):
    the estimator's, with its body-z part on the axis its ``thrust_axis`` setting names
    (:mod:`~residual_quad.controllers.residual.application`); the effective command the
    estimator records for its next features is then the one actually sent."""
    estimate = estimator.estimate(obs, R, a_cmd)
    if estimator.config.thrust_axis == "achieved":
        return estimate
    applied = commanded_axis_residual(a_cmd, estimate, R, estimator.gravity)
    estimator.set_command(a_cmd - applied)
    return applied


class ResidualGeoTracker(EstimatorState, EstimatorHooks, GeoTracker):
    """``geo_res``: geometric tracking + offline residual network feed-forward.

    Args:
        context: nominal airframe and control period.
        config: a :class:`ResidualConfig`, a YAML path, or ``None`` for ``configs/residual.yaml``.
        network: a :class:`ResidualMLP` to use instead of ``config.weights`` (deep-copied).
        attitude: inner-loop gains.
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal rotors); the
            residual is then measured against its model of the lagged thrusts (:class:`Tracker`).
        **overrides: settings overriding the config (see :func:`residual_config`).

    The estimator's state is exposed for analysis and logging (:class:`EstimatorState`):
    :attr:`last_estimate`, :attr:`net`, :attr:`rls` (``None`` here), ... (see
    :class:`ResidualEstimator`).
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
        rotor_tau_s: float = 0.0,  # s, the rotors' time constant the tracker is told (0: ideal)
        **overrides: Any,
    ):
        context = context or ControlContext()
        self.config = cfg = self.settings(config, **overrides)
        self.estimator = ResidualEstimator(context, cfg, network, learn=self.learn)
        super().__init__(context, kp=cfg.kp, kd=cfg.kd, attitude=attitude, rotor_tau_s=rotor_tau_s)

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


# ----------------------------------------------------------------------------- N envs
class EstimatorRows:
    """The batched estimator's part of a batched residual tracker (``geo_res``, ``geo_rls``,
    ``hnewton_rls``): its rows reset with the env, restored after a bad sample, and its estimate
    as the tracker's residual. Put before the :class:`BatchedTracker` base."""

    estimator: BatchedResidualEstimator

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)  # type: ignore[misc]
        self.estimator.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        return [*super()._row_state(), *self.estimator.row_state()]  # type: ignore[misc]

    def _forget_rows(self, rows: np.ndarray) -> None:
        self.estimator.forget_previous_sample(rows)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return applied_estimate(self.estimator, obs, R, a_cmd)


class BatchedResidualGeoTracker(EstimatorState, EstimatorRows, BatchedTracker):
    """``geo_res`` for N envs: batched ``geo`` and one :class:`BatchedResidualEstimator`.

    Args: as :class:`ResidualGeoTracker`, plus ``n_envs``; every residual setting (OOD guard,
    output filter, EFRA covariance) has its vectorized form.
    """

    name = "geo_res"
    #: the single twin, whose settings (defaults included) this batch uses
    single: type[ResidualGeoTracker] = ResidualGeoTracker
    #: the options that are not residual settings
    not_settings: tuple[str, ...] = _NOT_SETTINGS

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float = 0.0,  # s, the rotors' time constant the tracker is told (0: ideal)
        **overrides: Any,
    ):
        context = context or ControlContext()
        n_envs = check_n_envs(n_envs)
        self.config = cfg = self.single.settings(config, **overrides)
        self.estimator = BatchedResidualEstimator(
            context, cfg, n_envs, network, learn=self.single.learn
        )
        super().__init__(
            context, n_envs, kp=cfg.kp, kd=cfg.kd, attitude=attitude, rotor_tau_s=rotor_tau_s
        )

    @classmethod
    def vectorizes(cls, options: Mapping[str, Any]) -> bool:
        """Every residual setting is vectorized (OOD guard, output filter, both covariance
        schemes, the rotor model); bad settings raise the single tracker's error here."""
        rest = {k: v for k, v in options.items() if k not in cls.not_settings}
        cls.single.settings(options.get("config"), **rest)
        return True


class BatchedRLSGeoTracker(BatchedResidualGeoTracker):
    """``geo_rls`` for N envs: per-env RLS state (θ, P, filters, warm-up, previous step)."""

    name = "geo_rls"
    single = RLSGeoTracker


ResidualGeoTracker.batched = BatchedResidualGeoTracker
RLSGeoTracker.batched = BatchedRLSGeoTracker
