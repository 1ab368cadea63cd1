"""The action mapping of ``ResidualQuad-v0``: a normalized action in ``[-1, 1]⁴`` → rotor thrusts.

Two modes (``ACTION_MODES``):

* ``rotor`` — each action entry sets one rotor: ``f_i = (a_i + 1)/2 · f_max`` (N);
* ``ctbr`` — collective thrust and body rates: ``T = (a_0 + 1)/2 · 4·f_max`` (N) and
  ``ω_des = a_{1:4} · max_body_rate`` (rad/s), tracked by an onboard proportional rate loop
  ``τ = J·k_rate·(ω_des − ω) + ω × Jω`` on the nominal inertia and the saturating mixer
  :func:`residual_quad.envs.airframe.mix`, at the control rate.

Both take the action as a list of Python floats, already checked and clipped by
:func:`clip_action`, and return the four rotor thrusts (N) for :meth:`QuadrotorPlant.step`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from residual_quad.envs.airframe import Airframe, mix
from residual_quad.envs.rotations import cross

if TYPE_CHECKING:  # annotations only: controllers import this module, MuJoCo stays out
    import mujoco

ACTION_MODES = ("rotor", "ctbr")


def clip_action(action: np.ndarray | Sequence[float]) -> list[float]:
    """The action as four Python floats clipped to ``[-1, 1]``.

    Anything but four real numbers (shape ``(4,)``, an integer or float dtype) and NaN or inf raise
    ``ValueError`` (a silent clip or reshape would hide a broken policy).
    """
    try:
        arr = np.asarray(action)
    except Exception:  # ragged nesting and the like
        arr = None
    if arr is None or arr.shape != (4,):
        raise ValueError(
            f"action must have shape (4,), got {'no array' if arr is None else arr.shape}: "
            f"{action!r}"
        )
    if arr.dtype != np.float64:
        if arr.dtype.kind not in "fiu":
            raise ValueError(f"action must hold real numbers, got dtype {arr.dtype}: {action!r}")
        arr = arr.astype(float)
    values = arr.tolist()
    if not all(map(math.isfinite, values)):
        raise ValueError(f"action must be finite, got {values}")
    return [min(max(v, -1.0), 1.0) for v in values]


class RotorActions:
    """``rotor`` mode: one action entry per rotor, ``f_i = (a_i + 1) · f_max/2`` (N)."""

    mode = "rotor"

    def __init__(self, airframe: Airframe):
        self.half_max_rotor_thrust = 0.5 * airframe.max_rotor_thrust  # N

    def rotor_thrusts(self, action: list[float], data: mujoco.MjData) -> list[float]:
        """Rotor thrusts (N) for a clipped action; ``data`` (the plant's state) is not needed."""
        scale = self.half_max_rotor_thrust
        return [(a + 1.0) * scale for a in action]


class CtbrActions:
    """``ctbr`` mode: collective thrust + body-rate setpoints through the onboard rate loop.

    Args:
        airframe: nominal vehicle (inertia ``J`` of the rate loop, thrust limits of the mixer).
        max_body_rate: rate setpoint at ``a = ±1`` per body axis, rad/s.
        k_rate: proportional gain of the rate loop, 1/s.
    """

    mode = "ctbr"

    def __init__(
        self,
        airframe: Airframe,
        max_body_rate: Sequence[float] = (4.0, 4.0, 2.0),
        k_rate: float = 20.0,
    ):
        self.airframe = airframe
        self.max_body_rate = np.asarray(max_body_rate, dtype=float)  # rad/s
        self.k_rate = k_rate  # 1/s
        self.inertia = np.asarray(airframe.inertia)  # kg·m², diagonal of J

    def rotor_thrusts(self, action: list[float], data: mujoco.MjData) -> np.ndarray:
        """Rotor thrusts (N) for a clipped action at the body rates ``ω`` (``data.qvel[3:6]``)."""
        frame = self.airframe
        thrust = (action[0] + 1.0) * 0.5 * frame.max_thrust  # N, collective
        omega_b = data.qvel[3:6]  # rad/s, body frame (free joint)
        omega_des = np.array(action[1:4]) * self.max_body_rate
        inertia = self.inertia
        torque = inertia * self.k_rate * (omega_des - omega_b) + cross(
            omega_b, inertia * omega_b
        )  # N·m, body frame
        return mix(frame, thrust, torque)


def make_action_mapping(
    action_mode: str,
    airframe: Airframe,
    max_body_rate: Sequence[float] = (4.0, 4.0, 2.0),
    k_rate: float = 20.0,
) -> RotorActions | CtbrActions:
    """The action mapping of ``action_mode`` (one of :data:`ACTION_MODES`)."""
    if action_mode == "rotor":
        return RotorActions(airframe)
    if action_mode == "ctbr":
        return CtbrActions(airframe, max_body_rate, k_rate)
    raise ValueError(
        f"unknown action_mode {action_mode!r}; valid choices: {', '.join(ACTION_MODES)}"
    )


class _Qvel:
    """The one attribute of ``MjData`` the ``ctbr`` rate loop reads (``qvel``)."""

    __slots__ = ("qvel",)

    def __init__(self, qvel: np.ndarray):
        self.qvel = qvel


def rotor_thrusts_batch(
    mapping: RotorActions | CtbrActions, actions: np.ndarray, qvel: np.ndarray
) -> np.ndarray:
    """Rotor thrusts (N, shape ``(N, 4)``) of ``N`` clipped actions ``(N, 4)`` at the free
    joint velocities ``qvel`` ``(N, 6)``: the mapping's formula on every row (the vector env)."""
    if not isinstance(mapping, CtbrActions):
        return (actions + 1.0) * mapping.half_max_rotor_thrust
    thrusts = np.empty((len(actions), 4))
    for k in range(len(actions)):
        thrusts[k] = mapping.rotor_thrusts(actions[k].tolist(), _Qvel(qvel[k]))
    return thrusts
