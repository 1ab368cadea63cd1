"""Trajectory trackers on one shared inner loop; they differ only in the desired acceleration.

``Tracker.policy`` computes ``a_cmd = desired_accel(...)`` (outer loop, world frame, m/s²),
subtracts the estimated residual ``residual_world(...)`` (zero here; the residual-learning trackers
override it) and hands ``a_eff = a_cmd − Δâ`` to :class:`InnerLoop`.
"""

from __future__ import annotations

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains, InnerLoop, attitude_gains
from residual_quad.controllers.base import ControlContext, ObservationGuard, to_rotor_action
from residual_quad.controllers.options import NON_NEGATIVE, POSITIVE, Domain, Instance
from residual_quad.envs.observation import ObsLayout as L

_ZERO3 = np.zeros(3)

DEFAULT_KP = 20.0  # 1/s², position gain of the trackers (hover offset under Δa: Δa/K_p)
DEFAULT_KD = 8.0  # 1/s, velocity gain

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

    A non-finite observation is answered with the last action and changes no state
    (:class:`~residual_quad.controllers.base.ObservationGuard`).
    """

    action_mode = "rotor"
    name = "tracker"
    #: option → domain, checked when a spec is parsed (:mod:`residual_quad.controllers.options`)
    OPTIONS: dict[str, Domain] = {"kp": POSITIVE, "kd": POSITIVE, "attitude": ATTITUDE}

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
    ):
        self.context = context or ControlContext()
        self.airframe = self.context.airframe
        self.dt = self.context.control_dt
        self.kp, self.kd = float(kp), float(kd)
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


class PIDTracker(Tracker):
    """``pid``: position PID with conditional-integration anti-windup.

    The integrator of an axis is frozen while the inner loop saturated (tilt or thrust clip) on
    the previous step and the error would grow the integral further; it is also bounded by
    ``i_max``.
    """

    name = "pid"
    #: ``ki = 0`` is a PD (no integral action)
    OPTIONS: dict[str, Domain] = {**Tracker.OPTIONS, "ki": NON_NEGATIVE, "i_max": POSITIVE}

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        ki: float = 15.0,  # 1/s³
        i_max: float = 1.0,  # m·s, integral bound per axis
        **kw,
    ):
        self.ki = float(ki)
        self.i_max = float(i_max)
        super().__init__(context, **kw)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.integral = np.zeros(3)  # m·s

    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        self.integral = pid_integral_step(
            self.integral, e_p, self.dt, self.inner.saturated, self.i_max
        )
        return super().desired_accel(obs, e_p, e_v) + self.ki * self.integral
