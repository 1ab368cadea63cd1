"""One residual estimator for every residual tracker: network, measurement, low-pass filter, RLS.

``geo_res`` (no RLS), ``geo_rls`` and ``hnewton_rls`` all hold a :class:`ResidualEstimator` and ask
it once per control step for ``Δâ`` (world, m/s²), the residual acceleration they cancel by
feed-forward.

With ``learn=True`` each :meth:`ResidualEstimator.estimate` call first measures the residual of
the period that just ended (act → step → observe: from the previous and the current observation),
expresses it in the body frame of the previous observation, and updates the RLS on the network's
last layer with the previous regressor [RES §5]; then it predicts with the layer the RLS exposes
(:attr:`LastLayerRLS.applied`: the offline one during warm-up).

Bad samples are rejected, never learned from: an update is skipped (the RLS state and the previous
estimate stay) when the measured residual is non-finite or its norm exceeds
``measurement.max_residual`` (25 m/s² by default, the offline data's rejection threshold), or
when the previous step's regressor was non-finite; :attr:`ResidualEstimator.rejected_updates`
counts them. A non-finite estimate (NaN/inf in the observation's velocity, rates or thrusts) is
never handed to the controller: it falls back to zero residual for that step and
:attr:`ResidualEstimator.nonfinite_estimates` counts it. On clean data neither check fires and
the estimates are bit for bit those without them.

The estimator holds a private :class:`FastMLP` built from a deep copy of the network; ``reset()``
restores its last layer and the RLS from that private copy, so no run can contaminate another
(the private copy is one of the safeguards of [RES §5.1]).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.residual.config import OODGuardConfig, ResidualConfig
from residual_quad.controllers.residual.features import (
    FEATURE_NAMES,
    features_from_obs,
    features_from_obs_batch,
    imu_residual,
    imu_residual_batch,
    measured_residual,
    measured_residual_batch,
)
from residual_quad.controllers.residual.network import FastMLP, ResidualMLP, load_network
from residual_quad.controllers.rls import BatchedLastLayerRLS, LastLayerRLS
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.xp import ARRAYS, FLOATS, Namespace


def ood_statistics(
    config: ResidualConfig, net: ResidualMLP
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The OOD guard's indices of the guarded features, their training means and inverse
    standard deviations (the network's own statistics)."""
    idx = [FEATURE_NAMES.index(f) for f in config.ood.features]
    mean = np.asarray(net.x_mean, dtype=float)[idx]
    return np.array(idx, dtype=int), mean, 1.0 / np.asarray(net.x_std, dtype=float)[idx]


def guard_weight(
    xp: Namespace,
    ood: OODGuardConfig,
    z_max: Any,
    heading_err: Any,
    previous: Any,
    dt: float,
) -> Any:
    """The OOD guard's weight of the network's estimate (:class:`OODGuardConfig`), the one
    formula of the single and the batched estimator: ``xp`` is :class:`~residual_quad.envs.xp.
    FLOATS` (Python floats) or :class:`~residual_quad.envs.xp.ARRAYS` (arrays (N,)). ``z_max``:
    the largest standardized guarded feature (inf when one is not finite); ``heading_err``:
    |ψ − ψ_ref| (rad; NaN gives weight 0); ``previous``: last step's weight; ``dt``: control
    period, s. Each ``where`` is Python's ``min``/``max`` of two floats."""
    w = (ood.z_off - z_max) / (ood.z_off - ood.z_on)
    w = xp.where(w > 0.0, w, 0.0)  # max(0, ·)
    w = xp.where(w < 1.0, w, 1.0)  # min(1, ·)
    h = (ood.heading_off - heading_err) / (ood.heading_off - ood.heading_on)
    h = xp.where(h > 0.0, h, 0.0)  # NaN error: 0
    w = xp.where(h < w, h, w)
    if ood.recover_s > 0.0:
        r = previous + dt / ood.recover_s
        w = xp.where(r < w, r, w)
    return w


class ResidualEstimator:
    """Residual acceleration estimate ``Δâ`` (world, m/s²) from the observation stream.

    Args:
        context: nominal airframe (mass, gravity) and control period.
        config: the residual settings (``weights``, ``measurement``, ``rls``; the gains are the
            tracker's).
        network: a :class:`ResidualMLP` to use instead of ``config.weights`` (deep-copied).
        learn: identify the last layer online by RLS (``geo_rls``, ``hnewton_rls``); ``False``
            predicts with the offline network only (``geo_res``).

    State for analysis, all world frame in m/s²: :attr:`last_estimate` (Δâ of the last call),
    :attr:`last_a_eff` (``a_cmd − Δâ``), :attr:`last_measured` and :attr:`last_prediction_error`
    (measured − applied estimate); :attr:`steps` (calls since reset), :attr:`warmup_end_step`
    (index of the first call that applied the RLS layer) and :attr:`rls` (``None`` without
    learning); :attr:`rejected_updates` and :attr:`nonfinite_estimates` count the bad samples
    (see the module docstring).
    """

    def __init__(
        self,
        context: ControlContext,
        config: ResidualConfig,
        network: ResidualMLP | None = None,
        *,
        learn: bool = True,
    ):
        self.config = config
        self.mass = context.airframe.mass  # kg, nominal
        self.gravity = context.airframe.gravity  # m/s²
        self.dt = context.control_dt  # s
        net = network.copy() if network is not None else load_network(config.weights)
        self.net = FastMLP(net)  # private copy; FastMLP copies again (theta0 is never written)
        self.network_metadata: dict[str, Any] = dict(net.metadata)
        self.rls = LastLayerRLS(self.net.theta0, config.rls) if learn else None
        self._x = np.empty(net.sizes[0])
        n = self.net.phi.size
        self._prev_obs = np.zeros(OBS_DIM)
        self._prev_R = np.eye(3)
        self._prev_phi = np.zeros(n)
        self._phi_f = np.zeros(n)  # low-pass filtered regressor and target
        self._y_f = np.zeros(3)
        self._max_residual_sq = config.measurement.max_residual**2  # (m/s²)²
        self._ood_idx, self._ood_mean, self._ood_inv_std = ood_statistics(config, net)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Back to the offline network and the RLS prior, with no memory of a previous step."""
        self.ood_weight = 1.0  # weight of the network's estimate at the last step (guard)
        self.ood_steps = 0  # steps since reset with the guard acting (weight < 1)
        self._prev_ood_weight = 1.0
        self._heading_err = 0.0  # rad, |ψ − ψ_ref| of this step (OOD guard)
        self._hold = np.zeros(3)  # m/s², world, last estimate made fully inside the envelope
        self._filtered = np.zeros(3)  # m/s², world, output filter state
        self.net.theta[...] = self.net.theta0
        self.last_estimate = np.zeros(3)  # m/s², world, Δâ applied at the last step
        self.last_a_eff = np.zeros(3)  # m/s², world, a_cmd − Δâ sent to the inner loop
        self.steps = 0
        self.nonfinite_estimates = 0  # estimates replaced by zero (non-finite input)
        self._rejected = 0  # measurements rejected here (the RLS counts its own in rls.rejected)
        self._est_ok = True  # the last estimate (hence its regressor and rotation) was finite
        self._have_prev = False
        self._prev_obs[...] = 0.0
        self._prev_R[...] = np.eye(3)
        self._prev_phi[...] = 0.0
        self._phi_f[...] = 0.0
        self._y_f[...] = 0.0
        self.last_measured = np.zeros(3)  # m/s², world
        self.last_prediction_error = np.zeros(3)  # m/s², world
        # index (0-based) of the first call that applied the RLS layer
        self.warmup_end_step: int | None = None
        if self.rls is not None:
            self.rls.reset()
            if self.rls.warmup_done:  # warmup_steps = 0
                self.warmup_end_step = 0

    def set_command(self, a_eff: np.ndarray) -> None:
        """Replace the effective command recorded at the last :meth:`estimate` call (the next
        call's ``a_cmd`` feature) by ``a_eff`` (world, m/s²): for a controller that decides its
        command after asking for the estimate (``ppo_adapt``), ``a_eff`` is the acceleration the
        nominal model expects from the thrust it actually commands — what ``a_cmd − Δâ`` is for
        a tracker. A non-finite ``a_eff`` is stored as zero (as :meth:`estimate` does)."""
        a = np.array(a_eff, dtype=float)
        self.last_a_eff = a if np.all(np.isfinite(a)) else np.zeros(3)

    def forget_previous_sample(self) -> None:
        """The next observation does not follow the last one (a bad sample came between, which
        the controller's guard kept from the estimator): the next call learns nothing, since no
        measured period ends with it; the RLS, the filters and the estimate are kept."""
        self._have_prev = False

    def estimate(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """``Δâ`` (world, m/s²) for observation ``obs`` with body → world rotation ``R``, given
        this step's commanded acceleration ``a_cmd`` (world, m/s², before the compensation)."""
        phi = self._regressor(obs, R)
        if self.config.ood.enabled:
            err = math.atan2(R[1, 0], R[0, 0]) - float(obs[L.ref_yaw])
            self._heading_err = abs(math.remainder(err, math.tau))  # rad
        if self.rls is None:
            return self._applied(self._post(R @ self.net.output(phi)), a_cmd)
        if self._have_prev:
            if self._prev_ood_weight == 1.0:
                self._learn(obs, R)
            if self.warmup_end_step is None and self.rls.warmup_done:
                self.warmup_end_step = self.steps
        est = R @ self.net.output(phi, self.rls.applied)
        self._prev_phi[...] = phi
        self._prev_obs[...] = obs[..., :OBS_DIM]  # the base fields (a preview follows)
        self._prev_R[...] = R
        self._have_prev = True
        est = self._post(est)  # sets this step's ood_weight
        self._prev_ood_weight = self.ood_weight if self.config.ood.enabled else 1.0
        return self._applied(est, a_cmd)

    def _post(self, est: np.ndarray) -> np.ndarray:
        """The OOD guard's blend and the output filter (both off by default: ``est`` itself)."""
        cfg = self.config
        if cfg.ood.enabled:
            z = np.abs((self._x[self._ood_idx] - self._ood_mean) * self._ood_inv_std)
            s = float(z.max()) if np.all(np.isfinite(z)) else math.inf
            w = guard_weight(FLOATS, cfg.ood, s, self._heading_err, self.ood_weight, self.dt)
            self.ood_weight = w
            if w == 1.0:
                if np.all(np.isfinite(est)):
                    self._hold = est.copy()
            else:
                self.ood_steps += 1
                fallback = self._hold if cfg.ood.fallback == "hold" else np.zeros(3)
                est = w * est + (1.0 - w) * fallback if w > 0.0 else fallback.copy()
        tau = cfg.output_filter.tau
        if tau > 0.0 and np.all(np.isfinite(est)):
            if self.steps == 0:
                self._filtered = est.copy()
            else:
                self._filtered = self._filtered + (self.dt / (tau + self.dt)) * (
                    est - self._filtered
                )
            est = self._filtered.copy()
        return est

    # -- steps -----------------------------------------------------------------------------------
    def _regressor(self, obs: np.ndarray, R: np.ndarray) -> np.ndarray:
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
        x = features_from_obs(obs, R, self.last_a_eff, self.mass, out=self._x)
        return self.net.hidden(x)

    @property
    def rejected_updates(self) -> int:
        """RLS updates skipped since the last reset: implausible or non-finite measurements and
        non-finite regressors (0 without learning)."""
        return 0 if self.rls is None else self._rejected + self.rls.rejected

    def _applied(self, est: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """Record the estimate and the effective command of this step; return the estimate.

        A non-finite estimate becomes zero (counted in :attr:`nonfinite_estimates`); a
        non-finite effective command (from a non-finite ``a_cmd``) is stored as zero so that it
        cannot feed the next step's features. One float sum checks both on the clean path.
        """
        a_eff = a_cmd - est
        x, y, z = a_eff.tolist()
        self._est_ok = True
        if not math.isfinite(x + y + z):  # rare: NaN/inf somewhere
            if not np.all(np.isfinite(est)):
                self.nonfinite_estimates += 1
                self._est_ok = False
                est = np.zeros(3)
                a_eff = np.array(a_cmd, dtype=float)
            if not np.all(np.isfinite(a_eff)):
                a_eff = np.zeros(3)
        self.last_estimate = est
        self.last_a_eff = a_eff
        self.steps += 1
        return est

    def _learn(self, obs: np.ndarray, R: np.ndarray) -> None:
        """One RLS update: the residual of the period that just ended, in the body frame of the
        previous observation, paired with the previous regressor (whose prediction it tests).

        ``velocity``: averaged over the period (:func:`measured_residual`). ``imu``: sampled at
        its end (:func:`imu_residual`, rotated through the world frame). Pairing the IMU sample
        with the *current* regressor instead was measured and is not better (helix/extra/windy
        0.031/0.025/0.037 m vs 0.028/0.024/0.036 m).
        """
        assert self.rls is not None
        if self.config.measurement.source == "velocity":
            meas_w = measured_residual(self._prev_obs, obs, self.dt, self.mass, self.gravity)
        else:
            meas_w = R @ imu_residual(obs, self.mass)
        mx, my, mz = meas_w.tolist()
        # NaN fails the comparison; a non-finite previous estimate means a non-finite regressor
        if not (mx * mx + my * my + mz * mz <= self._max_residual_sq and self._est_ok):
            self._rejected += 1  # no update: θ, P, the filters and the diagnostics stay
            return
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


class BatchedResidualEstimator:
    """:class:`ResidualEstimator` for N independent envs, vectorized over the batch.

    Per-env state: the previous observation, rotation and regressor, the low-pass filters, the
    RLS (:class:`BatchedLastLayerRLS`: θ, P, warm-up counters), the rejection and non-finite
    counters and the warm-up end step (``-1`` while not reached). Every rule of the single
    estimator holds per env (rejection of implausible or non-finite measurements, the warm-up,
    the non-finite fallback); :meth:`reset` takes an env index so that one env can autoreset.

    Args: as :class:`ResidualEstimator`, plus ``n_envs``.
    """

    #: attributes holding one row of state per env (a batch controller restores the rows of an
    #: env whose observation was not finite)
    ROW_STATE: tuple[str, ...] = (
        "_prev_obs",
        "_prev_R",
        "_prev_phi",
        "_phi_f",
        "_y_f",
        "last_estimate",
        "last_a_eff",
        "last_measured",
        "last_prediction_error",
        "steps",
        "nonfinite_estimates",
        "_rejected",
        "_est_ok",
        "_have_prev",
        "warmup_end_step",
        "_filtered",
        "ood_weight",
        "ood_steps",
        "_prev_ood_weight",
        "_hold",
    )

    def __init__(
        self,
        context: ControlContext,
        config: ResidualConfig,
        n_envs: int,
        network: ResidualMLP | None = None,
        *,
        learn: bool = True,
    ):
        self.config = config
        self.n_envs = N = int(n_envs)
        self.mass = context.airframe.mass  # kg, nominal
        self.gravity = context.airframe.gravity  # m/s²
        self.dt = context.control_dt  # s
        net = network.copy() if network is not None else load_network(config.weights)
        self.net = FastMLP(net)  # shared weights below the last layer (never written)
        self.network_metadata: dict[str, Any] = dict(net.metadata)
        self.rls = BatchedLastLayerRLS(self.net.theta0, N, config.rls) if learn else None
        self._theta0 = np.broadcast_to(self.net.theta0, (N, *self.net.theta0.shape))
        n = self.net.phi.size
        self._prev_obs = np.zeros((N, OBS_DIM))
        self._prev_R = np.zeros((N, 3, 3))
        self._prev_phi = np.zeros((N, n))
        self._phi_f = np.zeros((N, n))
        self._y_f = np.zeros((N, 3))
        self.last_estimate = np.zeros((N, 3))  # m/s², world
        self.last_a_eff = np.zeros((N, 3))  # m/s², world
        self.last_measured = np.zeros((N, 3))  # m/s², world
        self.last_prediction_error = np.zeros((N, 3))  # m/s², world
        self.steps = np.zeros(N, dtype=np.int64)
        self.nonfinite_estimates = np.zeros(N, dtype=np.int64)
        self._rejected = np.zeros(N, dtype=np.int64)
        self._est_ok = np.ones(N, dtype=bool)
        self._have_prev = np.zeros(N, dtype=bool)
        self.warmup_end_step = np.full(N, -1, dtype=np.int64)
        self._filtered = np.zeros((N, 3))  # m/s², world, output filter state
        self._max_residual_sq = config.measurement.max_residual**2  # (m/s²)²
        # OOD guard: per env the weight of the network's estimate, the steps it acted, the
        # previous step's weight (learning needs 1) and the last in-envelope estimate
        self.ood_weight = np.ones(N)
        self.ood_steps = np.zeros(N, dtype=np.int64)
        self._prev_ood_weight = np.ones(N)
        self._hold = np.zeros((N, 3))  # m/s², world
        self._ood_idx, self._ood_mean, self._ood_inv_std = ood_statistics(config, net)
        self.reset()

    def row_state(self) -> list[tuple[Any, str]]:
        """(holder, attribute) of every per-env array: this estimator's :data:`ROW_STATE` and its
        RLS's — what a caller saves and restores around a batch some rows sit out."""
        state = [(self, a) for a in self.ROW_STATE]
        if self.rls is not None:
            state += [(self.rls, a) for a in self.rls.ROW_STATE]
        return state

    def reset(self, index: int | slice = slice(None)) -> None:
        """Back to the offline network and the RLS prior for the envs ``index`` (default: all)."""
        for buf in (
            self.last_estimate,
            self.last_a_eff,
            self.last_measured,
            self.last_prediction_error,
            self._prev_obs,
            self._prev_phi,
            self._phi_f,
            self._y_f,
            self._filtered,
            self._hold,
        ):
            buf[index] = 0.0
        self.ood_weight[index] = 1.0
        self.ood_steps[index] = 0
        self._prev_ood_weight[index] = 1.0
        self._prev_R[index] = np.eye(3)
        self.steps[index] = 0
        self.nonfinite_estimates[index] = 0
        self._rejected[index] = 0
        self._est_ok[index] = True
        self._have_prev[index] = False
        self.warmup_end_step[index] = -1
        if self.rls is not None:
            self.rls.reset(index)
            if self.config.rls.warmup_steps == 0:
                self.warmup_end_step[index] = 0

    @property
    def rejected_updates(self) -> np.ndarray:
        """(N,) RLS updates skipped since each env's reset (zeros without learning)."""
        if self.rls is None:
            return np.zeros(self.n_envs, dtype=np.int64)
        return self._rejected + self.rls.rejected

    def set_command(self, a_eff: np.ndarray) -> None:
        """As :meth:`ResidualEstimator.set_command`, per env: ``a_eff`` (N, 3), world, m/s²."""
        a = np.array(a_eff, dtype=float)
        self.last_a_eff = np.where(np.all(np.isfinite(a), axis=1)[:, None], a, 0.0)

    def forget_previous_sample(self, rows: np.ndarray) -> None:
        """As :meth:`ResidualEstimator.forget_previous_sample`, for the envs ``rows`` (N,) bool."""
        self._have_prev[rows] = False

    def estimate(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """``Δâ`` (N, 3) (world, m/s²) for observations ``obs`` (N, 36) with rotations ``R``
        (N, 3, 3) and commands ``a_cmd`` (N, 3) (world, m/s², before the compensation)."""
        x = features_from_obs_batch(obs, R, self.last_a_eff, self.mass)
        phi = self.net.hidden_batch(x)
        heading_err = None
        if self.config.ood.enabled:
            err = np.arctan2(R[:, 1, 0], R[:, 0, 0]) - obs[:, L.ref_yaw]
            heading_err = np.abs(err - np.round(err / math.tau) * math.tau)  # rad, remainder
        if self.rls is None:
            est_b = self.net.output_batch(phi, self._theta0)
            est = self._post(np.einsum("nij,nj->ni", R, est_b), x, heading_err)
            return self._applied(est, a_cmd)
        have = self._have_prev
        if have.any():
            self._learn(obs, R, have & (self._prev_ood_weight == 1.0))
            reached = have & (self.warmup_end_step < 0) & self.rls.warmup_done
            self.warmup_end_step[reached] = self.steps[reached]
        est = np.einsum("nij,nj->ni", R, self.net.output_batch(phi, self.rls.applied))
        self._prev_phi[...] = phi
        self._prev_obs[...] = obs[..., :OBS_DIM]  # the base fields (a preview follows)
        self._prev_R[...] = R
        self._have_prev[...] = True
        est = self._post(est, x, heading_err)  # sets this step's ood_weight
        if self.config.ood.enabled:
            self._prev_ood_weight = self.ood_weight.copy()
        return self._applied(est, a_cmd)

    def _post(self, est: np.ndarray, x: np.ndarray, heading_err: np.ndarray | None) -> np.ndarray:
        """The OOD guard's blend and the output filter of :meth:`ResidualEstimator._post`, per
        env (features ``x`` (N, n_in), heading errors (N,) rad; rows with a non-finite estimate
        pass the filter unfiltered and leave it as it was)."""
        ood = self.config.ood
        if ood.enabled:
            z = np.abs((x[:, self._ood_idx] - self._ood_mean) * self._ood_inv_std)
            z_max = np.where(np.all(np.isfinite(z), axis=1), z.max(axis=1), math.inf)
            w = guard_weight(ARRAYS, ood, z_max, heading_err, self.ood_weight, self.dt)
            self.ood_weight = w
            full = w == 1.0
            keep = full & np.all(np.isfinite(est), axis=1)
            self._hold = np.where(keep[:, None], est, self._hold)
            self.ood_steps += ~full
            fallback = self._hold if ood.fallback == "hold" else np.zeros_like(est)
            wc = w[:, None]
            blend = np.where(wc > 0.0, wc * est + (1.0 - wc) * fallback, fallback)
            est = np.where(full[:, None], est, blend)
        tau = self.config.output_filter.tau
        if tau <= 0.0:
            return est
        a = self.dt / (tau + self.dt)
        ok = np.all(np.isfinite(est), axis=1)[:, None]
        first = (self.steps == 0)[:, None]
        f = self._filtered
        new = np.where(first, est, f + a * (est - f))
        self._filtered = np.where(ok, new, f)
        return np.where(ok, self._filtered, est)

    def _applied(self, est: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """As :meth:`ResidualEstimator._applied`, per env."""
        a_eff = a_cmd - est
        self._est_ok[...] = True
        bad = ~np.isfinite(a_eff.sum(axis=1))
        if bad.any():
            est_bad = bad & ~np.all(np.isfinite(est), axis=1)
            self.nonfinite_estimates += est_bad
            self._est_ok[est_bad] = False
            est = np.where(est_bad[:, None], 0.0, est)
            a_eff = np.where(est_bad[:, None], a_cmd, a_eff)
            a_eff = np.where(np.all(np.isfinite(a_eff), axis=1)[:, None], a_eff, 0.0)
        self.last_estimate = est
        self.last_a_eff = a_eff
        self.steps += 1
        return est

    def _learn(self, obs: np.ndarray, R: np.ndarray, have: np.ndarray) -> None:
        """As :meth:`ResidualEstimator._learn`, for the envs in ``have`` (N,) bool."""
        assert self.rls is not None
        if self.config.measurement.source == "velocity":
            meas_w = measured_residual_batch(self._prev_obs, obs, self.dt, self.mass, self.gravity)
        else:
            meas_w = np.einsum("nij,nj->ni", R, imu_residual_batch(obs, self.mass))
        sq = np.einsum("ni,ni->n", meas_w, meas_w)
        ok = have & (sq <= self._max_residual_sq) & self._est_ok  # NaN fails the comparison
        self._rejected += have & ~ok
        if not ok.any():
            return
        okc = ok[:, None]
        meas_b = np.einsum("ni,nij->nj", meas_w, self._prev_R)  # R₀ᵀ Δa
        phi = self._prev_phi
        self.last_measured = np.where(okc, meas_w, self.last_measured)
        self.last_prediction_error = np.where(
            okc, meas_w - self.last_estimate, self.last_prediction_error
        )
        net = self.net
        y = (meas_b - net.y_mean) * (1.0 / net.scale)
        tau = self.config.measurement.lowpass_tau
        if tau > 0.0:
            a = self.dt / (tau + self.dt)
            first = (ok & (self.rls.steps == 0))[:, None]
            rest = okc & ~first
            self._phi_f[...] = np.where(
                first, phi, np.where(rest, self._phi_f + a * (phi - self._phi_f), self._phi_f)
            )
            self._y_f[...] = np.where(
                first, y, np.where(rest, self._y_f + a * (y - self._y_f), self._y_f)
            )
            phi, y = self._phi_f, self._y_f
        self.rls.update(phi, y, ok)
