"""Rotor dynamics: a first-order lag on each rotor's thrust, run by MuJoCo inside its step.

A real rotor does not reach a new thrust at once: the motor and propeller spin up (or down) with
a time constant of tens of milliseconds (docs/references.md, [LAG]). With ``rotor_tau_s > 0`` the
model's thrust actuators get MuJoCo's exact first-order filter (``dyntype="filterexact"``,
``dynprm[0] = τ``): the actuator's activation ``a`` (N) follows the commanded thrust ``f`` (the
control, held over a control period) as ``a ← f + (a − f)·e^{−h/τ}`` every physics substep ``h``
(exact for a held command), and the force is ``gain·a`` with the *next* activation
(``actearly``): the thrust in substep ``k`` after a step of the command is
``f·(1 − e^{−(k+1)h/τ})``, the continuous response sampled at the substep's end.

The activation is part of MuJoCo's state (``mjSTATE_ACT`` in the full-physics state), so the
vector env's state rows carry it and ``mujoco.rollout`` advances it exactly as ``mj_step`` does.
Ground effect scales the actuator gain, so it multiplies the *lagged* thrust: the rotor's speed
lags its command, the ground changes the thrust at that speed at once.
"""

from __future__ import annotations

import mujoco

from residual_quad.envs.checks import real

MAX_ROTOR_TAU_S = 10.0
"""Longest rotor time constant accepted, s (a rotor slower than this does not fly a quadrotor)."""


def check_rotor_tau(value: object) -> float:
    """``rotor_tau_s`` as a float in [0, :data:`MAX_ROTOR_TAU_S`] s (0: ideal rotors), else
    ``ValueError`` naming it."""
    return real("rotor_tau_s", value, low=0.0, high=MAX_ROTOR_TAU_S, unit="s")


def add_rotor_lag(spec: mujoco.MjSpec, actuators: list[str], tau_s: float) -> None:
    """Give the named thrust actuators of ``spec`` a first-order lag of ``tau_s`` seconds
    (nothing for ``tau_s = 0``: the actuators stay stateless, the model as without the option)."""
    if tau_s == 0.0:
        return
    for name in actuators:
        act = spec.actuator(name)
        act.dyntype = mujoco.mjtDyn.mjDYN_FILTEREXACT
        act.dynprm = [tau_s] + [0.0] * (len(act.dynprm) - 1)
        act.actearly = True  # the force of a substep uses the activation at its end
