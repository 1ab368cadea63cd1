"""The substep wrench: what the plant recomputes before every physics substep, compiled.

Before each MuJoCo substep the plant assigns the drag on the air-relative velocity (the substep's
wind sample, the events' mean-wind change included) and the rotors' gains (ground effect × each
rotor's efficiency). One compiled function of one vehicle (:func:`_wrench`) computes them; the
single env's plant calls it through :func:`plant_wrench` (its ``MjData`` and model arrays, in
place) and the vector env's lanes through :func:`lane_wrench` (a batch of state rows, written
into ``rollout``'s control), so both envs carry the same bits by construction. The lanes' check
of MuJoCo's reset after a substep (:func:`lane_after`) is compiled too: between two ``rollout``
calls a lane then runs no numpy at all.

Compiled by numba with ``nogil=True``: a lane's wrench runs while the other lanes' threads hold
the GIL, so lanes on threads overlap their Python work as well as the engine's
(:class:`~residual_quad.envs.vector_physics.BatchPhysics`). ``cache=True``: the machine code is
kept in the user's cache folder (``~/.cache/residual_quad/numba``, or ``NUMBA_CACHE_DIR``),
never inside the installed package: the first process compiles it (about 1.2 s, measured) and later
ones load it (about 0.35 s); with no writable folder at all each process compiles it.

Bits: the operations and their order are those of the formulas it replaces
(:func:`~residual_quad.envs.rotations.quat_to_rot`,
:func:`~residual_quad.envs.disturbances.drag_world_force`,
:meth:`~residual_quad.envs.disturbances.GroundEffect.gain`,
:func:`~residual_quad.envs.events.rotor_gains`); numba's default math is IEEE (no fastmath: no
reassociation, no fused multiply-add), and the only function beyond ``+ - * /`` and ``abs`` is
``sqrt``, correctly rounded on every platform. ``tests/envs/test_substep.py`` compares it with
those formulas bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import intrinsic

from residual_quad.compiled import compiled as _compiled
from residual_quad.envs.disturbances import DragModel, GroundEffect

__all__ = ["lane_after", "lane_wrench", "params", "plant_wrench"]

NUM_ROTORS = 4
NPARAMS = 6
"""Entries of :func:`params`: drag ``k_h``, ``k_v``, ``c_lin``, ground effect on (1.0) or off
(0.0), its rotor radius (m) and its largest gain."""


@intrinsic
def _f64_at(typingctx, address):  # pragma: no cover - compiled
    """The float64 pointer at the integer ``address`` (a model array's ``.ctypes.data``)."""
    sig = types.CPointer(types.float64)(types.intp)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def params(drag: DragModel, ground_effect: GroundEffect | None) -> np.ndarray:
    """The plant's constants of the wrench as one float64 array (:data:`NPARAMS` entries)."""
    ge = ground_effect
    return np.array(
        [
            drag.k_h,
            drag.k_v,
            drag.c_lin,
            0.0 if ge is None else 1.0,
            0.0 if ge is None else ge.rotor_radius,
            1.0 if ge is None else ge.max_gain,
        ],
        dtype=np.float64,
    )


@_compiled
def _rot(qw, qx, qy, qz):  # pragma: no cover - compiled
    """``quat_to_rot``: the row-major body → world rotation (9 entries) of ``(qw, qx, qy, qz)``."""
    return (
        1 - 2 * (qy * qy + qz * qz),
        2 * (qx * qy - qz * qw),
        2 * (qx * qz + qy * qw),
        2 * (qx * qy + qz * qw),
        1 - 2 * (qx * qx + qz * qz),
        2 * (qy * qz - qx * qw),
        2 * (qx * qz - qy * qw),
        2 * (qy * qz + qx * qw),
        1 - 2 * (qx * qx + qy * qy),
    )


@_compiled
def _wrench(pz, rot, ax, ay, az, p):  # pragma: no cover - compiled
    """Drag force (N, world) on the air-relative velocity ``(ax, ay, az)`` (m/s, world) of a
    frame at height ``pz`` (m) with the rotation ``rot`` (:func:`_rot`), and the ground-effect
    gain (1 without ground effect); ``p``: :func:`params`. In the operations and order of
    ``drag_world_force`` and ``GroundEffect.gain``."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    k_h, k_v, c_lin = p[0], p[1], p[2]
    bx = r00 * ax + r10 * ay + r20 * az  # air-relative velocity, body frame
    by = r01 * ax + r11 * ay + r21 * az
    bz = r02 * ax + r12 * ay + r22 * az
    kh = k_h * math.sqrt(bx * bx + by * by) + c_lin
    gx, gy, gz = -kh * bx, -kh * by, -(k_v * abs(bz) + c_lin) * bz
    fx = r00 * gx + r01 * gy + r02 * gz
    fy = r10 * gx + r11 * gy + r12 * gz
    fz = r20 * gx + r21 * gy + r22 * gz
    g = 1.0
    if p[3] != 0.0:
        max_gain = p[5]
        if pz <= 0.0:
            g = max_gain
        else:
            r = p[4] / (4.0 * pz)
            if r >= 1.0:
                g = max_gain
            else:
                r2 = r * r
                g = max_gain if r2 >= 1.0 - 1.0 / max_gain else 1.0 / (1.0 - r2)
    return fx, fy, fz, g


@_compiled
def plant_wrench(qpos, qvel, wind, p, eff, xfrc, gain):  # pragma: no cover - compiled
    """One vehicle's substep wrench, in place: ``xfrc[0:3]`` (the body's applied force, N,
    world) and the rotors' actuator ``gain`` (ground effect × efficiency ``eff``) from MuJoCo's
    ``qpos``/``qvel`` and the substep's ``wind`` (m/s, world); returns the ground-effect gain."""
    fx, fy, fz, g = _wrench(
        qpos[2],
        _rot(qpos[3], qpos[4], qpos[5], qpos[6]),
        qvel[0] - wind[0],
        qvel[1] - wind[1],
        qvel[2] - wind[2],
        p,
    )
    xfrc[0] = fx
    xfrc[1] = fy
    xfrc[2] = fz
    for k in range(NUM_ROTORS):
        gain[k] = g * eff[k]
    return g


@_compiled
def lane_wrench(
    s,
    iq,
    iv,
    nv,
    qpos0,
    winds,
    sub,
    p,
    eff,
    fk,
    lagged,
    gain_at,
    gain_stride,
    control,
    x0,
    before,
    force,
    gain,
    rot,
):  # pragma: no cover - compiled
    """A lane's substep ``sub``, before its ``rollout`` call, for the state rows ``s`` (MuJoCo's
    full-physics state; ``qpos`` at column ``iq``, the ``nv`` entries of ``qvel`` at ``iv``):
    for each row ``j``, ``before[j]`` (at the default pose ``qpos0`` at rest), the drag force
    ``force[j]`` (N, world) on its air-relative velocity (wind ``winds[j, sub]``), the
    ground-effect gain ``gain[j]``, the rotation ``rot[j]`` (row-major, 9), and ``rollout``'s
    control ``control[j, 0]``: the rotors' commands ``fk[j]`` (``lagged``: MuJoCo's filter takes
    the command, the gains sit in the model) or the gains × commands, and the force at column
    ``x0``. Returns the gains (ground effect × efficiency ``eff[j]``), ``(n, 4)``; where
    ``gain_at[j]`` is not 0 they are written into the model of row ``j`` too: rotor ``k``'s
    actuator gain is the float64 at address ``gain_at[j]`` + ``k·gain_stride`` entries (its own
    ``actuator_gainprm[k, 0]``, which the caller keeps alive)."""
    n = s.shape[0]
    nq = qpos0.shape[0]
    gains = np.empty((n, NUM_ROTORS))
    for j in range(n):
        rest = True
        for i in range(nq):
            if s[j, iq + i] != qpos0[i]:
                rest = False
        for i in range(iv, iv + nv):
            if s[j, i] != 0.0:
                rest = False
        before[j] = rest
        r = _rot(s[j, iq + 3], s[j, iq + 4], s[j, iq + 5], s[j, iq + 6])
        fx, fy, fz, g = _wrench(
            s[j, iq + 2],
            r,
            s[j, iv] - winds[j, sub, 0],
            s[j, iv + 1] - winds[j, sub, 1],
            s[j, iv + 2] - winds[j, sub, 2],
            p,
        )
        for i in range(9):
            rot[j, i] = r[i]
        at = gain_at[j]
        for k in range(NUM_ROTORS):
            gk = g * eff[j, k]
            gains[j, k] = gk
            control[j, 0, k] = fk[j, k] if lagged else gk * fk[j, k]
            if at != 0:
                _f64_at(at)[k * gain_stride] = gk
        control[j, 0, x0] = fx
        control[j, 0, x0 + 1] = fy
        control[j, 0, x0 + 2] = fz
        force[j, 0], force[j, 1], force[j, 2] = fx, fy, fz
        gain[j] = g
    return gains


@_compiled
def lane_after(result, s, fallen, ids, before, unstable, fk):  # pragma: no cover - compiled
    """A lane's substep after its ``rollout`` call: the new state rows ``s`` from ``result[:,
    0]``; a row ``j`` that lands exactly on ``fallen[ids[j]]`` (what MuJoCo's reset on a warning
    leaves after a substep) from anywhere but the default pose at rest (``before``) is
    ``unstable`` from now on, and its commands ``fk`` are zero for the rest of the period
    (MuJoCo's reset cleared them)."""
    n, m = s.shape
    for j in range(n):
        same = True
        for i in range(m):
            v = result[j, 0, i]
            s[j, i] = v
            if v != fallen[ids[j], i]:
                same = False
        if same and not before[j]:
            unstable[j] = True
        if unstable[j]:
            for k in range(fk.shape[1]):
                fk[j, k] = 0.0
