"""Attitude formulas of the plant and the observation, free of MuJoCo.

Operators only, so a formula runs on Python floats (one vehicle) and on equal-shaped float64 arrays
(a batch) with the same bits per element (the rules of :mod:`residual_quad.envs.xp`). It lives
apart from :mod:`~residual_quad.envs.plant` (which imports MuJoCo) because the observation layout,
and through it every controller, needs it.
"""

from __future__ import annotations

__all__ = ["quat_to_rot"]


def quat_to_rot(qw, qx, qy, qz):
    """Row-major body → world rotation matrix (9 entries) of a unit quaternion (w, x, y, z).

    Operators only: Python floats give floats, equal-shaped arrays give arrays (the vector env
    calls it on a batch), with the same bits per element."""
    return [
        1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw),
        2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw),
        2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy),
    ]  # fmt: skip
