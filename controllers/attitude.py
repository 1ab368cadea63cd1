"""Rotations and the shared inner loop: acceleration command → thrust vector → attitude PD → mixer.

Pure numpy, no MuJoCo import, so the math can run anywhere a controller runs. Every tracker
(``pid``, ``geo``, ``geo_res``, ``geo_rls``) uses :class:`InnerLoop`, so performance differences
come from the outer loop and the residual compensation only. It flies one vehicle in float code
and N envs in numpy: the tilt limit (:func:`tilt_limited_force`) and the attitude torque
(:func:`geometric_torque`) are one formula for both (on the namespaces of
:mod:`residual_quad.envs.xp`), the mixer :func:`mix_batch` is
:func:`~residual_quad.envs.airframe.rotor_thrusts` on arrays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.envs.airframe import Airframe, mix, rotor_thrusts
from residual_quad.envs.xp import ARRAYS, FLOATS, Namespace


def tilt_of(R: np.ndarray) -> float:
    """Angle (rad) between the body z axis and the world vertical."""
    return math.acos(max(-1.0, min(1.0, R[2, 2])))


@dataclass(frozen=True)
class AttitudeGains:
    """Geometric SO(3) PD gains as natural frequency and damping per axis.

    Defaults: roll/pitch ω_n = 18 rad/s, ζ = 0.9 (ζ ≈ 0.71 with the ``extra`` payload's ×1.6
    inertia — the fix of [RES §7.1] was exactly to raise the rate damping); yaw ω_n = 6 rad/s,
    ζ = 1, soft enough that a 13° heading error stays inside the 0.14 N·m yaw budget.

    The commanded tilt is limited to ``max_tilt``, and up to ``budget_tilt`` where that is wider
    while the collective stays within ``thrust_budget`` of the rotors' total (the rest kept for
    the attitude torque); with ``budget_tilt`` at or below ``max_tilt`` (the default 0) there is
    no budget.
    """

    wn_rp: float = 18.0  # rad/s
    zeta_rp: float = 0.9
    wn_yaw: float = 6.0  # rad/s
    zeta_yaw: float = 1.0
    max_tilt: float = math.radians(35.0)  # rad, limit on the commanded thrust-vector tilt
    budget_tilt: float = 0.0  # rad, the wider limit within the thrust budget (0: none)
    thrust_budget: float = 0.77  # fraction of the rotors' total thrust (4·f_max)


#: the slowest gains behind lagging rotors, the schedule's floor (an 80 ms first-order lag behind
#: a period of latency each way, or slower): half the default roll/pitch bandwidth, more damping,
#: a softer yaw loop and a 25° tilt limit that keeps the rotors out of saturation, widened to the
#: source's 35° while the collective stays within the thrust budget (docs/controllers.md, "Behind
#: lag")
LAG_TUNED_GAINS = AttitudeGains(
    wn_rp=10.0,
    zeta_rp=1.2,
    wn_yaw=2.0,
    zeta_yaw=1.0,
    max_tilt=0.44,
    budget_tilt=math.radians(35.0),
)

#: s·rad/s, the behind-lag schedule's constant: roll/pitch ω_n = LAG_BANDWIDTH / lag, the lag
#: ``τ + dead/2`` (rotor time constant plus half the dead time the latency predictor removes most
#: of), within [LAG_TUNED_GAINS.wn_rp, AttitudeGains.wn_rp] (docs/controllers.md, "Behind lag")
LAG_BANDWIDTH = 0.9


#: INDI's inertia-identification step in the defaults behind lagging rotors (docs/controllers.md)
LAG_INDI_ADAPT = 0.02


#: the inner loop's mixers (:func:`~residual_quad.envs.airframe.rotor_thrusts`): the source's
#: proportional squeeze, or the collective yielding to the torque at the top
MIXERS = ("squeeze", "desaturate")


def default_mixer(rotor_tau_s: float) -> str:
    """The trackers' default mixer for rotors of nominal time constant ``rotor_tau_s`` (s): the
    source's squeeze for ideal rotors, the desaturating one behind any lag (where a loaded
    take-off saturates every rotor and the thrust budget of the tilt needs the torque kept)."""
    return "desaturate" if rotor_tau_s > 0.0 else "squeeze"


def default_attitude_loop(rotor_tau_s: float) -> str:
    """The trackers' default attitude loop for rotors of nominal time constant ``rotor_tau_s``
    (s): the geometric PD for ideal rotors (the source's), INDI behind any lag."""
    return "indi" if rotor_tau_s > 0.0 else "pd"


def default_attitude_gains(rotor_tau_s: float, dead_time_s: float = 0.0) -> AttitudeGains:
    """The trackers' default attitude gains for rotors of nominal time constant ``rotor_tau_s``
    (s) behind ``dead_time_s`` (s) of command plus sensor latency: the source's
    :class:`AttitudeGains` for ideal rotors; behind any lag :data:`LAG_TUNED_GAINS` with the
    roll/pitch bandwidth scheduled on the lag, ``ω_n = LAG_BANDWIDTH / (τ + dead/2)`` between
    the hand-tuned 10 rad/s and the source's 18 (the source's loop is unstable behind 60 ms; a
    fixed 10 rad/s, which the position loop's 20 1/s² outruns, rings on every lag the schedule
    stiffens)."""
    if not rotor_tau_s > 0.0:
        return AttitudeGains()
    lag = rotor_tau_s + 0.5 * max(dead_time_s, 0.0)  # s
    wn = min(max(LAG_BANDWIDTH / lag, LAG_TUNED_GAINS.wn_rp), AttitudeGains.wn_rp)  # rad/s
    return dataclasses.replace(LAG_TUNED_GAINS, wn_rp=wn)


def attitude_gains(value: Any) -> AttitudeGains:
    """``value`` as :class:`AttitudeGains`: itself, or a mapping of its fields (a spec's YAML
    form), every field a finite number > 0 (``budget_tilt`` ≥ 0), the tilts below 90° (rad) and
    ``thrust_budget`` at most 1; else a
    ``ValueError``/``TypeError``."""
    if isinstance(value, AttitudeGains):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"attitude gains must be a mapping, got {value!r}")
    unknown = sorted(set(value) - set(AttitudeGains.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"attitude: unknown field(s) {unknown}; valid: "
            f"{', '.join(AttitudeGains.__dataclass_fields__)}"
        )
    gains = AttitudeGains(**value)
    for name in AttitudeGains.__dataclass_fields__:
        x = getattr(gains, name)
        zero_ok = name == "budget_tilt"  # 0: no budget
        number = not isinstance(x, bool) and isinstance(x, int | float) and x < math.inf
        if not (number and (x >= 0 if zero_ok else x > 0)):
            bound = "≥ 0" if zero_ok else "> 0"
            raise ValueError(f"attitude.{name} must be a finite number {bound}, got {x!r}")
    for name in ("max_tilt", "budget_tilt"):
        if getattr(gains, name) >= math.pi / 2:
            raise ValueError(f"attitude.{name} must be below π/2 rad, got {getattr(gains, name)}")
    if gains.thrust_budget > 1.0:
        raise ValueError(f"attitude.thrust_budget must be at most 1, got {gains.thrust_budget}")
    return gains


def optional_attitude_gains(value: Any) -> AttitudeGains | None:
    """A policy file's or a training config's ``attitude``: ``None`` (the default gains) or
    :func:`attitude_gains` of ``value``."""
    return None if value is None else attitude_gains(value)


class InnerLoop:
    """Acceleration command (world, m/s²) + heading (rad) → rotor thrusts (N).

    ``F = m·(a_cmd + g·e_z)`` with its tilt limited to ``max_tilt`` (vertical component kept;
    wider within the gains' thrust budget), collective ``T = F·R·e_z``, desired attitude from
    ``F`` and the heading, the geometric PD ``τ = −k_R·e_R − k_Ω·e_Ω + Ω × JΩ`` (Lee, Leok,
    McClamroch 2010) plus an optional torque feed-forward, and the saturating mixer (``mixer``,
    one of :data:`MIXERS`).

    Stateless: :meth:`command` (one vehicle, float code) and :meth:`command_batch` (N envs) also
    return whether the command saturated and the collective, which a law keeps in its state.
    """

    def __init__(
        self, airframe: Airframe, gains: AttitudeGains | None = None, mixer: str = "squeeze"
    ):
        if mixer not in MIXERS:
            raise ValueError(f"mixer must be one of {', '.join(MIXERS)}, got {mixer!r}")
        self.airframe = airframe
        self.mixer = mixer
        self.desaturate = mixer == "desaturate"
        self.gains = g = gains or AttitudeGains()
        J = np.asarray(airframe.inertia, dtype=float)
        wn = np.array([g.wn_rp, g.wn_rp, g.wn_yaw])
        zeta = np.array([g.zeta_rp, g.zeta_rp, g.zeta_yaw])
        self.J = J
        self.k_R = J * wn**2  # N·m/rad
        self.k_W = J * 2.0 * zeta * wn  # N·m/(rad/s)
        self._J, self._kR, self._kW = J.tolist(), self.k_R.tolist(), self.k_W.tolist()
        self.tan_max_tilt = math.tan(g.max_tilt)
        self.tilt_budget = TiltBudget.of(airframe, g)

    def thrust_vector(self, a_cmd: np.ndarray) -> tuple[np.ndarray, bool]:
        """Desired force (N, world) for ``a_cmd``, tilt-limited, and whether it was limited."""
        fx, fy, fz, saturated = tilt_limited_force(
            FLOATS, self.airframe, *a_cmd.tolist(), self.tan_max_tilt, self.tilt_budget
        )
        return np.array([fx, fy, fz]), saturated

    def __call__(
        self,
        R: np.ndarray,
        omega_b: np.ndarray,
        a_cmd: np.ndarray,
        yaw_des: float,
        yaw_rate_des: float = 0.0,
    ) -> np.ndarray:
        """Rotor thrusts (N) for attitude ``R`` (body → world), rate ``omega_b`` (rad/s, body),
        acceleration command ``a_cmd`` (m/s², world) and heading ``yaw_des`` (rad)."""
        return self.command(R, omega_b, a_cmd, yaw_des, yaw_rate_des)[0]

    def command(
        self,
        R: np.ndarray,
        omega_b: np.ndarray,
        a_cmd: np.ndarray,
        yaw_des: float,
        yaw_rate_des: float = 0.0,
        torque_ff: np.ndarray | None = None,
    ) -> tuple[np.ndarray, bool, float]:
        """Rotor thrusts (4,) N as :meth:`__call__`, with ``torque_ff`` (N·m, body) added to the
        attitude torque; also whether the tilt or the collective saturated and the collective
        (N) after its clip."""
        # scalar code: this runs every control step and 3-vectors are cheaper as floats
        r = np.ravel(R).tolist()
        ax, ay, az = a_cmd.tolist()
        frame = self.airframe
        fx, fy, fz, saturated = tilt_limited_force(
            FLOATS, frame, ax, ay, az, self.tan_max_tilt, self.tilt_budget
        )
        thrust = fx * r[2] + fy * r[5] + fz * r[8]  # F · (R e_z)
        if thrust > frame.max_thrust:
            saturated = True
        thrust = min(max(thrust, 0.0), frame.max_thrust)
        n = math.sqrt(fx * fx + fy * fy + fz * fz)
        torque = self.attitude_torque(r, omega_b, (fx / n, fy / n, fz / n), yaw_des, yaw_rate_des)
        if torque_ff is not None:
            tx, ty, tz = torque
            ux, uy, uz = torque_ff.tolist()
            torque = (tx + ux, ty + uy, tz + uz)
        return mix(frame, thrust, torque, self.desaturate), saturated, thrust

    def attitude_torque(
        self,
        R: Sequence[float],
        omega_b: np.ndarray,
        b3: tuple[float, float, float],
        yaw_des: float,
        yaw_rate_des: float = 0.0,
    ) -> tuple[float, float, float]:
        """Geometric PD torque (N·m, body) towards the attitude with body z along the unit vector
        ``b3`` (world) and body x as close to the heading ``yaw_des`` as ``b3`` allows.

        ``R`` is the current rotation body → world, row-major (9 floats).
        """
        return geometric_torque(
            FLOATS, R, omega_b.tolist(), b3, yaw_des, yaw_rate_des, self._J, self._kR, self._kW
        )

    # -- N envs --------------------------------------------------------------------------------
    def command_batch(
        self,
        R_rows: np.ndarray,
        omega_b: np.ndarray,
        a_cmd: np.ndarray,
        yaw_des: np.ndarray,
        yaw_rate_des: np.ndarray,
        torque_ff: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`command` of each env: rotations ``R_rows`` (N, 9) body → world row-major,
        rates ``omega_b`` (N, 3) rad/s body, commands ``a_cmd`` (N, 3) m/s² world, headings
        ``yaw_des``/``yaw_rate_des`` (N,) rad, rad/s, ``torque_ff`` (N, 3) N·m body → rotor
        thrusts (N, 4) N, saturated (N,) and collectives (N,) N."""
        r = R_rows.T  # 9 rows of N values
        a = a_cmd.T
        frame = self.airframe
        fx, fy, fz, saturated = tilt_limited_force(
            ARRAYS, frame, a[0], a[1], a[2], self.tan_max_tilt, self.tilt_budget
        )
        thrust = fx * r[2] + fy * r[5] + fz * r[8]  # F · (R e_z)
        saturated = saturated | (thrust > frame.max_thrust)
        thrust = np.clip(thrust, 0.0, frame.max_thrust)
        n = np.sqrt(fx * fx + fy * fy + fz * fz)
        tx, ty, tz = self.attitude_torque_batch(
            r, omega_b, (fx / n, fy / n, fz / n), yaw_des, yaw_rate_des
        )
        if torque_ff is not None:
            tx, ty, tz = tx + torque_ff[:, 0], ty + torque_ff[:, 1], tz + torque_ff[:, 2]
        return mix_components(frame, thrust, tx, ty, tz, self.desaturate), saturated, thrust

    def attitude_torque_batch(
        self,
        r: np.ndarray,
        omega_b: np.ndarray,
        b3: tuple[np.ndarray, np.ndarray, np.ndarray],
        yaw_des: np.ndarray,
        yaw_rate_des: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`attitude_torque` per env: components (N,) each, N·m body, for rotations ``r``
        (9, N) body → world row-major, rates (N, 3) rad/s and desired body z axes ``b3`` (three
        (N,) world components)."""
        w = omega_b.T
        return geometric_torque(
            ARRAYS, r, (w[0], w[1], w[2]), b3, yaw_des, yaw_rate_des, self._J, self._kR, self._kW
        )


@dataclass(frozen=True)
class TiltBudget:
    """The wider tilt limit of :class:`AttitudeGains` as :func:`tilt_limited_force` uses it."""

    tan_tilt: float  # tan(budget_tilt)
    force: float  # N, the collective the widened tilt may reach (thrust_budget · 4·f_max)

    @staticmethod
    def of(airframe: Airframe, gains: AttitudeGains) -> TiltBudget | None:
        """The budget of ``gains``, or ``None`` where ``budget_tilt`` widens nothing."""
        if gains.budget_tilt <= gains.max_tilt:
            return None
        return TiltBudget(math.tan(gains.budget_tilt), gains.thrust_budget * airframe.max_thrust)


def tilt_limited_force(
    xp: Namespace,
    frame: Airframe,
    ax: Any,
    ay: Any,
    az: Any,
    tan_max_tilt: float,
    budget: TiltBudget | None = None,
) -> tuple[Any, Any, Any, Any]:
    """Desired force ``(fx, fy, fz)`` (N, world) for the acceleration command ``(ax, ay, az)``
    (m/s², world) and whether it saturated: the vertical component is at least 5 % of hover
    (never a downward thrust vector) and the horizontal one is scaled down to ``max_tilt``, or
    with a ``budget`` to the widest tilt up to its ``budget_tilt`` whose force stays within the
    budget's collective (never below ``max_tilt``).

    ``xp`` is :class:`~residual_quad.envs.xp.FLOATS` for one vehicle (Python floats) or
    :class:`~residual_quad.envs.xp.ARRAYS` for a batch (arrays of shape (N,)): the one formula of
    the single and the batched inner loop.
    """
    m = frame.mass
    fx, fy, fz = m * ax, m * ay, m * (az + frame.gravity)
    f_min = 0.05 * frame.hover_thrust
    low = fz < f_min
    fz = xp.where(low, f_min, fz)
    h = xp.sqrt(fx * fx + fy * fy)
    h_max = fz * tan_max_tilt
    if budget is not None:
        room = budget.force * budget.force - fz * fz
        h_room = xp.sqrt(xp.where(room > 0.0, room, 0.0))  # the horizontal force within it
        h_wide = fz * budget.tan_tilt
        h_room = xp.where(h_room < h_wide, h_room, h_wide)
        h_max = xp.where(h_room > h_max, h_room, h_max)
    over = h > h_max
    h_safe = xp.where(over, h, 1.0)  # the quotient is used only where ``over``
    fx = xp.where(over, fx * h_max / h_safe, fx)
    fy = xp.where(over, fy * h_max / h_safe, fy)
    return fx, fy, fz, low | over


def geometric_torque(
    xp: Namespace,
    R: Sequence[Any],
    omega_b: Sequence[Any],
    b3: Sequence[Any],
    yaw_des: Any,
    yaw_rate_des: Any,
    J: Sequence[float],
    k_R: Sequence[float],
    k_W: Sequence[float],
) -> tuple[Any, Any, Any]:
    """Geometric PD torque (N·m, body), the one formula of the single and the batched inner loop.

    ``xp`` is :class:`~residual_quad.envs.xp.FLOATS` for one vehicle (every argument a Python
    float: ``R`` the 9 entries of body → world row-major, ``omega_b`` rad/s body, ``b3`` the
    desired body z axis, world) or :class:`~residual_quad.envs.xp.ARRAYS` for a batch (every entry
    an array of shape (N,)). The arithmetic is written once, so both paths evaluate the same
    expressions in the same order.
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = R
    b3x, b3y, b3z = b3
    # desired attitude: b3, then b1 as close to the heading as b3 allows
    c, s = xp.cos(yaw_des), xp.sin(yaw_des)
    b2x, b2y, b2z = -b3z * s, b3z * c, b3x * s - b3y * c  # b3 × (c, s, 0)
    n = xp.sqrt(b2x * b2x + b2y * b2y + b2z * b2z)
    b2x, b2y, b2z = b2x / n, b2y / n, b2z / n
    b1x, b1y, b1z = b2y * b3z - b2z * b3y, b2z * b3x - b2x * b3z, b2x * b3y - b2y * b3x
    # E = Rdᵀ R, only the entries the error and the rate feed-forward need
    e01 = b1x * r01 + b1y * r11 + b1z * r21
    e02 = b1x * r02 + b1y * r12 + b1z * r22
    e10 = b2x * r00 + b2y * r10 + b2z * r20
    e12 = b2x * r02 + b2y * r12 + b2z * r22
    e20 = b3x * r00 + b3y * r10 + b3z * r20
    e21 = b3x * r01 + b3y * r11 + b3z * r21
    e22 = b3x * r02 + b3y * r12 + b3z * r22
    eRx, eRy, eRz = 0.5 * (e21 - e12), 0.5 * (e02 - e20), 0.5 * (e10 - e01)
    # desired rate Eᵀ (0, 0, ψ̇_d) in the body frame
    wx, wy, wz = omega_b
    ewx, ewy, ewz = wx - e20 * yaw_rate_des, wy - e21 * yaw_rate_des, wz - e22 * yaw_rate_des
    Jx, Jy, Jz = J
    kRx, kRy, kRz = k_R
    kWx, kWy, kWz = k_W
    return (
        -kRx * eRx - kWx * ewx + (wy * Jz * wz - wz * Jy * wy),
        -kRy * eRy - kWy * ewy + (wz * Jx * wx - wx * Jz * wz),
        -kRz * eRz - kWz * ewz + (wx * Jy * wy - wy * Jx * wx),
    )


# ----------------------------------------------------------------------------- N envs
def mix_batch(
    frame: Airframe, thrust: np.ndarray, torque: np.ndarray, desaturate: bool = False
) -> np.ndarray:
    """:func:`residual_quad.envs.airframe.mix` of each env: collective (N,) N, torque (N, 3)
    N·m → rotor thrusts (N, 4) N, with the same saturation rule."""
    return mix_components(frame, thrust, torque[:, 0], torque[:, 1], torque[:, 2], desaturate)


def mix_components(
    frame: Airframe,
    thrust: np.ndarray,
    tx: np.ndarray,
    ty: np.ndarray,
    tz: np.ndarray,
    desaturate: bool = False,
) -> np.ndarray:
    """:func:`mix_batch` with the torque as its three body components (N,) N·m each, as the
    inner loop computes them (no (N, 3) stack to build and take apart)."""
    return np.stack(rotor_thrusts(ARRAYS, frame, thrust, tx, ty, tz, desaturate), axis=1)
