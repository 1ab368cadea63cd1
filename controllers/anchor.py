"""A policy anchored at zero tracking error in undisturbed flight: its mean action is
``μ(x) − μ(x̄)``.

``x`` is the policy's input, ``x̄`` the input of the same moment of an undisturbed vehicle
exactly on its reference — the position and velocity errors zero, each previewed point read
from the reference instead of the vehicle, the error integral zero, and the accelerometer
reading what the nominal vehicle's thrusts give (``(0, 0, Σf/m)`` in the body frame, ``m``
the nominal mass); attitude, body rates, thrusts, the height, the past actions and the residual
estimate as they are. Where the tracking error is zero and the accelerometer agrees with the
thrusts, ``x̄ = x`` and the action is zero (to float rounding), whatever the network learned:
the deterministic policy's resting point in calm air is the reference. An unanchored
acceleration policy rests where its mean crosses zero, and the shipped ``ppo_acc`` files cross
it millimetres to centimetres off the reference in calm air (docs/ppo.md, "Anchored at zero
error"). A payload or a wind shows in the accelerometer against the thrusts, so the policy can
still answer a disturbance before it becomes an error.

Only acceleration policies (``ppo_res``, ``ppo_acc``) may be anchored: their action is a
correction whose right value on the reference in calm air is zero; a rotor policy's is the
hover thrust.

``x̄ = x·M + c`` is affine in the raw features (:func:`anchor_map`); the policy sees
normalized features ``x_n = (x − m)/s``, so :func:`anchored_inputs` maps ``x_n`` to ``x̄_n``
with the normalizer's mean ``m`` and scale ``s``. It is written with operators only, so the
torch policy in training (:class:`~residual_quad.training.anchored.AnchoredActorCriticPolicy`)
and the numpy forward that flies it
(:class:`~residual_quad.controllers.numpy_policy.NumpyPolicy`) run the same formula.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.features import FEATURE_DIM, FEATURE_NAMES, ROTOR_MAX_N, G
from residual_quad.controllers.policy_inputs import FeatureSpec

#: the base features that are tracking errors (``ppo_features``: ``e_p``, ``e_v``, heading frame)
ERROR_COLUMNS = tuple(range(6))
_E_P = (0, 1, 2)  # ``e_p`` (m, scale 1): what turns a previewed point into the reference's own
_THRUSTS = tuple(FEATURE_NAMES.index(f"thrust_{i}") for i in range(4))
_IMU = tuple(FEATURE_NAMES.index(f"imu_{a}") for a in "xyz")


def anchor_map(spec: FeatureSpec, action_dim: int, mass_kg: float) -> tuple[np.ndarray, np.ndarray]:
    """``(M (d, d), c (d,))`` with ``x̄ = x·M + c`` for raw inputs ``x`` (n, d) of ``spec``.

    Zero columns for the errors and the error integral; a previewed position reads
    ``p_ref(t + i·dt) − p``, so its anchored value adds ``e_p = p − p_ref`` back (both in the
    heading frame at the same scale; the features' ±3 m clip aside); the accelerometer (in g)
    reads ``(0, 0, Σf_i/(m·g))`` with ``f_i`` the thrusts the features carry and ``m``
    (``mass_kg``, kg) the nominal mass the trackers know.
    """
    if isinstance(mass_kg, bool) or not (
        isinstance(mass_kg, int | float) and math.isfinite(mass_kg) and mass_kg > 0
    ):
        raise ValueError(f"the anchor's mass must be a finite number > 0 (kg), got {mass_kg!r}")
    d = spec.dim(action_dim)
    m = np.eye(d)
    c = np.zeros(d)
    for j in (*ERROR_COLUMNS, *_IMU):
        m[j, j] = 0.0
    for i in range(spec.preview_k):
        for a, src in enumerate(_E_P):
            m[src, FEATURE_DIM + 3 * i + a] = 1.0
    if spec.error_integral:
        names = spec.names(action_dim)
        for a in "xyz":
            j = names.index(f"int_e_p_{a}")
            m[j, j] = 0.0
    # thrust feature t = f·(2/f_max) − 1, so f = (f_max/2)·(t + 1)
    per_rotor = ROTOR_MAX_N / 2.0 / (mass_kg * G)
    for j in _THRUSTS:
        m[j, _IMU[2]] = per_rotor
    c[_IMU[2]] = per_rotor * len(_THRUSTS)
    return m, c


class SparseAnchor(NamedTuple):
    """``x·M + c`` as ``x·diag(M) + x[:, rows]·mix + c``: ``M`` is the identity but for a few
    source rows (``e_p``, the thrusts), so a decision costs O(n·d) instead of a (d, d) product
    — and a non-finite input reaches only the columns it feeds. Built once (:meth:`of`)."""

    keep: Any  # (d,): the diagonal of M
    rows: Any  # (s,) int: the rows of M with an entry off the diagonal
    mix: Any  # (s, d): those rows, their diagonal entry zeroed
    c: Any  # (d,)

    @classmethod
    def of(cls, m: np.ndarray, c: np.ndarray) -> SparseAnchor:
        off = m - np.diag(np.diag(m))
        rows = np.flatnonzero(np.any(off != 0.0, axis=1))
        return cls(np.diag(m).copy(), rows, off[rows], np.asarray(c, dtype=np.float64))


def anchored_inputs(x_n: Any, anchor: SparseAnchor, mean: Any, std: Any, matmul: Any = None) -> Any:
    """``x̄_n`` of normalized inputs ``x_n`` (n, d): back to raw units (``x_n·s + m``), anchored
    (``·M + c``, ``anchor`` its sparse form), normalized again — numpy arrays or torch tensors
    alike (``matmul``: the product, default ``@``). The caller clips as the normalizer does (a
    value the normalizer clipped comes back as its bound, so beyond the bound the anchored input
    is approximate, as the policy saw it in training)."""
    raw = x_n * std + mean
    src = raw[:, anchor.rows]
    mixed = src @ anchor.mix if matmul is None else matmul(src, anchor.mix)
    return (raw * anchor.keep + mixed + anchor.c - mean) / std


def check_anchorable(cfg: Any, kinds: Iterable[str]) -> None:
    """A ``ValueError`` unless a training config's ``ppo.anchored`` is a bool and, where true,
    an anchored policy can be trained: PPO's actor (``algo`` ``ppo``, no privileged critic) of an
    acceleration ``controller`` (one of ``kinds``: ``policy_file.ACCELERATION_KINDS``)."""
    kinds, anchored = tuple(kinds), cfg.ppo.anchored
    if not isinstance(anchored, bool):
        raise ValueError(f"ppo.anchored must be true or false, got {anchored!r}")
    if anchored and cfg.controller not in kinds:
        raise ValueError(
            f"ppo.anchored is for acceleration policies ({', '.join(kinds)}), whose right "
            f"action on the reference is zero; a {cfg.controller} policy's is the hover thrust"
        )
    if anchored and (cfg.algo != "ppo" or cfg.privileged_critic):
        raise ValueError(
            "ppo.anchored anchors PPO's actor with a shared extractor: algo ppo without a "
            f"privileged critic, got algo {cfg.algo!r}, privileged_critic {cfg.privileged_critic}"
        )
