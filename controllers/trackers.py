"""Trajectory trackers on one shared inner loop; they differ only in the desired acceleration.

``Tracker.policy`` computes ``a_cmd = desired_accel(...)`` (outer loop, world frame, m/s²),
subtracts the estimated residual ``residual_world(...)`` (zero here; the residual-learning trackers
override it) and hands ``a_eff = a_cmd − Δâ`` to :class:`InnerLoop`.

:class:`BatchedTracker` is the same law for N envs (numpy over the batch, per-env state, the same
formula functions: :func:`outer_accel`, :func:`pid_integral_step`, the inner loop's); each
scalar tracker names its batched twin in its ``batched`` attribute, through which
:func:`~residual_quad.controllers.batch.make_batch_controller` finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import (
    AttitudeGains,
    BatchedInnerLoop,
    InnerLoop,
    attitude_gains,
)
from residual_quad.controllers.base import (
    ControlContext,
    InformationUse,
    ObservationGuard,
    hover_action,
    to_rotor_action,
)
from residual_quad.controllers.batch import (
    NEUTRAL_OBS,
    RowBatch,
    RowGuard,
    check_n_envs,
    check_obs_batch,
)
from residual_quad.controllers.options import NON_NEGATIVE, POSITIVE, Domain, Instance, Range
from residual_quad.controllers.rotor_model import BatchedRotorModel, RotorModel
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

_ZERO3 = np.zeros(3)

DEFAULT_KP = 20.0  # 1/s², position gain of the trackers (hover offset under Δa: Δa/K_p)
DEFAULT_KD = 8.0  # 1/s, velocity gain
DEFAULT_KI = 15.0  # 1/s³, ``pid``'s integral gain
DEFAULT_I_MAX = 1.0  # m·s, ``pid``'s integral bound per axis

#: the search ranges of the trackers' position and attitude gains (``rquad tune``): a decade
#: around the defaults (kp 20 1/s², kd 8 1/s, ω_n 18 rad/s, ζ 0.9)
GAIN_RANGES: dict[str, Range] = {
    "kp": Range(5.0, 60.0, log=True),  # 1/s²
    "kd": Range(2.0, 20.0, log=True),  # 1/s
    "attitude.wn_rp": Range(8.0, 30.0),  # rad/s
    "attitude.zeta_rp": Range(0.5, 1.5),
}

#: the inner-loop gains option: :class:`AttitudeGains` or a mapping of its fields
ATTITUDE = Instance(
    (AttitudeGains,),
    "AttitudeGains or a mapping of its fields (wn_rp, zeta_rp, wn_yaw, zeta_yaw, max_tilt), "
    "each finite and > 0",
    coerce=attitude_gains,
)


def outer_accel(
    ref_acc: np.ndarray, e_p: np.ndarray, e_v: np.ndarray, kp: float, kd: float
) -> np.ndarray:
    """Desired acceleration (world, m/s²): feed-forward plus PD on ``ref − state`` (m, m/s);
    shapes (3,) or (N, 3) — one formula for the single and the batched trackers."""
    return ref_acc + kp * e_p + kd * e_v


def pid_integral_step(
    integral: np.ndarray,
    e_p: np.ndarray,
    dt: float,
    saturated: bool | np.ndarray,
    i_max: float,
) -> np.ndarray:
    """The PID's integral (m·s) after one period: ``∫ += e_p·dt`` unless the inner loop saturated
    on the previous step and the step would grow the integral, then clipped to ``±i_max``.

    ``integral`` and ``e_p`` are (3,) with ``saturated`` a bool, or (N, 3) with ``saturated`` a
    bool array of shape (N, 1) (one flag per env) — one formula for both trackers.
    """
    step = e_p * dt
    if saturated is True or (saturated is not False and bool(np.any(saturated))):
        step = np.where(np.logical_and(saturated, step * integral > 0.0), 0.0, step)
    return np.clip(integral + step, -i_max, i_max)


class Tracker(ObservationGuard):
    """Base tracker: position feedback + trajectory feed-forward through the shared inner loop.

    Args:
        context: nominal airframe and control period.
        kp: position gain, 1/s². With no integrator the hover steady-state error under a constant
            model error Δa is exactly Δa/kp (0.129 m for +0.25 kg at kp = 20).
        kd: velocity gain, 1/s.
        attitude: inner-loop gains.
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal rotors). With
            lagged rotors the tracker reads the thrusts through its first-order model of them
            (:mod:`~residual_quad.controllers.rotor_model`) instead of the commanded ones.

    A non-finite observation is answered with the last action and changes no state
    (:class:`~residual_quad.controllers.base.ObservationGuard`).
    """

    action_mode = "rotor"
    name = "tracker"
    #: option → domain, checked when a spec is parsed (:mod:`residual_quad.controllers.options`)
    OPTIONS: dict[str, Domain] = {
        "kp": POSITIVE,
        "kd": POSITIVE,
        "attitude": ATTITUDE,
        "rotor_tau_s": NON_NEGATIVE,
    }
    #: option path → search range of ``rquad tune``
    TUNABLE: dict[str, Range] = GAIN_RANGES

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float = 0.0,  # s, the rotors' time constant the tracker is told (0: ideal)
    ):
        self.context = context or ControlContext()
        self.airframe = self.context.airframe
        self.dt = self.context.control_dt
        self.kp, self.kd = float(kp), float(kd)
        self.rotor_model = RotorModel(float(rotor_tau_s), self.dt) if rotor_tau_s else None
        self.inner = InnerLoop(self.airframe, attitude)
        self.excitation = _ZERO3  # m/s², added to a_cmd (data collection)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Restore the initial state (integrators, memories, the held action)."""
        self.reset_guard()
        self.last_a_cmd = np.zeros(3)  # m/s², world, previous step's command
        self.last_residual = _ZERO3  # m/s², world, Δâ applied by the last policy call
        self.inner.saturated = False
        self.inner.last_thrust = self.airframe.hover_thrust
        if self.rotor_model is not None:
            self.rotor_model.reset()

    def policy(self, obs: np.ndarray) -> np.ndarray:
        """The guarded action (:class:`ObservationGuard`); with a rotor model, of the
        observation whose thrusts are the model's estimate of the rotors' (a bad sample leaves
        the model as it was)."""
        if self.rotor_model is not None:
            obs = self.rotor_model.observe(obs)
        return super().policy(obs)

    # -- hooks ---------------------------------------------------------------------------------
    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        """Outer loop: desired acceleration (world, m/s²) from the errors ``ref − state``."""
        return outer_accel(obs[L.ref_acc], e_p, e_v, self.kp, self.kd)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        """Estimated residual acceleration Δâ (world, m/s²) to cancel by feed-forward."""
        return _ZERO3

    # -- interface -----------------------------------------------------------------------------
    def act(self, obs: np.ndarray) -> np.ndarray:
        R = obs[L.rot].reshape(3, 3)
        e_p = obs[L.ref_pos] - obs[L.pos]
        e_v = obs[L.ref_vel] - obs[L.vel]
        a_cmd = self.desired_accel(obs, e_p, e_v) + self.excitation
        self.last_residual = self.residual_world(obs, R, a_cmd)
        a_eff = a_cmd - self.last_residual
        thrusts = self.inner(R, obs[L.omega_b], a_eff, obs[L.ref_yaw], obs[L.ref_yaw_rate])
        self.last_a_cmd = a_cmd
        return to_rotor_action(thrusts, self.airframe)


class GeoTracker(Tracker):
    """``geo``: SE(3) geometric control with trajectory feed-forward, no integrator."""

    name = "geo"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="kp 20, kd 8 and the attitude gains of the source [RES]; no search here",
    )


class PIDTracker(Tracker):
    """``pid``: position PID with conditional-integration anti-windup.

    The integrator of an axis is frozen while the inner loop saturated (tilt or thrust clip) on
    the previous step and the error would grow the integral further; it is also bounded by
    ``i_max``.
    """

    name = "pid"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="position-error integral",
        tuning="kp 20, kd 8 of the source [RES]; ki 15 1/s³, i_max 1 m·s set by hand, "
        "no recorded search",
    )
    #: ``ki = 0`` is a PD (no integral action)
    OPTIONS: dict[str, Domain] = {**Tracker.OPTIONS, "ki": NON_NEGATIVE, "i_max": POSITIVE}
    TUNABLE: dict[str, Range] = {**GAIN_RANGES, "ki": Range(0.5, 40.0, log=True)}  # 1/s³

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        ki: float = DEFAULT_KI,  # 1/s³
        i_max: float = DEFAULT_I_MAX,  # m·s, integral bound per axis
        **kw,
    ):
        self.ki = float(ki)
        self.i_max = float(i_max)
        super().__init__(context, **kw)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.integral = np.zeros(3)  # m·s

    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        if not self.ki:  # a PD: geo's command exactly
            return super().desired_accel(obs, e_p, e_v)
        self.integral = pid_integral_step(
            self.integral, e_p, self.dt, self.inner.saturated, self.i_max
        )
        return super().desired_accel(obs, e_p, e_v) + self.ki * self.integral


# ----------------------------------------------------------------------------- N envs
class BatchedTracker(RowBatch):
    """:class:`Tracker` (``geo``) for N envs, one ``policy_batch(obs (N, 36)) -> (N, 4)`` call.

    Args:
        context: nominal airframe and control period (shared by the batch).
        n_envs: number of envs.
        kp, kd, attitude: as the single tracker.

    A row with a non-finite entry gets its env's last action and leaves that env's state as it
    was (:class:`~residual_quad.controllers.batch.RowGuard`); the other rows are computed as if
    it had been clean.
    """

    action_mode = "rotor"
    name = "geo"
    #: built from the loaded single controller (``ppo_res``) rather than from the options
    from_single = False

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float = 0.0,  # s, the rotors' time constant the tracker is told (0: ideal)
    ):
        self.n_envs = check_n_envs(n_envs)
        self.context = context or ControlContext()
        self.airframe = self.context.airframe
        self.dt = self.context.control_dt
        self.rotor_model = (
            BatchedRotorModel(float(rotor_tau_s), self.dt, self.n_envs) if rotor_tau_s else None
        )
        self.kp, self.kd = float(kp), float(kd)
        self.inner = BatchedInnerLoop(self.airframe, self.n_envs, attitude)
        self.excitation = np.zeros((self.n_envs, 3))  # m/s², added to a_cmd per env
        self.last_a_cmd = np.zeros((self.n_envs, 3))
        self.last_residual = np.zeros((self.n_envs, 3))
        self.guard = RowGuard(self.n_envs, hover_action(self.action_mode, self.airframe))
        self.reset_batch()

    @classmethod
    def vectorizes(cls, options: Mapping[str, Any]) -> bool:
        """Whether this class implements the single controller's ``options`` (else the factory
        flies N single controllers in a :class:`~residual_quad.controllers.batch.BatchedLoop`):
        every option of the single tracker, the rotor model included (override to narrow)."""
        return True

    # -- state ---------------------------------------------------------------------------------
    def _reset_rows(self, index: int | slice) -> None:
        """Initial state of the envs ``index`` (override and extend)."""
        self.last_a_cmd[index] = 0.0
        self.last_residual[index] = 0.0
        self.inner.saturated[index] = False
        self.inner.last_thrust[index] = self.airframe.hover_thrust
        self.guard.reset(index)
        if self.rotor_model is not None:
            self.rotor_model.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        """``(object, attribute)`` of every per-env state array (row = env), which a bad
        sample must leave as it was (override and extend)."""
        return [
            (self, "last_a_cmd"),
            (self, "last_residual"),
            (self.inner, "saturated"),
            (self.inner, "last_thrust"),
        ]

    def _forget_rows(self, rows: np.ndarray) -> None:
        """The envs ``rows`` had a bad sample: their next observation does not follow their
        previous one (see :meth:`ObservationGuard.forget_previous_sample`)."""

    # -- hooks ---------------------------------------------------------------------------------
    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        return outer_accel(obs[:, L.ref_acc], e_p, e_v, self.kp, self.kd)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return np.zeros_like(a_cmd)

    # -- interface -----------------------------------------------------------------------------
    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions (N, 4) in [-1, 1] (``rotor`` mode) for observations (N, 36); a row with a
        non-finite entry gets its env's last action and leaves its state as it was."""
        obs, bad = check_obs_batch(obs, self.n_envs)
        obs = obs[:, :OBS_DIM]  # the base fields (a tracker reads no preview)
        if self.rotor_model is not None:  # as the single tracker: before the guard, own rule
            obs = self.rotor_model.observe(obs)
        if not bad.any():
            return self.guard.finish(self._act_batch(obs), bad)
        # the batch is computed with a finite stand-in in the bad rows (every operation is row
        # by row, so the other rows are those of a clean batch), then their state is restored
        saved = [(o, a, getattr(o, a)[bad].copy()) for o, a in self._row_state()]
        action = self._act_batch(np.where(bad[:, None], NEUTRAL_OBS, obs))
        for o, a, rows in saved:
            getattr(o, a)[bad] = rows
        self._forget_rows(bad)
        return self.guard.finish(action, bad)

    def _act_batch(self, obs: np.ndarray) -> np.ndarray:
        """The trackers' law for a finite batch (N, 36) → actions (N, 4)."""
        R = obs[:, L.rot].reshape(-1, 3, 3)
        e_p = obs[:, L.ref_pos] - obs[:, L.pos]
        e_v = obs[:, L.ref_vel] - obs[:, L.vel]
        a_cmd = self.desired_accel(obs, e_p, e_v) + self.excitation
        self.last_residual = self.residual_world(obs, R, a_cmd)
        a_eff = a_cmd - self.last_residual
        thrusts = self.inner(
            obs[:, L.rot], obs[:, L.omega_b], a_eff, obs[:, L.ref_yaw], obs[:, L.ref_yaw_rate]
        )
        self.last_a_cmd = a_cmd
        return to_rotor_action(thrusts, self.airframe)


class BatchedGeoTracker(BatchedTracker):
    """``geo`` for N envs."""

    name = "geo"


class BatchedPIDTracker(BatchedTracker):
    """``pid`` for N envs: one integrator (m·s, 3 axes) per env, the same anti-windup rule."""

    name = "pid"

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        ki: float = DEFAULT_KI,  # 1/s³
        i_max: float = DEFAULT_I_MAX,  # m·s
        **kw: Any,
    ):
        self.ki = float(ki)
        self.i_max = float(i_max)
        self.integral = np.zeros((check_n_envs(n_envs), 3))
        super().__init__(context, n_envs, **kw)

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.integral[index] = 0.0

    def _row_state(self) -> list[tuple[Any, str]]:
        return [*super()._row_state(), (self, "integral")]

    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        if not self.ki:  # a PD: geo's command exactly
            return super().desired_accel(obs, e_p, e_v)
        self.integral = pid_integral_step(
            self.integral, e_p, self.dt, self.inner.saturated[:, None], self.i_max
        )
        return super().desired_accel(obs, e_p, e_v) + self.ki * self.integral


GeoTracker.batched = BatchedGeoTracker
PIDTracker.batched = BatchedPIDTracker
