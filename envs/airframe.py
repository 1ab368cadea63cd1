"""Airframe parameters and rotor allocation (pure numpy, no MuJoCo import).

Both the plant (``action_mode="ctbr"``) and the controllers' shared inner loop use the same
allocation and the same saturation rule, so there is exactly one mixer in the project (its
desaturating variant an option of the inner loop).

Frame geometry follows a DJI F450-class X quadrotor: 0.225 m arms (0.45 m motor-to-motor
diagonal) and 10-inch propellers. The inertia (7.5e-3, 7.5e-3, 1.3e-2 kg·m²) is the value commonly
identified for that frame at about 1 kg in the modelling literature; with 0.95 kg it is slightly
conservative. The yaw-torque coefficient 0.015 m gives the ≈0.14 N·m yaw budget of [RES] at
nominal hover (0.015 m × 9.32 N).

Rotor numbering (body frame: x forward, y left, z up), X configuration::

        3 (front-left, CW)    0 (front-right, CCW)
                    \\       /
                      body
                    /       \\
        2 (rear-left, CCW)    1 (rear-right, CW)

A rotor spinning counter-clockwise (seen from above) pushes the body clockwise, so its reaction
torque about +z is ``-k_yaw·T``; ``yaw_sign`` holds that sign per rotor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residual_quad.envs.checks import real, vector
from residual_quad.envs.xp import FLOATS, Namespace

GRAVITY = 9.81  # m/s², +z up


@dataclass(frozen=True)
class Airframe:
    """Physical parameters of the nominal vehicle (what a controller is allowed to know)."""

    mass: float = 0.95  # kg, frame without payload
    inertia: tuple[float, float, float] = (7.5e-3, 7.5e-3, 1.3e-2)  # kg·m², body principal axes
    arm_length: float = 0.225  # m, centre to rotor axis
    k_yaw: float = 0.015  # m, yaw reaction torque per newton of thrust
    max_rotor_thrust: float = 6.0  # N, per rotor
    rotor_radius: float = 0.127  # m, 10-inch propeller (ground effect)
    yaw_sign: tuple[float, float, float, float] = (-1.0, 1.0, -1.0, 1.0)  # CCW, CW, CCW, CW
    gravity: float = GRAVITY  # m/s²
    allocation: np.ndarray = field(init=False, repr=False, compare=False)
    allocation_inv: np.ndarray = field(init=False, repr=False, compare=False)
    #: rows of the torque → rotor-thrust map as float tuples (the mixers, single and batched)
    mix_rows: list = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, unit in (
            ("mass", "kg"),
            ("arm_length", "m"),
            ("k_yaw", "m"),
            ("max_rotor_thrust", "N"),
            ("rotor_radius", "m"),
            ("gravity", "m/s²"),
        ):
            real(f"airframe {name}", getattr(self, name), low=0.0, low_open=True, unit=unit)
        if not np.all(vector("airframe inertia", self.inertia, 3, "kg·m²") > 0):
            raise ValueError(f"airframe inertia must be positive, got {self.inertia!r}")
        signs = vector("airframe yaw_sign", self.yaw_sign, 4)
        if not np.all(np.abs(signs) == 1.0):
            raise ValueError(f"airframe yaw_sign must hold four ±1 entries, got {self.yaw_sign!r}")
        object.__setattr__(self, "allocation", allocation_matrix(self))
        object.__setattr__(self, "allocation_inv", np.linalg.inv(self.allocation))
        # rows of the torque → rotor-thrust map, as floats for the scalar mixer
        object.__setattr__(
            self, "mix_rows", [tuple(r) for r in self.allocation_inv[:, 1:].tolist()]
        )

    @property
    def rotor_positions(self) -> np.ndarray:
        """Rotor centres in the body frame, shape (4, 3), m."""
        return rotor_positions(self.arm_length)

    @property
    def hover_thrust(self) -> float:
        """Collective thrust that holds the nominal mass in hover, N."""
        return self.mass * self.gravity

    @property
    def max_thrust(self) -> float:
        """Collective thrust with every rotor saturated, N."""
        return 4.0 * self.max_rotor_thrust

    @property
    def inertia_matrix(self) -> np.ndarray:
        return np.diag(self.inertia)


def rotor_positions(arm_length: float) -> np.ndarray:
    """Rotor centres of an X frame in the body frame (order as in the module docstring), m."""
    a = arm_length / np.sqrt(2.0)
    return np.array([[a, -a, 0.0], [-a, -a, 0.0], [-a, a, 0.0], [a, a, 0.0]])


def allocation_matrix(frame: Airframe) -> np.ndarray:
    """Map rotor thrusts f (N, 4) to the body wrench ``[T, τx, τy, τz]`` (N, N·m): ``w = A f``."""
    p = rotor_positions(frame.arm_length)
    return np.vstack(
        [
            np.ones(4),  # collective thrust along body z
            p[:, 1],  # τx = y·f
            -p[:, 0],  # τy = -x·f
            frame.k_yaw * np.asarray(frame.yaw_sign),
        ]
    )


def mix(
    frame: Airframe, thrust: float, torque: Sequence[float], desaturate: bool = False
) -> np.ndarray:
    """Rotor thrusts (4,) N for a collective thrust (N) and body torque (N·m), with saturation
    (:func:`rotor_thrusts` for one vehicle)."""
    tx, ty, tz = (float(v) for v in torque)
    return np.array(rotor_thrusts(FLOATS, frame, float(thrust), tx, ty, tz, desaturate))


def rotor_thrusts(
    xp: Namespace,
    frame: Airframe,
    thrust: Any,
    tx: Any,
    ty: Any,
    tz: Any,
    desaturate: bool = False,
) -> list[Any]:
    """The four rotor thrusts (N) for the collective ``thrust`` (N) and the body torque
    ``(tx, ty, tz)`` (N·m), each within ``[0, f_max]``: the one mixer of the project.

    The collective is clipped to ``[0, 4·f_max]`` and split evenly, the torque added through the
    allocation. Where that leaves the rotor box, the torque is scaled down as a whole (direction
    kept) and the result clipped:

    * the **squeeze** (the default, the source's): the largest factor that fits around the
      commanded collective. A large yaw demand takes roll/pitch authority with it -- the failure
      the prioritized allocation of ``hnewton`` removes -- and with every rotor asked for its
      full thrust (a loaded vehicle's take-off, a wide tilt) no torque is left at all;
    * with ``desaturate``, **at the top the collective yields** (the thrust-reducing
      desaturation of flight stacks such as PX4): the largest factor that fits above *some*
      collective no higher than the commanded one, the collective lowered only as far as that
      needs. At the bottom it is the squeeze (the collective is never raised).

    ``xp`` is :class:`~residual_quad.envs.xp.FLOATS` for one vehicle (Python floats) or
    :class:`~residual_quad.envs.xp.ARRAYS` for a batch (arrays of shape (N,)).
    """
    fmax = frame.max_rotor_thrust
    thrust = xp.where(thrust < 0.0, 0.0, xp.where(thrust > 4.0 * fmax, 4.0 * fmax, thrust))
    base = 0.25 * thrust
    delta = [a * tx + b * ty + c * tz for a, b, c in frame.mix_rows]
    lo, hi = xp.amin(*delta), xp.amax(*delta)
    fits = (base + lo >= 0.0) & (base + hi <= fmax)
    if xp.every(fits):  # every rotor inside its box: the exact split (most calls end here)
        return [base + d for d in delta]
    # the squeeze: largest s in [0, 1] with 0 <= base + s·delta <= fmax for every rotor
    up, down = hi > 1e-12, lo < -1e-12
    s_up = xp.where(up, (fmax - base) / xp.where(up, hi, 1.0), 1.0)
    s_down = xp.where(down, -base / xp.where(down, lo, -1.0), 1.0)
    s = xp.where(s_up < s_down, s_up, s_down)
    if desaturate:  # at the top: the largest s whose spread fits above a collective <= base
        span = hi - lo
        wide = span > fmax
        s_span = xp.where(wide, fmax / xp.where(wide, span, 1.0), 1.0)
        top = base + hi > fmax
        s = xp.where(top, xp.where(s_span < s_down, s_span, s_down), s)
    s = xp.where(fits | (s > 1.0), 1.0, xp.where(s < 0.0, 0.0, s))
    if desaturate:
        lowered = fmax - s * hi
        base = xp.where(top & (lowered < base), lowered, base)
    out = [base + s * d for d in delta]
    return [xp.where(v < 0.0, 0.0, xp.where(v > fmax, fmax, v)) for v in out]


def wrench(frame: Airframe, rotor_thrusts: np.ndarray) -> np.ndarray:
    """Body wrench ``[T, τx, τy, τz]`` produced by rotor thrusts (N)."""
    return frame.allocation @ np.asarray(rotor_thrusts, dtype=float)
