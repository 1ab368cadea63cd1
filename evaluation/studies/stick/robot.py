"""Planar stick robots: serial chains of revolute joints with any number of links.

Joint angles are relative (``θ_i = q_1 + ... + q_i`` is the absolute angle of link ``i``), the base
is at the origin, gravity acts along ``-y``. Every quantity is analytic (``docs/hnewton.md`` M2):

* a point at fraction ``s`` of link ``k``: ``p = sum_{i<k} L_i u(θ_i) + s L_k u(θ_k)``;
* Jacobian column ``j <= k``: ``sum_{i>=j} ℓ_i u'(θ_i)`` with ``u'(θ) = (-sin θ, cos θ)``;
* Hessian ``∂²p/∂q_j∂q_m = -sum_{i>=max(j,m)} ℓ_i u(θ_i)``, O(n²) per point.

Dynamics use uniform rods (centre of mass at mid-length, inertia ``m L²/12``):
``M(q) q̈ + h(q, q̇) = τ`` with ``h = sum_i m_i J_ci^T (q̇^T ∇²p_ci q̇) + g(q)``; in the plane the
rotational inertia adds only the constant ``I_i a_i^T a_i`` to ``M``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRAVITY = 9.81  # m/s^2


@dataclass
class StickRobot:
    """A planar serial chain: link lengths in m, masses in kg (default 1 kg per link)."""

    lengths: np.ndarray
    masses: np.ndarray | None = None
    gravity: float = GRAVITY

    def __post_init__(self) -> None:
        self.lengths = np.asarray(self.lengths, dtype=float).ravel()
        if self.lengths.size == 0 or np.any(self.lengths <= 0.0):
            raise ValueError(f"link lengths must be positive, got {self.lengths}")
        if self.masses is None:
            self.masses = np.ones_like(self.lengths)
        self.masses = np.asarray(self.masses, dtype=float).ravel()
        if self.masses.shape != self.lengths.shape or np.any(self.masses <= 0.0):
            raise ValueError("masses must be positive, one per link")

    @property
    def n(self) -> int:
        """Number of joints (= links)."""
        return int(self.lengths.size)

    def _check_q(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        if q.shape != (self.n,):
            raise ValueError(f"q must have shape ({self.n},), got {q.shape}")
        return q

    def _terms(self, q: np.ndarray, link: int, frac: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-link lever vectors ``ℓ_i u(θ_i)`` up to ``link`` (0-based) and their tail sums."""
        if not 0 <= link < self.n:
            raise ValueError(f"link index {link + 1} out of range 1..{self.n}")
        th = np.cumsum(q)
        ell = self.lengths.copy()
        ell[link] *= frac
        ell[link + 1 :] = 0.0
        c = ell[:, None] * np.stack([np.cos(th), np.sin(th)], axis=1)  # (n, 2)
        tail = np.cumsum(c[::-1], axis=0)[::-1]  # tail[j] = sum_{i>=j} c_i
        return c, tail

    def point(self, q: np.ndarray, link: int, frac: float = 1.0) -> np.ndarray:
        """Position (m) of the point at ``frac`` of link ``link`` (0-based)."""
        _, tail = self._terms(self._check_q(q), link, frac)
        return tail[0].copy()

    def point_jacobian(self, q: np.ndarray, link: int, frac: float = 1.0) -> np.ndarray:
        """``∂p/∂q`` (2×n, m/rad)."""
        _, tail = self._terms(self._check_q(q), link, frac)
        J = np.stack([-tail[:, 1], tail[:, 0]])
        J[:, link + 1 :] = 0.0
        return J

    def point_hessian(self, q: np.ndarray, link: int, frac: float = 1.0) -> np.ndarray:
        """``∂²p/∂q∂q`` (2×n×n, m/rad²)."""
        _, tail = self._terms(self._check_q(q), link, frac)
        idx = np.maximum.outer(np.arange(self.n), np.arange(self.n))
        H = -tail[idx]  # (n, n, 2)
        return np.moveaxis(H, 2, 0).copy()

    def point_all(
        self, q: np.ndarray, link: int, frac: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, Jacobian and Hessian in one pass."""
        _, tail = self._terms(self._check_q(q), link, frac)
        J = np.stack([-tail[:, 1], tail[:, 0]])
        J[:, link + 1 :] = 0.0
        idx = np.maximum.outer(np.arange(self.n), np.arange(self.n))
        H = np.moveaxis(-tail[idx], 2, 0)
        return tail[0].copy(), J, H

    def tips(self, q: np.ndarray) -> np.ndarray:
        """Base and every link tip, shape (n+1, 2), for plotting."""
        th = np.cumsum(self._check_q(q))
        seg = self.lengths[:, None] * np.stack([np.cos(th), np.sin(th)], axis=1)
        return np.vstack([np.zeros(2), np.cumsum(seg, axis=0)])

    # ---------------------------------------------------------------------------- dynamics
    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Joint-space inertia ``M(q)`` (kg m²)."""
        q = self._check_q(q)
        M = np.zeros((self.n, self.n))
        for i in range(self.n):
            Jc = self.point_jacobian(q, i, 0.5)
            a = np.zeros(self.n)
            a[: i + 1] = 1.0
            inertia = self.masses[i] * self.lengths[i] ** 2 / 12.0
            M += self.masses[i] * Jc.T @ Jc + inertia * np.outer(a, a)
        return M

    def bias(self, q: np.ndarray, qdot: np.ndarray) -> np.ndarray:
        """``h(q, q̇) = C(q, q̇) q̇ + g(q)`` (N m): Coriolis, centrifugal and gravity torques."""
        q = self._check_q(q)
        qdot = np.asarray(qdot, dtype=float)
        h = np.zeros(self.n)
        for i in range(self.n):
            _, Jc, Hc = self.point_all(q, i, 0.5)
            acc = np.einsum("ajk,j,k->a", Hc, qdot, qdot)  # J̇ q̇ of the centre of mass
            h += self.masses[i] * (Jc.T @ acc + self.gravity * Jc[1])
        return h

    def forward_dynamics(self, q: np.ndarray, qdot: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """Joint accelerations ``q̈ = M^{-1}(τ - h)`` (rad/s²)."""
        return np.linalg.solve(self.mass_matrix(q), np.asarray(tau, float) - self.bias(q, qdot))
