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

The estimator holds a private :class:`FastMLP` built from a deep copy of the network (never
written); its state — previous step, filters, RLS, counters — is an explicit
:class:`EstimatorState` that the controller's law keeps, one row per env, and every initial state
starts from the private offline layer, so no run can contaminate another (the private copy is one
of the safeguards of [RES §5.1]). ``estimate`` steps N envs (numpy), ``estimate_one`` one vehicle
(float code, the arithmetic of the committed single flights); each rule holds for both.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.law import one_vehicle as one_row
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
from residual_quad.controllers.rls import RLSLaw, RLSState
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


class EstimatorState(NamedTuple):
    """The estimator's state, one row per env (world frame, m/s², unless said otherwise)."""

    prev_obs: np.ndarray  # (n, 36): the previous observation's base fields
    prev_R: np.ndarray  # (n, 3, 3): its rotation body → world
    prev_phi: np.ndarray  # (n, p): its regressor
    phi_f: np.ndarray  # (n, p): low-pass filtered regressor (normalized units)
    y_f: np.ndarray  # (n, 3): low-pass filtered target (normalized units)
    last_estimate: np.ndarray  # (n, 3): Δâ applied at the last step
    last_a_eff: np.ndarray  # (n, 3): ``a_cmd − Δâ`` sent to the inner loop at the last step
    last_measured: np.ndarray  # (n, 3): residual measured over the last period
    last_prediction_error: np.ndarray  # (n, 3): measured − applied estimate
    steps: np.ndarray  # (n,) int: calls since reset
    nonfinite_estimates: np.ndarray  # (n,) int: estimates replaced by zero (non-finite input)
    rejected: np.ndarray  # (n,) int: measurements rejected here (the RLS counts its own)
    est_ok: np.ndarray  # (n,) bool: the last estimate (its regressor, rotation) was finite
    have_prev: np.ndarray  # (n,) bool: a previous step the next call can learn from
    warmup_end_step: np.ndarray  # (n,) int: first call that applied the RLS layer (-1: none)
    filtered: np.ndarray  # (n, 3): output filter state
    ood_weight: np.ndarray  # (n,): the OOD guard's weight of the network at the last step
    ood_steps: np.ndarray  # (n,) int: steps with the guard acting (weight < 1)
    prev_ood_weight: np.ndarray  # (n,): the previous step's weight (learning needs 1)
    hold: np.ndarray  # (n, 3): the last estimate made fully inside the envelope
    rls: RLSState | None  # the last layer's RLS (``None`` without learning)


def rejected_updates(state: EstimatorState) -> Any:
    """RLS updates skipped since reset: implausible or non-finite measurements and non-finite
    regressors (0 without learning); per env for a batch."""
    if state.rls is None:
        return 0 * state.rejected
    return state.rejected + state.rls.rejected


class ResidualEstimator:
    """Residual acceleration estimate ``Δâ`` (world, m/s²) from the observation stream, over an
    explicit :class:`EstimatorState`.

    Args:
        context: nominal airframe (mass, gravity) and control period.
        config: the residual settings (``weights``, ``measurement``, ``rls``; the gains are the
            tracker's).
        network: a :class:`ResidualMLP` to use instead of ``config.weights`` (deep-copied).
        learn: identify the last layer online by RLS (``geo_rls``, ``hnewton_rls``); ``False``
            predicts with the offline network only (``geo_res``).
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
        self.rls = RLSLaw(self.net.theta0, config.rls) if learn else None
        self._theta0_rows = self.net.theta0[None]  # the offline last layer, one view per env
        self._x = np.empty(net.sizes[0])  # one vehicle's feature buffer (within a call)
        self._max_residual_sq = config.measurement.max_residual**2  # (m/s²)²
        self._ood_idx, self._ood_mean, self._ood_inv_std = ood_statistics(config, net)

    # -- state ---------------------------------------------------------------------------------
    def init_state(self, n: int) -> EstimatorState:
        """The offline network and the RLS prior for ``n`` envs, no previous step."""
        p = self.net.phi.size
        prev_R = np.empty((n, 3, 3))
        prev_R[...] = np.eye(3)
        warm = 0 if self.rls is not None and self.config.rls.warmup_steps == 0 else -1
        return EstimatorState(
            prev_obs=np.zeros((n, OBS_DIM)),
            prev_R=prev_R,
            prev_phi=np.zeros((n, p)),
            phi_f=np.zeros((n, p)),
            y_f=np.zeros((n, 3)),
            last_estimate=np.zeros((n, 3)),
            last_a_eff=np.zeros((n, 3)),
            last_measured=np.zeros((n, 3)),
            last_prediction_error=np.zeros((n, 3)),
            steps=np.zeros(n, dtype=np.int64),
            nonfinite_estimates=np.zeros(n, dtype=np.int64),
            rejected=np.zeros(n, dtype=np.int64),
            est_ok=np.ones(n, dtype=bool),
            have_prev=np.zeros(n, dtype=bool),
            warmup_end_step=np.full(n, warm, dtype=np.int64),
            filtered=np.zeros((n, 3)),
            ood_weight=np.ones(n),
            ood_steps=np.zeros(n, dtype=np.int64),
            prev_ood_weight=np.ones(n),
            hold=np.zeros((n, 3)),
            rls=None if self.rls is None else self.rls.init_state(n),
        )

    def init_one(self) -> EstimatorState:
        """The initial state of one vehicle (scalars as Python numbers, the RLS's BLAS layout)."""
        state = one_row(self.init_state(1))
        return state._replace(rls=None if self.rls is None else self.rls.init_one())

    def forget(self, state: EstimatorState, rows: np.ndarray) -> EstimatorState:
        """The next observation of the envs ``rows`` does not follow their last one (a bad
        sample came between, which the controller's driver kept from the estimator): their next
        call learns nothing, since no measured period ends with it; the RLS, the filters and the
        estimate are kept."""
        state.have_prev[rows] = False
        return state

    def forget_one(self, state: EstimatorState) -> EstimatorState:
        """:meth:`forget` of one vehicle."""
        return state._replace(have_prev=False)

    def set_command(self, state: EstimatorState, a_eff: np.ndarray) -> EstimatorState:
        """Replace the effective commands recorded at the last :meth:`estimate` call (the next
        call's ``a_cmd`` feature) by ``a_eff`` (n, 3) (world, m/s²): for a controller that
        decides its command after asking for the estimate (``ppo_adapt``) or applies the
        estimate along another axis, ``a_eff`` is the acceleration the nominal model expects
        from the thrust it actually commands. A non-finite row is stored as zero."""
        a = np.array(a_eff, dtype=float)
        ok = np.all(np.isfinite(a), axis=1)[:, None]
        return state._replace(last_a_eff=np.where(ok, a, 0.0))

    def set_command_one(self, state: EstimatorState, a_eff: np.ndarray) -> EstimatorState:
        """:meth:`set_command` of one vehicle: ``a_eff`` (3,)."""
        a = np.array(a_eff, dtype=float)
        return state._replace(last_a_eff=a if np.all(np.isfinite(a)) else np.zeros(3))

    # -- one vehicle ---------------------------------------------------------------------------
    def estimate_one(
        self, state: EstimatorState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[EstimatorState, np.ndarray]:
        """``Δâ`` (world, m/s²) for observation ``obs`` with body → world rotation ``R``, given
        this step's commanded acceleration ``a_cmd`` (world, m/s², before the compensation);
        the next state (one record built per call: this runs every control step)."""
        cfg = self.config
        s = state
        # the "commanded acceleration" feature is the previous command as sent to the inner
        # loop, a_eff = a_cmd − Δâ (see :meth:`estimate`)
        x = features_from_obs(obs, R, s.last_a_eff, self.mass, out=self._x)
        phi = self.net.hidden(x)
        heading_err = 0.0
        if cfg.ood.enabled:
            err = math.atan2(R[1, 0], R[0, 0]) - float(obs[L.ref_yaw])
            heading_err = abs(math.remainder(err, math.tau))  # rad
        steps, warmup_end, have_prev = s.steps, s.warmup_end_step, s.have_prev
        rejected, measured, prediction_error = s.rejected, s.last_measured, s.last_prediction_error
        rls, prev_weight = s.rls, s.prev_ood_weight
        if self.rls is None:
            est = R @ self.net.output(phi)
        else:
            if have_prev:
                if prev_weight == 1.0:
                    rejected, measured, prediction_error, rls = self._learn_one(s, obs, R)
                if warmup_end < 0 and rls.steps >= cfg.rls.warmup_steps:
                    warmup_end = steps
            est = R @ self.net.output(phi, self.rls.applied_one(rls))
            s.prev_phi[...] = phi
            s.prev_obs[...] = obs[..., :OBS_DIM]  # the base fields (a preview follows)
            s.prev_R[...] = R
            have_prev = True
        # the OOD guard's blend and the output filter (both off by default: est itself)
        weight, hold, ood_steps, filtered = s.ood_weight, s.hold, s.ood_steps, s.filtered
        if cfg.ood.enabled:
            z = np.abs((x[self._ood_idx] - self._ood_mean) * self._ood_inv_std)
            z_max = float(z.max()) if np.all(np.isfinite(z)) else math.inf
            weight = guard_weight(FLOATS, cfg.ood, z_max, heading_err, weight, self.dt)
            if weight == 1.0:
                if np.all(np.isfinite(est)):
                    hold = est.copy()
            else:
                ood_steps += 1
                fallback = hold if cfg.ood.fallback == "hold" else np.zeros(3)
                est = weight * est + (1.0 - weight) * fallback if weight > 0.0 else fallback.copy()
        tau = cfg.output_filter.tau
        if tau > 0.0 and np.all(np.isfinite(est)):
            if steps == 0:
                filtered = est.copy()
            else:
                filtered = filtered + (self.dt / (tau + self.dt)) * (est - filtered)
            est = filtered.copy()
        if self.rls is not None:
            prev_weight = weight if cfg.ood.enabled else 1.0
        # record the estimate and the effective command: a non-finite estimate becomes zero
        # (counted), a non-finite effective command (from a non-finite a_cmd) is stored as zero
        # so that it cannot feed the next step's features; one float sum checks both
        a_eff = a_cmd - est
        ex, ey, ez = a_eff.tolist()
        est_ok = True
        nonfinite = s.nonfinite_estimates
        if not math.isfinite(ex + ey + ez):  # rare: NaN/inf somewhere
            if not np.all(np.isfinite(est)):
                nonfinite += 1
                est_ok = False
                est = np.zeros(3)
                a_eff = np.array(a_cmd, dtype=float)
            if not np.all(np.isfinite(a_eff)):
                a_eff = np.zeros(3)
        new = EstimatorState(
            s.prev_obs,
            s.prev_R,
            s.prev_phi,
            s.phi_f,
            s.y_f,
            est,
            a_eff,
            measured,
            prediction_error,
            steps + 1,
            nonfinite,
            rejected,
            est_ok,
            have_prev,
            warmup_end,
            filtered,
            weight,
            ood_steps,
            prev_weight,
            hold,
            rls,
        )
        return new, est

    def _learn_one(
        self, s: EstimatorState, obs: np.ndarray, R: np.ndarray
    ) -> tuple[int, np.ndarray, np.ndarray, RLSState]:
        """One RLS update: the residual of the period that just ended, in the body frame of the
        previous observation, paired with the previous regressor (whose prediction it tests);
        returns the rejection count, the measured residual, the prediction error and the RLS.

        ``velocity``: averaged over the period (:func:`measured_residual`). ``imu``: sampled at
        its end (:func:`imu_residual`, rotated through the world frame). Pairing the IMU sample
        with the *current* regressor instead was measured and is not better (helix/extra/windy
        0.031/0.025/0.037 m vs 0.028/0.024/0.036 m).
        """
        assert self.rls is not None
        if self.config.measurement.source == "velocity":
            meas_w = measured_residual(s.prev_obs, obs, self.dt, self.mass, self.gravity)
        else:
            meas_w = R @ imu_residual(obs, self.mass)
        mx, my, mz = meas_w.tolist()
        # NaN fails the comparison; a non-finite previous estimate means a non-finite regressor
        if not (mx * mx + my * my + mz * mz <= self._max_residual_sq and s.est_ok):
            # no update: θ, P, the filters and the diagnostics stay
            return s.rejected + 1, s.last_measured, s.last_prediction_error, s.rls
        meas_b = meas_w @ s.prev_R  # R₀ᵀ Δa
        phi = s.prev_phi
        net = self.net
        y = (meas_b - net.y_mean) * (1.0 / net.scale)
        tau = self.config.measurement.lowpass_tau
        if tau > 0.0:
            a = self.dt / (tau + self.dt)
            if s.rls.steps == 0:
                s.phi_f[...] = phi
                s.y_f[...] = y
            else:
                s.phi_f[...] += a * (phi - s.phi_f)
                s.y_f[...] += a * (y - s.y_f)
            phi, y = s.phi_f, s.y_f
        rls, _ = self.rls.update_one(s.rls, phi, y)
        return s.rejected, meas_w, meas_w - s.last_estimate, rls

    # -- N envs --------------------------------------------------------------------------------
    def estimate(
        self, state: EstimatorState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[EstimatorState, np.ndarray]:
        """``Δâ`` (n, 3) (world, m/s²) for observations ``obs`` (n, 36) with rotations ``R``
        (n, 3, 3) and commands ``a_cmd`` (n, 3) (world, m/s², before the compensation); the
        next state.

        The "commanded acceleration" feature is the previous step's command *as sent to the
        inner loop*, ``a_eff = a_cmd − Δâ``, i.e. the acceleration the nominal model expected
        from the thrust that was applied. The training data come from plain ``geo``, where
        ``a_eff = a_cmd``; using ``a_eff`` keeps the relation between this feature and the
        normalized thrust the same in closed loop as in the data. With the pre-compensation
        ``a_cmd`` instead, a hovering ``geo_res`` shows the network ``a_cmd ≈ 0`` with a
        heavy-payload thrust — a combination the data never contain — and the payload estimate
        collapsed (1.3 m/s² vertical bias, helix/heavy/windy RMSE 0.095 m instead of 0.06 m).
        """
        x = features_from_obs_batch(obs, R, state.last_a_eff, self.mass)
        phi = self.net.hidden_batch(x)
        heading_err = None
        if self.config.ood.enabled:
            err = np.arctan2(R[:, 1, 0], R[:, 0, 0]) - obs[:, L.ref_yaw]
            heading_err = np.abs(err - np.round(err / math.tau) * math.tau)  # rad, remainder
        if self.rls is None:
            theta0 = self._theta0_rows
            if len(theta0) != len(obs):  # built once per batch size, not per step
                theta0 = np.broadcast_to(self.net.theta0, (len(obs), *self.net.theta0.shape))
                self._theta0_rows = theta0
            est_b = self.net.output_batch(phi, theta0)
            state, est = self._post(state, np.einsum("nij,nj->ni", R, est_b), x, heading_err)
            return self._applied(state, est, a_cmd)
        have = state.have_prev
        if have.any():
            state = self._learn(state, obs, R, have & (state.prev_ood_weight == 1.0))
            reached = have & (state.warmup_end_step < 0) & self.rls.warmup_done(state.rls)
            state.warmup_end_step[reached] = state.steps[reached]
        applied = self.rls.applied(state.rls)
        est = np.einsum("nij,nj->ni", R, self.net.output_batch(phi, applied))
        state.prev_phi[...] = phi
        state.prev_obs[...] = obs[..., :OBS_DIM]  # the base fields (a preview follows)
        state.prev_R[...] = R
        state.have_prev[...] = True
        state, est = self._post(state, est, x, heading_err)  # sets this step's ood_weight
        if self.config.ood.enabled:
            state = state._replace(prev_ood_weight=state.ood_weight.copy())
        return self._applied(state, est, a_cmd)

    def _post(
        self,
        state: EstimatorState,
        est: np.ndarray,
        x: np.ndarray,
        heading_err: np.ndarray | None,
    ) -> tuple[EstimatorState, np.ndarray]:
        """The OOD guard's blend and the output filter of :meth:`estimate_one`'s, per env (features
        ``x`` (n, n_in), heading errors (n,) rad; rows with a non-finite estimate pass the
        filter unfiltered and leave it as it was)."""
        ood = self.config.ood
        if ood.enabled:
            z = np.abs((x[:, self._ood_idx] - self._ood_mean) * self._ood_inv_std)
            z_max = np.where(np.all(np.isfinite(z), axis=1), z.max(axis=1), math.inf)
            w = guard_weight(ARRAYS, ood, z_max, heading_err, state.ood_weight, self.dt)
            full = w == 1.0
            keep = full & np.all(np.isfinite(est), axis=1)
            hold = np.where(keep[:, None], est, state.hold)
            state = state._replace(ood_weight=w, hold=hold, ood_steps=state.ood_steps + ~full)
            fallback = hold if ood.fallback == "hold" else np.zeros_like(est)
            wc = w[:, None]
            blend = np.where(wc > 0.0, wc * est + (1.0 - wc) * fallback, fallback)
            est = np.where(full[:, None], est, blend)
        tau = self.config.output_filter.tau
        if tau <= 0.0:
            return state, est
        a = self.dt / (tau + self.dt)
        ok = np.all(np.isfinite(est), axis=1)[:, None]
        first = (state.steps == 0)[:, None]
        f = state.filtered
        new = np.where(first, est, f + a * (est - f))
        filtered = np.where(ok, new, f)
        return state._replace(filtered=filtered), np.where(ok, filtered, est)

    def _applied(
        self, state: EstimatorState, est: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[EstimatorState, np.ndarray]:
        """:meth:`estimate_one`'s record of the estimate, per env."""
        a_eff = a_cmd - est
        est_ok = np.ones(len(est), dtype=bool)
        nonfinite = state.nonfinite_estimates
        bad = ~np.isfinite(a_eff.sum(axis=1))
        if bad.any():
            est_bad = bad & ~np.all(np.isfinite(est), axis=1)
            nonfinite = nonfinite + est_bad
            est_ok[est_bad] = False
            est = np.where(est_bad[:, None], 0.0, est)
            a_eff = np.where(est_bad[:, None], a_cmd, a_eff)
            a_eff = np.where(np.all(np.isfinite(a_eff), axis=1)[:, None], a_eff, 0.0)
        state = state._replace(
            last_estimate=est,
            last_a_eff=a_eff,
            steps=state.steps + 1,
            nonfinite_estimates=nonfinite,
            est_ok=est_ok,
        )
        return state, est

    def _learn(
        self, state: EstimatorState, obs: np.ndarray, R: np.ndarray, have: np.ndarray
    ) -> EstimatorState:
        """:meth:`_learn_one` for the envs in ``have`` (n,) bool."""
        assert self.rls is not None
        if self.config.measurement.source == "velocity":
            meas_w = measured_residual_batch(state.prev_obs, obs, self.dt, self.mass, self.gravity)
        else:
            meas_w = np.einsum("nij,nj->ni", R, imu_residual_batch(obs, self.mass))
        sq = np.einsum("ni,ni->n", meas_w, meas_w)
        ok = have & (sq <= self._max_residual_sq) & state.est_ok  # NaN fails the comparison
        state = state._replace(rejected=state.rejected + (have & ~ok))
        if not ok.any():
            return state
        okc = ok[:, None]
        meas_b = np.einsum("ni,nij->nj", meas_w, state.prev_R)  # R₀ᵀ Δa
        phi = state.prev_phi
        state = state._replace(
            last_measured=np.where(okc, meas_w, state.last_measured),
            last_prediction_error=np.where(
                okc, meas_w - state.last_estimate, state.last_prediction_error
            ),
        )
        net = self.net
        y = (meas_b - net.y_mean) * (1.0 / net.scale)
        tau = self.config.measurement.lowpass_tau
        if tau > 0.0:
            a = self.dt / (tau + self.dt)
            first = (ok & (state.rls.steps == 0))[:, None]
            rest = okc & ~first
            pf, yf = state.phi_f, state.y_f
            pf[...] = np.where(first, phi, np.where(rest, pf + a * (phi - pf), pf))
            yf[...] = np.where(first, y, np.where(rest, yf + a * (y - yf), yf))
            phi, y = pf, yf
        rls, _ = self.rls.update(state.rls, phi, y, ok)
        return state._replace(rls=rls)
