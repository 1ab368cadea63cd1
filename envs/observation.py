"""Layout of the flat observation vector, shared by the environment and the controllers."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.envs.checks import integer, is_real, real
from residual_quad.envs.rotations import quat_to_rot


class ObsLayout:
    """Named slices of the ``ResidualQuad-v0`` observation (float64, length :data:`OBS_DIM`).

    ==========  =======  ============================================  =========
    slice       size     quantity                                      unit
    ==========  =======  ============================================  =========
    pos         3        position, world (ENU)                         m
    vel         3        velocity, world                               m/s
    rot         9        rotation matrix body → world, row-major       –
    omega_b     3        body angular rate, body frame                 rad/s
    ref_pos     3        reference position, world                     m
    ref_vel     3        reference velocity, world                     m/s
    ref_acc     3        reference acceleration, world                 m/s²
    ref_yaw     1        reference heading, wrapped to [-π, π]         rad
    ref_yaw_rate 1       reference heading rate                        rad/s
    thrusts     4        rotor thrusts applied over the last period    N
    imu         3        accelerometer specific force, body frame      m/s²
    ==========  =======  ============================================  =========

    Single entries have names too, for scalar code on Python floats (no magic numbers): ``x, y, z``
    (position), ``vx, vy, vz`` (velocity), ``R00`` … ``R22`` (rotation matrix entries; ``R22`` is
    the cosine of the tilt), ``rot_z`` (slice of the third column ``R·e_z``, the body z-axis in
    the world frame) and ``thrust0`` … ``thrust3`` (rotor thrusts in the rotor order of
    :mod:`residual_quad.envs.airframe`).
    """

    pos = slice(0, 3)
    vel = slice(3, 6)
    rot = slice(6, 15)
    omega_b = slice(15, 18)
    ref_pos = slice(18, 21)
    ref_vel = slice(21, 24)
    ref_acc = slice(24, 27)
    ref_yaw = 27
    ref_yaw_rate = 28
    thrusts = slice(29, 33)
    imu = slice(33, 36)

    # single entries of the fields above
    x, y, z = 0, 1, 2  # m, world
    vx, vy, vz = 3, 4, 5  # m/s, world
    R00, R01, R02 = 6, 7, 8  # row-major body → world rotation
    R10, R11, R12 = 9, 10, 11
    R20, R21, R22 = 12, 13, 14  # R22 = cos(tilt)
    rot_z = slice(8, 15, 3)  # (R02, R12, R22) = R·e_z, the body z-axis in the world frame
    thrust0, thrust1, thrust2, thrust3 = 29, 30, 31, 32  # N

    @staticmethod
    def rotation(obs: np.ndarray) -> np.ndarray:
        """The body → world rotation matrix (3×3 view)."""
        return obs[ObsLayout.rot].reshape(3, 3)

    @staticmethod
    def preview_pos(k: int) -> slice:
        """The future reference positions of a preview of ``k`` points (world, m, point-major:
        ``p1x p1y p1z p2x …``), right after the :data:`OBS_DIM` base entries."""
        return slice(OBS_DIM, OBS_DIM + 3 * k)

    @staticmethod
    def preview_vel(k: int) -> slice:
        """The future reference velocities of a preview of ``k`` points (world, m/s, the same
        order), after :meth:`preview_pos`."""
        return slice(OBS_DIM + 3 * k, OBS_DIM + 6 * k)

    @staticmethod
    def bounds(preview: PreviewSpec | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Generous finite limits of every field (a state beyond them ends the episode first);
        with a ``preview``, of its fields too (the reference's limits, ±1e4 m and m/s)."""
        high = np.empty(observation_dim(preview))
        L = ObsLayout
        for name, limit in (
            ("pos", 1e4),  # m
            ("vel", 1e4),  # m/s
            ("rot", 1.0 + 1e-6),
            ("omega_b", 1e4),  # rad/s
            ("ref_pos", 1e4),
            ("ref_vel", 1e4),
            ("ref_acc", 1e4),
            ("ref_yaw", math.pi + 1e-6),  # rad, wrapped
            ("ref_yaw_rate", 1e4),
            ("thrusts", 1e3),  # N
            ("imu", 1e6),  # m/s²
        ):
            high[getattr(L, name)] = limit
        if preview is not None:
            high[L.preview_pos(preview.k)] = 1e4  # m, as ref_pos
            high[L.preview_vel(preview.k)] = 1e4  # m/s, as ref_vel
        return -high, high

    @staticmethod
    def names() -> dict[str, slice | int]:
        """Every named field of the table above and its index or slice (single entries such as
        ``z`` or ``R22`` are not listed)."""
        return {name: getattr(ObsLayout, name) for name in FIELDS}


FIELDS: tuple[str, ...] = (
    "pos",
    "vel",
    "rot",
    "omega_b",
    "ref_pos",
    "ref_vel",
    "ref_acc",
    "ref_yaw",
    "ref_yaw_rate",
    "thrusts",
    "imu",
)
"""The fields of the observation in order (they tile ``0 … OBS_DIM − 1``)."""


OBS_DIM = 36
"""Entries of the observation without a reference preview (the base fields of :data:`FIELDS`)."""

MAX_PREVIEW_POINTS = 1000
"""Most reference-preview points accepted (6 036 observation entries): more is a typo."""


@dataclass(frozen=True)
class PreviewSpec:
    """A reference preview: ``k`` future reference points ``dt_s`` apart [DATT] [SIMPLEFLIGHT].

    The observation gains ``6k`` entries after the base ones: the reference positions
    (:meth:`ObsLayout.preview_pos`) then velocities (:meth:`ObsLayout.preview_vel`) at
    ``t + dt_s, t + 2·dt_s, …, t + k·dt_s``, ``t`` the time of the observation's ``ref_pos``.
    """

    k: int  # points, in [0, MAX_PREVIEW_POINTS]
    dt_s: float  # s, > 0 and finite

    def __post_init__(self) -> None:
        integer("preview K (points)", self.k, low=0, high=MAX_PREVIEW_POINTS)
        real("preview dt (s)", self.dt_s, low=0.0, low_open=True, unit="s")

    @property
    def dim(self) -> int:
        """Observation entries the preview adds (3 position + 3 velocity per point)."""
        return 6 * self.k


def check_preview(preview: Any) -> PreviewSpec | None:
    """The ``preview`` argument ``(K, dt)`` as a :class:`PreviewSpec`, or ``None`` for no
    preview (``None`` or ``K = 0``); a :class:`PreviewSpec` passes as is (``None`` if its
    ``k`` is 0).

    ``K``: an integer in ``[0, MAX_PREVIEW_POINTS]`` (a float, even ``10.0``, and a bool are
    refused); ``dt``: a finite real number of seconds ``> 0``. Anything else — another shape, a
    string, a negative, fractional or huge ``K``, ``dt <= 0``, NaN or inf — is a ``ValueError``
    naming ``preview`` and saying what is valid.
    """
    if preview is None:
        return None
    if isinstance(preview, PreviewSpec):
        return preview if preview.k else None
    valid = (
        f"preview must be None or (K, dt): K an integer in [0, {MAX_PREVIEW_POINTS}] points, "
        "dt a finite number of seconds > 0"
    )
    if isinstance(preview, str | bytes) or not isinstance(preview, Sequence | np.ndarray):
        raise ValueError(f"{valid}; got {preview!r}")
    items = list(preview) if not isinstance(preview, np.ndarray) else preview.tolist()
    if len(items) != 2:
        raise ValueError(f"{valid}; got {preview!r} ({len(items)} entries)")
    k, dt_s = items
    is_int = isinstance(k, numbers.Integral) and not isinstance(k, bool | np.bool_)
    if not is_int or not 0 <= int(k) <= MAX_PREVIEW_POINTS:
        raise ValueError(f"{valid}; got K = {k!r}")
    try:
        dt_ok = is_real(dt_s) and math.isfinite(float(dt_s)) and float(dt_s) > 0.0
    except OverflowError:  # an integer beyond the float range
        dt_ok = False
    if not dt_ok:
        raise ValueError(f"{valid}; got dt = {dt_s!r}")
    return PreviewSpec(int(k), float(dt_s)) if int(k) else None


def observation_dim(preview: PreviewSpec | None) -> int:
    """Entries of the observation: :data:`OBS_DIM` plus ``6K`` with a preview of ``K`` points."""
    return OBS_DIM + (0 if preview is None else preview.dim)


def is_observation_width(width: int) -> bool:
    """Whether ``width`` entries can be an observation: :data:`OBS_DIM` plus ``6K`` for a
    preview of ``K`` points (``K`` from 0 to :data:`MAX_PREVIEW_POINTS`)."""
    extra = int(width) - OBS_DIM
    return extra >= 0 and extra % 6 == 0 and extra // 6 <= MAX_PREVIEW_POINTS


def layout_name(preview: PreviewSpec | None) -> str:
    """A short name of the observation layout for messages: ``"base (36)"`` or
    ``"base + preview 10 × 0.06 s (96)"`` (``preview`` as :func:`check_preview` takes it)."""
    spec = check_preview(preview)
    if spec is None:
        return f"base ({OBS_DIM})"
    return f"base + preview {spec.k} × {spec.dt_s:g} s ({observation_dim(spec)})"


def true_observation(qpos: Any, qvel: Any, reference: Any, thrusts: Any, imu: Any) -> Any:
    """The true observation of the :class:`ObsLayout` layout from the physics' state.

    Args:
        qpos: the free joint's position ``(x, y, z, qw, qx, qy, qz)`` (m, unit quaternion).
        qvel: its velocity ``(vx, vy, vz, ωx, ωy, ωz)`` (m/s world, rad/s body).
        reference: the reference part, 11 entries (``ref_pos`` … ``ref_yaw_rate``, see
            :func:`~residual_quad.envs.trajectories.reference_fields`).
        thrusts: rotor thrusts applied over the period, N; ``imu``: accelerometer, m/s², body.

    One observation from sequences of floats is a list of 36 floats (what the single env's
    task step computes on); ``(N, k)`` arrays give an ``(N, OBS_DIM)`` array, the same values
    (the attitude by the same operators of :func:`~residual_quad.envs.rotations.quat_to_rot`).
    """
    batch = isinstance(qpos, np.ndarray) and qpos.ndim == 2
    if batch:  # field rows
        qpos, qvel, reference, thrusts, imu = qpos.T, qvel.T, reference.T, thrusts.T, imu.T
    x, y, z, qw, qx, qy, qz = qpos
    vx, vy, vz, wx, wy, wz = qvel
    fields = [
        x, y, z, vx, vy, vz, *quat_to_rot(qw, qx, qy, qz), wx, wy, wz, *reference, *thrusts, *imu
    ]  # fmt: skip
    return np.stack(fields, axis=1) if batch else fields
