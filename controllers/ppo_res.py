"""``ppo_res``: residual RL [RESRL] — a PPO policy corrects a tracker's desired acceleration.

The RL counterpart of ``geo_res``: the tracker is the file's ``tracker`` — ``geo`` (feed-forward
+ PD outer loop, the shared geometric inner loop; files without the entry) or ``pid`` (the same
plus the PID's position-error integral, which takes any constant offset of the correction away)
— and a PPO policy adds a bounded correction to the desired acceleration,

``a_eff = a_ref + K_p·e_p + K_d·e_v [+ K_i·∫e_p] + R_z(ψ)·δa_h``,  ``δa_h = accel_scale · c``,
``c ∈ [-1, 1]³``,

where ``δa_h`` (m/s²) is expressed in the vehicle's heading frame (world rotated by the current
yaw ψ; the frame of the policy's input :func:`~residual_quad.controllers.features.ppo_features`) and
``accel_scale`` (m/s²) is the bound stored in the policy file. The policy sees the same features
as ``ppo`` and acts every ``action_repeat`` control periods; the tracker runs every period with the
held correction. What the policy's action ``u ∈ [-1, 1]³`` sets is the file's choice:

* **absolute** (no ``correction_rate`` in the file): the correction itself, ``c = u``;
* **rate** (``correction_rate`` r, m/s³): the correction's rate of change — every decision
  ``c ← clip(c + (r·T/accel_scale)·u, −1, 1)`` with ``T`` the decision period, ``c = 0`` at a
  reset. The correction is then an integrator the policy steers: it changes by at most ``r·T``
  m/s² per decision (no bang-bang between the bounds) and holds a steady value at ``u = 0``
  (a constant disturbance costs no action). With an action history the policy sees ``c``;
  without one it sees only the tracking errors, so ``c`` can rest only where the policy's
  action is zero — a learned integral action.

In both modes the state's ``policy.u`` (:class:`CorrectionState`) is ``c`` and the action
history holds ``c`` (:func:`advance_correction`), so an absolute file flies exactly as before the
rate mode existed. ``last_residual`` is ``−R_z(ψ)·δa_h`` — the residual the policy cancels — so
the sweep's residual-bias metric reads it like ``geo_res``'s estimate.

**The residual estimate.** A file whose features have ``estimate`` also shows the policy
``geo_rls``'s residual estimate Δâ [DATT] (``ppo_adapt``'s input; heading frame, scaled:
:mod:`~residual_quad.controllers.policy_inputs`), from the controller's own
:class:`~residual_quad.controllers.residual.estimator.ResidualEstimator` with ``geo_rls``'s
network and RLS settings (its state the tracker state's ``estimator``), run every control period
exactly as ``geo_rls`` runs it: asked for Δâ
of each new observation with the tracker's ``a_cmd``, then told the acceleration the inner loop
was actually given, ``a_cmd + R_z(ψ)·δa_h`` — what ``a_cmd − Δâ`` is for ``geo_rls``. The policy
decides after seeing Δâ, so in calm air, where Δâ stays near zero, it can tell that there is
nothing to correct.

Policy files are ``ppo``'s format (one SB3 ``.zip`` with its ``residual_quad.json`` record:
normalization, action repeat, training record) with ``controller: ppo_res`` and
``accel_scale`` (and, where it was trained with other inner-loop gains than the defaults, their
``attitude``; where its tracker took its training plant's defaults — on a plant with lagging
rotors — ``core: plant``);
:func:`~residual_quad.controllers.policy_file.load_policy` checks them. Train
one with ``rquad train ppo_res`` (:mod:`residual_quad.training.ppo`, ``configs/ppo_res.yaml``).

:class:`ResidualPPOController` is one law: one vehicle and a batch are the driver's
(:mod:`residual_quad.controllers.driver`), and :class:`ResidualPilot`, what the policy acts
through in training, drives the same law without a policy, the correction passed in by
:meth:`ResidualPilot.decide`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains, optional_attitude_gains
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.driver import LawBatch, LawController
from residual_quad.controllers.law import replace
from residual_quad.controllers.obs_norm import ObsNormalizer
from residual_quad.controllers.policy_file import (
    CORE_DEFAULTS,
    FEEDFORWARD_TRACKER,
    load_policy,
    policy_env_kwargs,
    policy_path,
    policy_spec,
)
from residual_quad.controllers.policy_inputs import FeatureSpec, InputsState
from residual_quad.controllers.ppo import (
    POLICY_OPTIONS,
    due_rows,
    in_memory,
    observation_actions,
    policy_inputs,
    rowwise_actions,
)
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.trackers import DEFAULT_KI, PIDTracker, TrackerState


def tracker_gains(tracker: str) -> dict[str, float]:
    """The outer-loop gains of the tracker a correction adds to, as
    :class:`~residual_quad.controllers.trackers.PIDTracker` keywords: ``geo``'s PD (no
    integrator), ``pid``'s PID at its default integral gain, or for ``feedforward`` (``ppo_acc``:
    the policy is the whole feedback) none at all — the tracker then hands the attitude loop the
    reference's own acceleration."""
    if tracker == FEEDFORWARD_TRACKER:
        return {"kp": 0.0, "kd": 0.0, "ki": 0.0}
    return {"ki": DEFAULT_KI if tracker == "pid" else 0.0}


def correction_step(
    correction_rate: float | None, accel_scale: float, period_s: float
) -> float | None:
    """The largest change of the normalized correction ``c`` per decision in rate mode,
    ``r·T/accel_scale`` (``correction_rate`` r in m/s³, ``period_s`` T in s); ``None`` in
    absolute mode (``correction_rate`` ``None``)."""
    if correction_rate is None:
        return None
    return float(correction_rate) * float(period_s) / float(accel_scale)


def advance_correction(held: np.ndarray, u: np.ndarray, step: float | None) -> np.ndarray:
    """The normalized correction after a decision ``u`` (n, 3) in [-1, 1] given the held one
    ``held`` (n, 3): ``u`` itself in absolute mode (``step`` ``None``), else
    ``clip(held + step·u, −1, 1)`` — the one rule of the deployed and the training paths."""
    u = np.asarray(u, dtype=np.float64)
    if step is None:
        return u.copy()
    return np.clip(held + step * u, -1.0, 1.0)


def residual_estimator(spec: FeatureSpec, context: ControlContext) -> ResidualEstimator | None:
    """``geo_rls``'s estimator (its network and RLS settings, learning online) for a policy whose
    features have ``estimate``; ``None`` for a policy without the estimate."""
    if not spec.estimate:
        return None
    from residual_quad.controllers.ppo_adapt import estimator_settings

    return ResidualEstimator(context, estimator_settings(), learn=True)


def heading_to_world(R: np.ndarray, v_h: np.ndarray) -> np.ndarray:
    """``R_z(ψ)·v_h``: a heading-frame vector (3,) in the world frame, ψ the yaw of the
    body → world rotation ``R`` (3, 3) (scalar code: one vehicle)."""
    psi = math.atan2(R[1, 0], R[0, 0])
    c, s = math.cos(psi), math.sin(psi)
    return np.array((c * v_h[0] - s * v_h[1], s * v_h[0] + c * v_h[1], v_h[2]))


def heading_to_world_batch(R: np.ndarray, v_h: np.ndarray) -> np.ndarray:
    """:func:`heading_to_world` of N vehicles: ``R`` (N, 3, 3), ``v_h`` (N, 3) → (N, 3)."""
    psi = np.arctan2(R[:, 1, 0], R[:, 0, 0])
    c, s = np.cos(psi), np.sin(psi)
    return np.stack((c * v_h[:, 0] - s * v_h[:, 1], s * v_h[:, 0] + c * v_h[:, 1], v_h[:, 2]), 1)


class CorrectionState(NamedTuple):
    """``ppo_res``'s part of the tracker state (``policy``), one row per env."""

    k: np.ndarray  # (n,) int: control periods since reset (a decision when k % repeat == 0)
    u: np.ndarray  # (n, 3): the correction being held over its bound, in [-1, 1]
    held: np.ndarray  # m/s², heading frame, (n, 3): the correction being held, accel_scale·u
    inputs: InputsState | None  # the policy inputs' memory (``None``: the correction passed in)


class ResidualPPOController(PIDTracker):
    """``geo`` (or ``pid``: the file's ``tracker``) plus a PPO policy's bounded correction of
    the desired acceleration: a tracker law whose residual is ``−R_z(ψ)·δa_h``.

    Args:
        context: nominal airframe and control period (``geo``'s).
        path: a ``ppo_res`` policy ``.zip`` (``rquad train ppo_res``); default: the shipped one.
        device: torch device for SB3's ``predict`` (used only for architectures the numpy
            forward does not read; then one row at a time, as ``ppo``).
        training_seed: fly the shipped policy of this training seed instead (0: the default,
            ``controllers/weights/ppo_res_default.zip``); not together with ``path``.
        plant: fly the shipped policy retrained for this plant (as ``ppo``'s ``plant``).

    The gains are the tracker's defaults, the ones the policy was trained with (``geo``: no
    integral, ``ki`` 0). The file's ``core`` says which defaults, on whatever plant it flies:
    ``ideal`` (files without the entry) — the source's; ``plant`` — the tracker's own for the
    plant the policy was trained on (the file's ``env_kwargs``; behind lagging rotors the
    lag-tuned gains, INDI, the rotor model, the latency predictor), so such a policy trains and
    flies over the pilot the model-based trackers fly that plant with. The state is the
    tracker's with ``policy`` (:class:`CorrectionState`:
    the action-hold cycle, the held correction, the inputs' memory) and, for a policy with the
    estimate, ``estimator``. Without a policy (:meth:`corrected`: training's
    :class:`ResidualPilot`) the law never decides: the correction is what
    :meth:`set_correction` wrote into the state.
    """

    name = "ppo_res"
    kind = "ppo_res"  # the policy file's controller kind
    default_tracker = "geo"  # the tracker of a file without a ``tracker`` entry
    OPTIONS = POLICY_OPTIONS
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="ppo's try-3 update size; exploration: 3 tries; rate mode on geo: 4 tries; on "
        "pid: 49 tries and 9 variants × 3 seeds of the ablation; preview and training off the "
        "matrix: 5 tries; the learning rate's end: 2 tries; the zero-error anchor: 2 trained, "
        "2 at evaluation only (docs/ppo.md)",
        learned="policy",
        action="acceleration correction of pid's command → the shared attitude loop",
        tuning_trials=60,
    )

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        self.path = policy_path(self.kind, path, training_seed, plant)
        self.meta, self.model, self.normalizer, self.network = load_policy(
            self.path, self.kind, device
        )
        self.accel_scale = float(self.meta["accel_scale"])  # m/s²
        self.correction_rate: float | None = self.meta.get("correction_rate")  # m/s³ or None
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = policy_env_kwargs(self.meta)
        self.spec = policy_spec(self.meta)
        self.tracker: str = self.meta.get("tracker", self.default_tracker)
        # the tracker's inner-loop gains the policy was trained with (None: the defaults)
        self.attitude: AttitudeGains | None = optional_attitude_gains(self.meta.get("attitude"))
        self.core: str = self.meta.get("core", CORE_DEFAULTS[0])  # the tracker's defaults
        self.trained_on: dict[str, Any] = self.env_kwargs  # the env settings of its training
        self._start(context or ControlContext(), decides=True)

    @classmethod
    def from_model(
        cls,
        model: Any,
        accel_scale: float,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
        spec: FeatureSpec | None = None,
        correction_rate: float | None = None,
        tracker: str = "geo",
        attitude: AttitudeGains | None = None,
        core: str = CORE_DEFAULTS[0],
        trained_on: dict[str, Any] | None = None,
    ) -> LawController:
        """The controller of an in-memory SB3 model (the training's evaluation callback);
        ``trained_on``: the training's env settings (the plant a ``plant`` core takes)."""
        self = in_memory(cls, model, normalizer, action_repeat, spec)
        self.accel_scale = float(accel_scale)
        self.correction_rate = correction_rate
        self.tracker = tracker
        self.attitude = attitude
        self.core, self.trained_on = core, dict(trained_on or {})
        self._start(ControlContext(), decides=True)
        return LawController(self)

    @classmethod
    def corrected(
        cls,
        accel_scale: float,
        context: ControlContext | None = None,
        correction_rate: float | None = None,
        action_repeat: int = 1,
        tracker: str = "geo",
        attitude: AttitudeGains | None = None,
        core: str = CORE_DEFAULTS[0],
        trained_on: dict[str, Any] | None = None,
    ) -> ResidualPPOController:
        """The law without a policy: the correction is passed in (:meth:`set_correction`);
        ``trained_on``: the env settings of the plant a ``plant`` core takes."""
        self = in_memory(cls, None, None, action_repeat)
        self.accel_scale = float(accel_scale)
        self.correction_rate = correction_rate
        self.tracker = tracker
        self.attitude = attitude
        self.core, self.trained_on = core, dict(trained_on or {})
        self._start(context or ControlContext(), decides=False)
        return self

    def _start(self, context: ControlContext, decides: bool) -> None:
        self.decides = decides  # whether the policy decides the correction (else: passed in)
        self.estimator = residual_estimator(self.spec, context) if decides else None
        # the core as trained, wherever it flies: its gains from the policy file (None: the
        # defaults) and the defaults of the file's core — the ideal plant's (PD loop, no rotor
        # model, no predictor), or those of the plant it was trained on
        if self.core == "plant":
            core_context = context.on_plant(self.trained_on)
        else:
            core_context = context.ideal()
        PIDTracker.__init__(
            self, core_context, attitude=self.attitude, **tracker_gains(self.tracker)
        )
        period_s = self.context.control_dt * self.action_repeat  # s per decision
        self.step = correction_step(self.correction_rate, self.accel_scale, period_s)
        self.inputs = policy_inputs(self) if decides else None

    # -- state ---------------------------------------------------------------------------------
    def init_state(self, n: int) -> TrackerState:
        policy = CorrectionState(
            k=np.zeros(n, dtype=np.int64),
            u=np.zeros((n, 3)),
            held=np.zeros((n, 3)),
            inputs=None if self.inputs is None else self.inputs.init_state(n),
        )
        estimator = None if self.estimator is None else self.estimator.init_state(n)
        return replace(super().init_state(n), policy=policy, estimator=estimator)

    def init_one(self) -> TrackerState:
        # the tracker's float layout; the cycle as a Python int, the inputs' memory as a batch
        # of one (the feature builder is array code), the estimator's one-vehicle layout
        policy = CorrectionState(
            k=0,
            u=np.zeros(3),
            held=np.zeros(3),
            inputs=None if self.inputs is None else self.inputs.init_state(1),
        )
        estimator = None if self.estimator is None else self.estimator.init_one()
        return replace(super().init_one(), policy=policy, estimator=estimator)

    def forget(self, state: TrackerState, rows: np.ndarray) -> TrackerState:
        state = super().forget(state, rows)
        if self.estimator is None:
            return state
        return replace(state, estimator=self.estimator.forget(state.estimator, rows))

    def forget_one(self, state: TrackerState) -> TrackerState:
        state = super().forget_one(state)
        if self.estimator is None:
            return state
        return replace(state, estimator=self.estimator.forget_one(state.estimator))

    def set_correction(self, state: TrackerState, u: np.ndarray) -> TrackerState:
        """The state after a decision ``u`` (n, 3) in [-1, 1] passed in for every env: the held
        correction follows the file's mode (:func:`advance_correction`), in place."""
        p = state.policy
        p.u[...] = advance_correction(p.u, u, self.step)
        p.held[...] = p.u * self.accel_scale
        return state

    def act(self, state: TrackerState, obs: np.ndarray) -> tuple[TrackerState, np.ndarray]:
        # the whole observation: the policy's inputs read the preview columns (the tracker's
        # own fields are named slices, as for one vehicle)
        return self._step(state, obs, one=False)

    # -- the residual: the policy's correction -------------------------------------------------
    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 3) in [-1, 1] of normalized feature rows ``x``."""
        return rowwise_actions(self.network, self.model, x)

    def _estimate(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray, one: bool
    ) -> tuple[Any, np.ndarray | None]:
        """The residual estimator's next state and its estimate, a policy input (``None``
        without an estimator); one vehicle or a batch."""
        if self.estimator is None:
            return state.estimator, None
        estimate = self.estimator.estimate_one if one else self.estimator.estimate
        return estimate(state.estimator, obs, R, a_cmd)

    def residual(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        est_state, est = self._estimate(state, obs, R, a_cmd, one=False)
        p = state.policy
        if self.decides:
            rows = due_rows(p.k, self.action_repeat)
            if rows is not None:
                est_due = None if est is None else est[rows]
                u = observation_actions(self, obs[rows], p.inputs, p.u[rows], est_due, rows)
                p.u[rows] = advance_correction(p.u[rows], u, self.step)
                p.held[rows] = p.u[rows] * self.accel_scale
            p.k[...] += 1
        residual = -heading_to_world_batch(R, p.held)
        if self.estimator is not None:  # what the inner loops are given, as for geo_rls
            est_state = self.estimator.set_command(est_state, a_cmd - residual)
        return replace(state, estimator=est_state), residual

    def residual_one(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        est_state, est = self._estimate(state, obs, R, a_cmd, one=True)
        p = state.policy
        k, u, held = p.k, p.u, p.held
        if self.decides:
            if k % self.action_repeat == 0:
                e = None if est is None else est[None, :]
                a = observation_actions(self, obs[None, :], p.inputs, u[None, :], e)
                u = advance_correction(u[None, :], a, self.step)[0]
                held = u * self.accel_scale
            k += 1
        residual = -heading_to_world(R, held)
        if self.estimator is not None:  # what the inner loop is given, as for geo_rls
            est_state = self.estimator.set_command_one(est_state, a_cmd - residual)
        policy = CorrectionState(k, u, held, p.inputs)
        return state._replace(policy=policy, estimator=est_state), residual


class ResidualPilot:
    """What a ``ppo_res`` policy acts through in training: the ``ppo_res`` law without a policy
    (:meth:`ResidualPPOController.corrected`) on ``n_envs`` envs, driven by the batch driver.
    :meth:`decide` takes the policy's actions ``u`` (N, 3) in [-1, 1] once per decision (the
    held correction follows the file's mode, :func:`advance_correction`), and each control
    period :meth:`__call__` gives the tracker's rotor actions (N, 4) with the correction
    ``R_z(ψ)·(accel_scale·c)`` for the raw observations (N, OBS_DIM). ``pid``'s integral and
    the held correction are state, which :meth:`reset_rows` resets for the envs that start an
    episode. :attr:`last_command` is what each tracker handed its inner loop in the last period
    (the command a residual estimator is told).

    Args:
        n_envs: number of envs.
        accel_scale: the correction bound, m/s² per heading-frame axis.
        context: nominal airframe and control period.
        correction_rate: ``None`` (absolute mode) or the rate mode's r, m/s³.
        action_repeat: control periods per decision (sets the rate mode's step).
        tracker: the tracker the correction adds to, ``geo`` or ``pid``.
        attitude: its inner-loop gains (``None``: the defaults).
        core: the defaults the tracker takes, ``ideal`` or ``plant`` (``CORE_DEFAULTS``).
        trained_on: the training's env settings (the plant a ``plant`` core takes).
    """

    action_dim = 3

    def __init__(
        self,
        n_envs: int,
        accel_scale: float,
        context: ControlContext | None = None,
        correction_rate: float | None = None,
        action_repeat: int = 1,
        tracker: str = "geo",
        attitude: AttitudeGains | None = None,
        core: str = CORE_DEFAULTS[0],
        trained_on: dict[str, Any] | None = None,
    ):
        law = ResidualPPOController.corrected(
            accel_scale,
            context,
            correction_rate,
            action_repeat,
            tracker,
            attitude,
            core,
            trained_on,
        )
        self.batch = LawBatch(law, n_envs)
        self.law = law
        self.accel_scale = law.accel_scale
        self.step = law.step

    @property
    def held(self) -> np.ndarray:
        """(N, 3): the corrections over their bound, in [-1, 1]."""
        return self.batch.state.policy.u

    def decide(self, u: np.ndarray) -> np.ndarray:
        """Take one decision's actions ``u`` (N, 3); return the held corrections ``c`` (N, 3)
        (what the action history remembers)."""
        self.batch.state = self.law.set_correction(self.batch.state, u)
        return self.held.copy()

    def reset_rows(self, index: Any = slice(None)) -> None:
        """The initial state (no correction, ``pid``'s integrals zero) of the envs ``index``
        (a new episode)."""
        if isinstance(index, slice) and index == slice(None):
            self.batch.reset_batch()
            return
        for i in np.arange(self.batch.n_envs)[index].tolist():
            self.batch.reset_env(i)

    @property
    def last_command(self) -> np.ndarray:
        """The desired accelerations (N, 3) (world, m/s²) the inner loops were given in the last
        period: the tracker's ``a_cmd`` plus the correction."""
        state = self.batch.state
        return state.last_a_cmd - state.last_residual

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.batch.policy_batch(obs)
