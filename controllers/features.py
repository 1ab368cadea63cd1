"""The PPO policies' input: :func:`ppo_features` of a ``ResidualQuad-v0`` observation.

One function for training (the SB3 env adapter, batched: :func:`ppo_features_batch`) and
deployment (the ``ppo``/``ppo_res`` controllers, the ``sb3`` adapter's ``ppo_features``
observation), so the two can never disagree on the input. :data:`FEATURE_DIM` is the input size
a policy file must have (:mod:`residual_quad.controllers.policy_file`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

# fixed feature scales (independent of the airframe the policy is flown on, so that the
# function is the same in training and deployment)
G = 9.81  # m/s², the accelerometer's unit
ROTOR_MAX_N = 6.0  # N, rotor thrust that maps to +1
_POS_CLIP = 3.0  # m, position error beyond this reads as this (the env ends episodes at 5 m)
_SCALES = {"e_p": 1.0, "e_v": 2.0, "ref_v": 5.0, "ref_a": 5.0, "omega": 4.0, "z": 3.0}

FEATURE_NAMES: tuple[str, ...] = (
    *(f"e_p_{a}" for a in "xyz"),
    *(f"e_v_{a}" for a in "xyz"),
    *(f"ref_v_{a}" for a in "xyz"),
    *(f"ref_a_{a}" for a in "xyz"),
    *(f"R_h_{i}{j}" for i in range(3) for j in range(3)),
    "sin_dyaw",
    "cos_dyaw",
    "ref_yaw_rate",
    *(f"omega_{a}" for a in "xyz"),
    *(f"thrust_{i}" for i in range(4)),
    *(f"imu_{a}" for a in "xyz"),
    "z",
)
FEATURE_DIM = len(FEATURE_NAMES)


def ppo_features(obs: np.ndarray) -> np.ndarray:
    """The policy input: a scaled, heading-frame view of one ``ResidualQuad-v0`` observation.

    World vectors (position and velocity errors ``p − p_ref``, ``v − v_ref``, the reference
    velocity and acceleration) are rotated into the vehicle's heading frame (world rotated by the
    current yaw ψ), so that "ahead" means the same thing whatever the heading: the map from errors
    to body-rate or rotor commands becomes nearly yaw-invariant, which is what makes the helix
    (yaw follows the tangent) learnable. The attitude enters as ``R_h = R_z(ψ)ᵀ·R`` (tilt, no
    yaw), the heading error as sin/cos of ``ψ − ψ_ref``. Body rates, the last rotor thrusts
    (normalized to [-1, 1] like the ``rotor`` action), the accelerometer (in g; with the thrusts it
    reveals the true mass) and the height (ground effect) complete it. Every term is O(1).

    Returns a float32 vector of :data:`FEATURE_DIM` entries named :data:`FEATURE_NAMES`.
    """
    o = np.asarray(obs, dtype=np.float64)
    R = o[L.rot].reshape(3, 3)
    psi = math.atan2(R[1, 0], R[0, 0])
    c, s = math.cos(psi), math.sin(psi)
    Rz_T = np.array(((c, s, 0.0), (-s, c, 0.0), (0.0, 0.0, 1.0)))
    e_p = np.clip(Rz_T @ (o[L.pos] - o[L.ref_pos]), -_POS_CLIP, _POS_CLIP)
    e_v = Rz_T @ (o[L.vel] - o[L.ref_vel])
    ref_v = Rz_T @ o[L.ref_vel]
    ref_a = Rz_T @ o[L.ref_acc]
    dyaw = psi - o[L.ref_yaw]
    return np.concatenate(
        (
            e_p / _SCALES["e_p"],
            e_v / _SCALES["e_v"],
            ref_v / _SCALES["ref_v"],
            ref_a / _SCALES["ref_a"],
            (Rz_T @ R).ravel(),
            (math.sin(dyaw), math.cos(dyaw), o[L.ref_yaw_rate]),
            o[L.omega_b] / _SCALES["omega"],
            o[L.thrusts] * (2.0 / ROTOR_MAX_N) - 1.0,
            o[L.imu] / G,
            (o[2] / _SCALES["z"],),
        )
    ).astype(np.float32)


def ppo_features_rows(obs: np.ndarray) -> np.ndarray:
    """:func:`ppo_features` of each row of ``obs`` (n, OBS_DIM), bit for bit, in array form.

    The same operations row by row: the yaw, its cosine and sine by ``math`` (numpy's vector
    transcendentals may round differently), the heading rotation by a stacked ``matmul`` (numpy
    hands each row the same BLAS call as the row's ``R_z(ψ)ᵀ @ v``), the rest elementwise.
    The deployed controllers fly with it (their rows were flown with :func:`ppo_features`);
    :func:`ppo_features_batch` is the faster form training uses.
    """
    o = np.asarray(obs, dtype=np.float64)
    if o.ndim != 2 or o.shape[1] != OBS_DIM:
        raise ValueError(f"observations must have shape (n, {OBS_DIM}), got {o.shape}")
    n = len(o)
    R = o[:, L.rot].reshape(n, 3, 3)
    psi = np.array(
        [math.atan2(a, b) for a, b in zip(R[:, 1, 0].tolist(), R[:, 0, 0].tolist(), strict=True)]
    )
    c = np.array([math.cos(x) for x in psi.tolist()])
    s = np.array([math.sin(x) for x in psi.tolist()])
    Rz_T = np.zeros((n, 3, 3))
    Rz_T[:, 0, 0], Rz_T[:, 0, 1], Rz_T[:, 1, 0], Rz_T[:, 1, 1] = c, s, -s, c
    Rz_T[:, 2, 2] = 1.0

    def heading(v: np.ndarray) -> np.ndarray:  # R_z(ψ)ᵀ @ v of each row
        return np.matmul(Rz_T, v[:, :, None])[:, :, 0]

    dyaw = (psi - o[:, L.ref_yaw]).tolist()
    sin_cos = np.array([(math.sin(x), math.cos(x)) for x in dyaw]).reshape(n, 2)
    return _assemble(o, heading, np.matmul(Rz_T, R).reshape(n, 9), sin_cos)


def _assemble(
    o: np.ndarray,
    heading: Callable[[np.ndarray], np.ndarray],
    R_h: np.ndarray,
    sin_cos: np.ndarray,
) -> np.ndarray:
    """The feature vector of raw observations ``o`` (n, OBS_DIM) in the order of
    :data:`FEATURE_NAMES`, float32, given the rotation into each row's heading frame
    ``heading(v)`` of world vectors ``v`` (n, 3), the tilt ``R_h`` (n, 9) and the heading
    error's sine and cosine (n, 2)."""
    return np.concatenate(
        (
            np.clip(heading(o[:, L.pos] - o[:, L.ref_pos]), -_POS_CLIP, _POS_CLIP) / _SCALES["e_p"],
            heading(o[:, L.vel] - o[:, L.ref_vel]) / _SCALES["e_v"],
            heading(np.ascontiguousarray(o[:, L.ref_vel])) / _SCALES["ref_v"],
            heading(np.ascontiguousarray(o[:, L.ref_acc])) / _SCALES["ref_a"],
            R_h,
            sin_cos,
            o[:, L.ref_yaw_rate, None],
            o[:, L.omega_b] / _SCALES["omega"],
            o[:, L.thrusts] * (2.0 / ROTOR_MAX_N) - 1.0,
            o[:, L.imu] / G,
            o[:, 2:3] / _SCALES["z"],
        ),
        axis=1,
    ).astype(np.float32)


def _heading_of(o: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The heading frame of raw observations ``(n, ≥ OBS_DIM)``: the rotations ``R`` (n, 3, 3),
    the yaw ``ψ`` of each and its cosine and sine (n,)."""
    R = o[:, L.rot].reshape(-1, 3, 3)
    psi = np.arctan2(R[:, 1, 0], R[:, 0, 0])
    return R, psi, np.cos(psi), np.sin(psi)


def _to_heading(c: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``R_z(ψ)ᵀ·v`` for world vectors ``v`` (..., 3) of ``cos ψ`` ``c`` and ``sin ψ`` ``s``
    shaped as ``v[..., 0]``: the vectors in the heading frame."""
    x, y = v[..., 0], v[..., 1]
    return np.stack((c * x + s * y, -s * x + c * y, v[..., 2]), axis=-1)


def ppo_features_batch(obs: np.ndarray) -> np.ndarray:
    """:func:`ppo_features` of a batch of observations ``(n, OBS_DIM)`` → ``(n, FEATURE_DIM)``.

    The same features row by row (the training adapter on the vector env uses it; equal to
    :func:`ppo_features` of each row to within one float32 rounding, see the tests), computed
    with array operations instead of one Python call per row.
    """
    o = np.asarray(obs, dtype=np.float64)
    if o.ndim != 2 or o.shape[1] != OBS_DIM:
        raise ValueError(f"observations must have shape (n, {OBS_DIM}), got {o.shape}")
    R, psi, c, s = _heading_of(o)

    def heading(v: np.ndarray) -> np.ndarray:  # R_z(ψ)ᵀ·v, row by row
        return _to_heading(c, s, v)

    rows = [heading(R[:, :, j]) for j in range(3)]  # columns of R_z(ψ)ᵀ·R
    R_h = np.stack(rows, axis=2).reshape(-1, 9)
    dyaw = psi - o[:, L.ref_yaw]
    return _assemble(o, heading, R_h, np.stack((np.sin(dyaw), np.cos(dyaw)), axis=1))


def preview_features(obs: np.ndarray, k: int) -> np.ndarray:
    """Policy features of the reference preview of raw observations ``(n, OBS_DIM + 6k)``
    (``ResidualQuad-v0`` with ``preview=(k, dt)``) → ``(n, 6k)`` float32.

    Each previewed position relative to the vehicle's current position, ``p_ref(t + i·dt) − p``,
    then each previewed velocity, both rotated into the heading frame as
    :func:`ppo_features_batch` rotates its vectors and scaled as its ``e_p`` (clipped to ±3 m)
    and ``ref_v``; the order of the observation (positions point-major, then velocities). A
    future point reads as a position error to come, in the frame the policy already acts in.
    Shapes other than ``(n, OBS_DIM + 6k)`` or a ``k`` that is not an integer ``>= 0`` are a
    ``ValueError``.
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
        raise ValueError(f"k must be an integer >= 0 (preview points), got {k!r}")
    o = np.asarray(obs, dtype=np.float64)
    width = OBS_DIM + 6 * int(k)
    if o.ndim != 2 or o.shape[1] != width:
        raise ValueError(
            f"observations must have shape (n, {width}) (OBS_DIM + 6k with k = {k}), got {o.shape}"
        )
    n = len(o)
    _, _, c, s = _heading_of(o)
    c, s = c[:, None], s[:, None]  # one heading per row, for each of its k points
    ahead = o[:, L.preview_pos(k)].reshape(n, k, 3) - o[:, None, L.pos]
    pos = np.clip(_to_heading(c, s, ahead), -_POS_CLIP, _POS_CLIP) / _SCALES["e_p"]
    vel = _to_heading(c, s, o[:, L.preview_vel(k)].reshape(n, k, 3)) / _SCALES["ref_v"]
    return np.concatenate((pos.reshape(n, -1), vel.reshape(n, -1)), axis=1).astype(np.float32)
