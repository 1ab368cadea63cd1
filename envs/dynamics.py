"""The nominal model's period residual: what ``m·a = T·R·e_z − m·g·e_z`` misses over one period.

The nominal model of every tracker is ``a = R·e_z·ΣT/m − g·e_z`` [RES §2]. The residual
acceleration ``Δa`` is the part of the measured acceleration it does not explain (payload, drag,
wind, ground effect). Over one control period, with the thrusts held (zero-order hold), it is

    ``Δa = (v₁ − v₀)/Δt − (R₀·e_z·ΣT/m − g·e_z)``

with ``v₀, R₀`` at the start of the period, ``v₁`` at its end and ``ΣT`` the rotor thrusts applied
over it — the quantity a zero-order-hold feed-forward has to cancel. One function computes it for
the environment's ground truth (``info["residual_accel"]``, true observations, true thrusts) and
for the controllers' measurement from observations; both read the same observation layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from residual_quad.envs.observation import ObsLayout as L

# ObsLayout entries bound once: module globals are looked up faster than class attributes, and
# this function runs once per environment step and once per controller step
_VX, _VY, _VZ = L.vx, L.vy, L.vz  # velocity, world
_R02, _R12, _R22 = L.R02, L.R12, L.R22  # third column of R: the body z-axis, world
_T0, _T1, _T2, _T3 = L.thrust0, L.thrust1, L.thrust2, L.thrust3  # rotor thrusts


def period_residual(
    prev_obs: Sequence[float] | np.ndarray,
    obs: Sequence[float] | np.ndarray,
    dt: float,
    mass: float,
    gravity: float,
) -> np.ndarray:
    """Residual acceleration over the last control period, world frame, m/s² (shape ``(3,)``).

    Args:
        prev_obs: observation at the start of the period (``v₀`` and ``R₀``), a list of floats or
            an array in the :class:`ObsLayout` layout.
        obs: observation at the end of the period (``v₁``, and the rotor thrusts ``ΣT`` applied
            over the period).
        dt: control period ``Δt``, s.
        mass: mass of the nominal model, kg.
        gravity: ``g``, m/s².

    Scalar arithmetic, in one fixed order per axis: ``(v₁ − v₀)·(1/Δt) − (R₀·e_z)·(ΣT/m)``, then
    ``+ g`` on z, with ``ΣT = ((T₀ + T₁) + T₂) + T₃``. Lists of Python floats and float64 arrays
    give the same bits (IEEE double either way); a list is about twice as fast.
    """
    inv_dt = 1.0 / dt
    thrust_acc = (obs[_T0] + obs[_T1] + obs[_T2] + obs[_T3]) / mass  # m/s², ΣT/m
    return np.array(
        (
            (obs[_VX] - prev_obs[_VX]) * inv_dt - prev_obs[_R02] * thrust_acc,
            (obs[_VY] - prev_obs[_VY]) * inv_dt - prev_obs[_R12] * thrust_acc,
            (obs[_VZ] - prev_obs[_VZ]) * inv_dt - prev_obs[_R22] * thrust_acc + gravity,
        )
    )
