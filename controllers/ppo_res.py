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

In both modes :attr:`ResidualPPOController.held_action` is ``c`` and the action history holds
``c`` (:func:`advance_correction`), so an absolute file flies exactly as before the rate mode
existed. ``last_residual`` is ``−R_z(ψ)·δa_h`` — the residual the policy cancels — so
the sweep's residual-bias metric reads it like ``geo_res``'s estimate.

**The residual estimate.** A file whose features have ``estimate`` also shows the policy
``geo_rls``'s residual estimate Δâ [DATT] (``ppo_adapt``'s input; heading frame, scaled:
:mod:`~residual_quad.controllers.policy_inputs`), from the controller's own
:class:`~residual_quad.controllers.residual.estimator.ResidualEstimator` with ``geo_rls``'s
network and RLS settings, run every control period exactly as ``geo_rls`` runs it: asked for Δâ
of each new observation with the tracker's ``a_cmd``, then told the acceleration the inner loop
was actually given, ``a_cmd + R_z(ψ)·δa_h`` — what ``a_cmd − Δâ`` is for ``geo_rls``. The policy
decides after seeing Δâ, so in calm air, where Δâ stays near zero, it can tell that there is
nothing to correct.

Policy files are ``ppo``'s format (one SB3 ``.zip`` with its ``residual_quad.json`` record:
normalization, action repeat, training record) with ``controller: ppo_res`` and
``accel_scale`` (and, where it was trained with other inner-loop gains than the defaults —
on a plant with lagging rotors — their ``attitude``);
:func:`~residual_quad.controllers.policy_file.load_policy` checks them. Train
one with ``rquad train ppo_res`` (:mod:`residual_quad.training.ppo`, ``configs/ppo_res.yaml``).

:class:`ResidualPilot` is what the policy acts through in training (batched ``geo`` on the
vector env), :class:`BatchedResidualPPOController` the sweep's batched controller; both give the
single controller's rotor actions for the same correction (tests).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains, optional_attitude_gains
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.policy_file import (
    ObsNormalizer,
    load_policy,
    policy_actions,
    policy_env_kwargs,
    policy_path,
    policy_spec,
)
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.controllers.ppo import (
    POLICY_OPTIONS,
    in_memory,
    observation_actions,
    policy_inputs,
)
from residual_quad.controllers.residual.estimator import (
    BatchedResidualEstimator,
    ResidualEstimator,
)
from residual_quad.controllers.trackers import DEFAULT_KI, BatchedPIDTracker, PIDTracker
from residual_quad.envs.observation import ObsLayout as L


def tracker_ki(tracker: str) -> float:
    """The integral gain (1/s³) of the tracker a correction adds to: 0 for ``geo`` (no
    integrator), ``pid``'s default for ``pid``."""
    return DEFAULT_KI if tracker == "pid" else 0.0


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
    ``clip(held + step·u, −1, 1)`` — the one rule of the single, batched and training paths."""
    u = np.asarray(u, dtype=np.float64)
    if step is None:
        return u.copy()
    return np.clip(held + step * u, -1.0, 1.0)


def residual_estimator(
    spec: FeatureSpec, context: ControlContext, n_envs: int | None = None
) -> ResidualEstimator | BatchedResidualEstimator | None:
    """``geo_rls``'s estimator (its network and RLS settings, learning online) for a policy whose
    features have ``estimate``: single (``n_envs`` ``None``) or for ``n_envs`` envs; ``None`` for
    a policy without the estimate."""
    if not spec.estimate:
        return None
    from residual_quad.controllers.ppo_adapt import estimator_settings

    if n_envs is None:
        return ResidualEstimator(context, estimator_settings(), learn=True)
    return BatchedResidualEstimator(context, estimator_settings(), n_envs, learn=True)


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


class ResidualPPOController(PIDTracker):
    """``geo`` (or ``pid``: the file's ``tracker``) plus a PPO policy's bounded correction of
    the desired acceleration.

    Args:
        context: nominal airframe and control period (``geo``'s).
        path: a ``ppo_res`` policy ``.zip`` (``rquad train ppo_res``); default: the shipped one.
        device: torch device for SB3's ``predict`` (used only for architectures the numpy
            forward does not read).
        training_seed: fly the shipped policy of this training seed instead (0: the default,
            ``controllers/weights/ppo_res_default.zip``); not together with ``path``.
        plant: fly the shipped policy retrained for this plant (as ``ppo``'s ``plant``).

    The gains are the tracker's defaults, the ones the policy was trained with (``geo``: no
    integral, ``ki`` 0). Call :meth:`reset` at the start of every episode (it restarts the
    action-hold cycle).
    """

    name = "ppo_res"
    kind = "ppo_res"  # the policy file's controller kind
    OPTIONS = POLICY_OPTIONS
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="ppo's try-3 update size; exploration: 3 tries; rate mode on geo: 4 tries; on "
        "pid: 49 tries and 9 variants × 3 seeds of the ablation (docs/ppo.md)",
        learned="policy",
        action="acceleration correction of pid's command → the shared attitude loop",
        tuning_trials=49,
    )

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        self.path = policy_path("ppo_res", path, training_seed, plant)
        self.meta, self.model, self.normalizer, self.network = load_policy(
            self.path, "ppo_res", device
        )
        self.accel_scale = float(self.meta["accel_scale"])  # m/s²
        self.correction_rate: float | None = self.meta.get("correction_rate")  # m/s³ or None
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = policy_env_kwargs(self.meta)
        self.spec = policy_spec(self.meta)
        self.tracker: str = self.meta.get("tracker", "geo")
        # the tracker's inner-loop gains the policy was trained with (None: the defaults)
        self.attitude: AttitudeGains | None = optional_attitude_gains(self.meta.get("attitude"))
        context = context or ControlContext()
        self.estimator = residual_estimator(self.spec, context)
        super().__init__(context, ki=tracker_ki(self.tracker), attitude=self.attitude)
        self.step = self._correction_step()

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
    ) -> ResidualPPOController:
        """Wrap an in-memory SB3 model (the training's evaluation callback)."""
        self = in_memory(cls, model, normalizer, action_repeat, spec)
        self.accel_scale = float(accel_scale)
        self.correction_rate = correction_rate
        self.tracker = tracker
        self.attitude = attitude
        context = ControlContext()
        self.estimator = residual_estimator(self.spec, context)
        PIDTracker.__init__(self, context, ki=tracker_ki(tracker), attitude=attitude)
        self.step = self._correction_step()
        return self

    def _correction_step(self) -> float | None:
        period_s = self.context.control_dt * self.action_repeat  # s per decision
        return correction_step(self.correction_rate, self.accel_scale, period_s)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._k = 0
        self._held = np.zeros(3)  # m/s², heading frame: the correction being held
        self._u = np.zeros(3)  # the correction being held over its bound, [-1, 1]
        if getattr(self, "inputs", None) is None:
            self.inputs = policy_inputs(self, 1)
        self.inputs.reset_rows()
        if self.estimator is not None:
            self.estimator.reset(seed)

    def forget_previous_sample(self) -> None:
        super().forget_previous_sample()
        if self.estimator is not None:
            self.estimator.forget_previous_sample()

    @property
    def last_estimate(self) -> np.ndarray | None:
        """Δâ the policy saw last (world, m/s²); ``None`` for a policy without the estimate."""
        return None if self.estimator is None else self.estimator.last_estimate

    @property
    def held_action(self) -> np.ndarray:
        """The correction being held over ``accel_scale``, in [-1, 1]³ (absolute mode: the
        policy's last action)."""
        return self._u.copy()

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 3) in [-1, 1] of normalized feature rows ``x``."""
        return policy_actions(self.network, self.model, x)

    def correction(self, obs: np.ndarray, estimate: np.ndarray | None = None) -> np.ndarray:
        """The policy's correction δa_h (m/s², heading frame) for one raw observation and, for a
        policy with the estimate, Δâ (3,) (its inputs advance one decision: the held correction
        enters the history)."""
        est = None if estimate is None else estimate[None, :]
        u = observation_actions(self, obs[None, :], self.inputs, self._u[None, :], est)
        self._u = advance_correction(self._u[None, :], u, self.step)[0]
        return self._u * self.accel_scale

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        est = None if self.estimator is None else self.estimator.estimate(obs, R, a_cmd)
        if self._k % self.action_repeat == 0:
            self._held = self.correction(obs, est)
        self._k += 1
        residual = -heading_to_world(R, self._held)
        if self.estimator is not None:  # what the inner loop is given, as for geo_rls
            self.estimator.set_command(a_cmd - residual)
        return residual


class BatchedResidualPPOController(BatchedPIDTracker):
    """``ppo_res`` for N envs: batched ``geo`` (or ``pid``), one policy forward for the envs
    due, per-env action hold. The corrections equal the single controller's bit for bit
    (per-row features, the numpy forward's batch-invariant products, per-row heading
    rotation); the rotor actions then equal it as batched ``geo`` equals ``geo`` (≤ 1e-12).

    Args:
        controller: a loaded :class:`ResidualPPOController` (its network, normalizer, bound and
            action repeat are used).
        n_envs: number of envs.
    """

    name = "ppo_res"
    from_single = True

    def __init__(self, controller: ResidualPPOController, n_envs: int):
        self.single = controller
        self.accel_scale = controller.accel_scale
        self.action_repeat = controller.action_repeat
        self.step = controller.step  # rate mode: largest change of c per decision
        self._k = np.zeros(n_envs, dtype=np.int64)
        self._held = np.zeros((n_envs, 3))
        self._u = np.zeros((n_envs, 3))  # the corrections being held over their bound
        self.inputs = policy_inputs(controller, n_envs)
        self.estimator = residual_estimator(controller.spec, controller.context, n_envs)
        super().__init__(
            controller.context,
            n_envs,
            kp=controller.kp,
            kd=controller.kd,
            ki=controller.ki,
            attitude=controller.attitude,
        )

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self._k[index] = 0
        self._held[index] = 0.0
        self._u[index] = 0.0
        self.inputs.reset_rows(index)
        if self.estimator is not None:
            self.estimator.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        state = [(self, "_k"), (self, "_held"), (self, "_u")]
        state += [(self.inputs, "history"), (self.inputs, "integral")]
        if self.estimator is not None:
            state += self.estimator.row_state()
        return [*super()._row_state(), *state]

    def _forget_rows(self, rows: np.ndarray) -> None:
        if self.estimator is not None:
            self.estimator.forget_previous_sample(rows)

    @property
    def last_estimate(self) -> np.ndarray | None:
        """Δâ (N, 3) the policies saw last (world, m/s²); ``None`` without the estimate."""
        return None if self.estimator is None else self.estimator.last_estimate

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        est = None if self.estimator is None else self.estimator.estimate(obs, R, a_cmd)
        due = np.flatnonzero(self._k % self.action_repeat == 0)
        if len(due):
            est_due = None if est is None else est[due]
            u = observation_actions(self.single, obs[due], self.inputs, self._u[due], est_due, due)
            self._u[due] = advance_correction(self._u[due], u, self.step)
            self._held[due] = self._u[due] * self.accel_scale
        self._k += 1
        residual = -np.stack([heading_to_world(R[i], self._held[i]) for i in range(self.n_envs)])
        if self.estimator is not None:  # what the inner loops are given, as for geo_rls
            self.estimator.set_command(a_cmd - residual)
        return residual


class _CorrectedTracker(BatchedPIDTracker):
    """Batched ``geo`` (``ki`` 0) or ``pid`` whose desired acceleration gets
    :attr:`correction` (N, 3) world m/s²."""

    name = "ppo_res"

    def __init__(
        self,
        context: ControlContext | None,
        n_envs: int,
        ki: float,
        attitude: AttitudeGains | None = None,
    ):
        self.correction = np.zeros((n_envs, 3))
        super().__init__(context, n_envs, ki=ki, attitude=attitude)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return -self.correction


ResidualPPOController.batched = BatchedResidualPPOController


class ResidualPilot:
    """What a ``ppo_res`` policy acts through in training: :meth:`decide` takes the policy's
    actions ``u`` (N, 3) in [-1, 1] once per decision (the held correction follows the file's
    mode, :func:`advance_correction`), and each control period :meth:`__call__` gives the
    tracker's rotor actions (N, 4) with the correction ``R_z(ψ)·(accel_scale·c)`` for the raw
    observations (N, OBS_DIM). ``geo`` is stateless between periods; ``pid``'s integral and the
    rate mode's held correction are state, which :meth:`reset_rows` clears for the envs that
    start an episode. :attr:`last_command` is what each tracker handed its inner loop in the
    last period (the command a residual estimator is told).

    Args:
        n_envs: number of envs.
        accel_scale: the correction bound, m/s² per heading-frame axis.
        context: nominal airframe and control period.
        correction_rate: ``None`` (absolute mode) or the rate mode's r, m/s³.
        action_repeat: control periods per decision (sets the rate mode's step).
        tracker: the tracker the correction adds to, ``geo`` or ``pid``.
        attitude: its inner-loop gains (``None``: the defaults).
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
    ):
        self.accel_scale = float(accel_scale)
        self.base = _CorrectedTracker(context, n_envs, tracker_ki(tracker), attitude)
        period_s = self.base.context.control_dt * action_repeat  # s per decision
        self.step = correction_step(correction_rate, self.accel_scale, period_s)
        self.held = np.zeros((n_envs, 3))  # the corrections over their bound, [-1, 1]

    def decide(self, u: np.ndarray) -> np.ndarray:
        """Take one decision's actions ``u`` (N, 3); return the held corrections ``c`` (N, 3)
        (what the action history remembers)."""
        self.held = advance_correction(self.held, u, self.step)
        return self.held

    def reset_rows(self, index: Any = slice(None)) -> None:
        """Zero the held corrections and the tracker's state (``pid``'s integrals) of the envs
        ``index`` (a new episode)."""
        self.held[index] = 0.0
        self.base._reset_rows(index)

    @property
    def last_command(self) -> np.ndarray:
        """The desired accelerations (N, 3) (world, m/s²) the inner loops were given in the last
        period: the tracker's ``a_cmd`` plus the correction."""
        return self.base.last_a_cmd - self.base.last_residual

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        R = obs[:, L.rot].reshape(-1, 3, 3)
        self.base.correction = heading_to_world_batch(R, self.accel_scale * self.held)
        return self.base.policy_batch(obs)
