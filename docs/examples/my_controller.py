"""A custom controller flown by ``rquad sweep`` without touching the package (docs/controllers.md).

A PID on position with the reference's feed-forward acceleration, built on the shared inner loop:
the integral term (with a clamp against wind-up) removes the hover offset an unknown payload
leaves. Fly it with ``PYTHONPATH=docs/examples rquad sweep docs/examples/sweep_my_controller.yaml``.
"""

from __future__ import annotations

import numpy as np

from residual_quad.controllers import ControlContext
from residual_quad.controllers.attitude import InnerLoop
from residual_quad.controllers.base import to_rotor_action
from residual_quad.envs.observation import ObsLayout as L


class PIDFeedForward:
    """``a = a_ref + kp·e_p + kd·e_v + ki·∫e_p`` (world, m/s²) → thrusts through ``InnerLoop``."""

    label = "pid_ff"  # the default label in rows, tables and figures
    action_mode = "rotor"  # 4 normalized rotor thrusts

    def __init__(self, context: ControlContext, *, kp: float = 20.0, kd: float = 8.0,
                 ki: float = 10.0, i_max: float = 1.0):  # fmt: skip
        self.airframe = context.airframe  # nominal model: the payload is unknown
        self.dt = context.control_dt  # s
        self.kp, self.kd, self.ki, self.i_max = kp, kd, ki, i_max  # 1/s², 1/s, 1/s³, m·s
        self.inner = InnerLoop(self.airframe)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.integral = np.zeros(3)  # m·s, world

    def policy(self, obs: np.ndarray) -> np.ndarray:
        e_p = obs[L.ref_pos] - obs[L.pos]  # m, world
        e_v = obs[L.ref_vel] - obs[L.vel]  # m/s, world
        self.integral = np.clip(self.integral + e_p * self.dt, -self.i_max, self.i_max)
        a_cmd = obs[L.ref_acc] + self.kp * e_p + self.kd * e_v + self.ki * self.integral
        R = obs[L.rot].reshape(3, 3)  # body → world
        thrusts = self.inner(R, obs[L.omega_b], a_cmd, obs[L.ref_yaw], obs[L.ref_yaw_rate])
        return to_rotor_action(thrusts, self.airframe)
