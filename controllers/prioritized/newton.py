"""The shared core of one hierarchical Newton cycle ([HN]; ``docs/hnewton.md`` M2–M5).

Both Newton controllers of the project -- the generic task-based
:class:`~residual_quad.controllers.prioritized.hnewton.HierarchicalNewton` and the quadrotor's
fixed-layout :class:`~residual_quad.controllers.prioritized.quad.ThrustVectorNewton` -- derive
from :class:`NewtonCore`, which owns everything that does not depend on the tasks or on the HLSP
solver:

* the GN/Newton switching rule ([HN eq. 21], decision D1);
* the hierarchical Hessian ``Ĥ_l = s·Σ_{j<=l} λ_{j,l}·H_j`` ([HN eq. 15]) from the control
  multipliers, ``s`` the multiplier scale ``λ^optim = s·λ^ctrl`` ([HN eq. 19], decision D6);
* the factor ``R_l`` appended under level ``l`` ([HN eq. 17–18]) for ``lm``, ``bfgs`` and
  ``newton``, with eigenvalue clamping of an indefinite matrix (decision D4);
* the damped BFGS update on the Lagrangian gradient ([HN18]; [POWELL]) and its state;
* the extraction of the task-row multipliers from an HLSP result;
* the trust-region ratio rule (decision D2).

A level evaluation is ``(e, J, H)``: task values ``(m,)``, Jacobian ``(m, n)`` and Hessian stack
``(m, n, n)`` of the ``n`` configuration variables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "METHODS",
    "SWITCHES",
    "LevelEval",
    "NewtonCore",
    "NewtonSettings",
    "adapt_trust_region",
    "check_method",
    "clamp_factor",
    "damped_bfgs_update",
    "task_multipliers",
]

#: the variants, differing only in the factor ``R_l`` appended under a level (M3)
METHODS = ("gn", "lm", "bfgs", "newton")
#: ``residual``: augment a level only when its GN slack is numerically nonzero (eq. 21)
SWITCHES = ("residual", "always", "never")

#: ``(e, J, H)`` of one level: values (m,), Jacobian (m, n), Hessian stack (m, n, n)
LevelEval = tuple[np.ndarray, np.ndarray, np.ndarray]
#: ``lam[l][j]``: multipliers ``λ_{j,l}`` of the task rows of level ``j`` in subproblem ``l``
Multipliers = list[list[np.ndarray]]


def check_method(method: str, switch: str) -> None:
    """Raise ``ValueError`` for an unknown variant or switching rule."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {list(METHODS)}")
    if switch not in SWITCHES:
        raise ValueError(f"switch must be residual|always|never, got {switch!r}")


@dataclass(frozen=True)
class NewtonSettings:
    """What the shared cycle needs to know (units in brackets).

    ``multiplier_scale`` is ``s`` in ``λ^optim = s·λ^ctrl``: ``Δt`` as in the paper, or ``1/K_p``.
    ``switch_reading`` ``"A"`` tests ``(Δt·||w^GN||)² > ν``, ``"B"`` tests ``||w^GN||² > ν``.
    """

    method: str
    dt: float  # s
    multiplier_scale: float
    nu: float  # switching threshold
    switch: str = "residual"
    switch_reading: str = "A"
    lm_mu: float = 0.3
    eps: float = 1e-9  # eigenvalue clamp
    bfgs_b0: float = 1e-3  # B_0 = b0·I

    def __post_init__(self) -> None:
        check_method(self.method, self.switch)
        if self.switch_reading not in ("A", "B"):
            raise ValueError("switch_reading must be 'A' or 'B'")


class NewtonCore:
    """Switching, hierarchical Hessian, level factors, BFGS state and multiplier memory.

    A subclass evaluates its tasks into one :data:`LevelEval` per level and solves the GN and the
    augmented HLSPs; this class turns evaluations and multipliers into the rows appended to each
    level. State: ``lam`` (control multipliers of the last solve), ``B`` (one BFGS matrix per
    level), ``prev_q``/``prev_J`` (configuration and Jacobians of the previous cycle).
    """

    def __init__(self, settings: NewtonSettings, n: int, n_levels: int) -> None:
        self.settings = settings
        self.n = int(n)
        self.n_levels = int(n_levels)
        self.reset_core()

    def reset_core(self) -> None:
        """Forget multipliers, BFGS matrices and the previous cycle."""
        self.lam: Multipliers | None = None
        self.B = [self.settings.bfgs_b0 * np.eye(self.n) for _ in range(self.n_levels)]
        self.prev_q: np.ndarray | None = None
        self.prev_J: list[np.ndarray] | None = None

    def switch_on(self, w_norm: float) -> bool:
        """Whether a level with GN slack norm ``w_norm`` is augmented ([HN eq. 21])."""
        st = self.settings
        if st.switch == "always":
            return True
        if st.switch == "never":
            return False
        val = (st.dt * w_norm) ** 2 if st.switch_reading == "A" else w_norm**2
        return val > st.nu

    def hierarchical_hessian(
        self, ev: Sequence[LevelEval], lam: Multipliers, level: int
    ) -> np.ndarray:
        """``Ĥ_l = s·Σ_{j<=l} λ_{j,l}·H_j`` (n×n, symmetrized) from control multipliers ``lam``."""
        H = np.zeros((self.n, self.n))
        for j in range(level + 1):
            H += np.tensordot(lam[level][j], ev[j][2], axes=1)
        H *= self.settings.multiplier_scale
        return 0.5 * (H + H.T)

    def level_factor(self, li: int, ev: Sequence[LevelEval], lam: Multipliers | None) -> np.ndarray:
        """The factor ``R_l`` (n×n) appended under level ``li`` ([HN eq. 17–18]).

        ``lm``: ``μ·I``; ``bfgs``: Cholesky factor of the (symmetrized) quasi-Newton matrix
        ``B[li]`` (eigenvalue-clamped if it is not positive definite); ``newton``: the clamped
        factor of the hierarchical Hessian, or ``√ε·I`` before any multipliers exist.
        """
        st = self.settings
        if st.method == "lm":
            return st.lm_mu * np.eye(self.n)
        if st.method == "bfgs":
            B = 0.5 * (self.B[li] + self.B[li].T)
            try:
                return np.linalg.cholesky(B).T
            except np.linalg.LinAlgError:
                return clamp_factor(B, st.eps)
        if lam is None:
            return math.sqrt(st.eps) * np.eye(self.n)
        return clamp_factor(self.hierarchical_hessian(ev, lam, li), st.eps)

    def bfgs_update(self, q: np.ndarray, ev: Sequence[LevelEval]) -> None:
        """Secant update of every level's ``B`` with ``s = q − q_prev`` and the change of the
        Lagrangian gradient ``y = s·Σ_{j<=l} (J_j(q) − J_j(q_prev))ᵀ λ_{j,l}`` (M3)."""
        if self.prev_q is None or self.prev_J is None or self.lam is None:
            return
        s = q - self.prev_q
        if float(s @ s) < 1e-30:
            return
        sc = self.settings.multiplier_scale
        for li in range(self.n_levels):
            y = np.zeros(self.n)
            for j in range(li + 1):
                y += sc * (ev[j][1] - self.prev_J[j]).T @ self.lam[li][j]
            self.B[li] = damped_bfgs_update(self.B[li], s, y)

    def remember(self, q: np.ndarray, ev: Sequence[LevelEval]) -> None:
        """Keep ``q`` and the Jacobians for the next cycle's BFGS update."""
        self.prev_q = np.array(q, dtype=float)
        self.prev_J = [J for (_, J, _) in ev]


def task_multipliers(
    multipliers: list[list[np.ndarray]] | None, dims: Sequence[int]
) -> Multipliers | None:
    """Task-row multipliers ``λ^ctrl[l][j]`` from an HLSP result whose level 0 is the hard top
    level and whose level ``l + 1`` starts with the ``dims[l]`` task rows (augmentation rows
    after them are dropped)."""
    if multipliers is None:
        return None
    return [
        [multipliers[li + 1][j + 1][: dims[j]].copy() for j in range(li + 1)]
        for li in range(len(dims))
    ]


def damped_bfgs_update(B: np.ndarray, s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """BFGS update of the Hessian approximation ``B`` with Powell's damping (0.2 / 0.8) [POWELL].

    ``s`` is the step and ``y`` the change of the gradient of the Lagrangian; the damping keeps
    ``B`` positive definite when the curvature ``sᵀy`` is too small. Returns ``B`` unchanged when
    the update is undefined.
    """
    Bs = B @ s
    sBs = float(s @ Bs)
    if sBs <= 0.0:
        return B
    sy = float(s @ y)
    if sy < 0.2 * sBs:  # Powell damping
        theta = 0.8 * sBs / (sBs - sy)
        r = theta * y + (1.0 - theta) * Bs
    else:
        r = y
    sr = float(s @ r)
    if sr <= 1e-300:
        return B
    return B - np.outer(Bs, Bs) / sBs + np.outer(r, r) / sr


def clamp_factor(H: np.ndarray, eps: float) -> np.ndarray:
    """``R`` with ``RᵀR = Q max(U, ε) Qᵀ`` for symmetric ``H = Q U Qᵀ`` (eigen-clamping, M3)."""
    U, Q = np.linalg.eigh(0.5 * (H + H.T))
    return np.sqrt(np.maximum(U, eps))[:, None] * Q.T


def adapt_trust_region(
    vmax: np.ndarray,
    merit_before: float,
    predicted: float,
    merit_after: float,
    box_active: bool,
    tr_min: float,
    cap: np.ndarray,
) -> np.ndarray:
    """Nocedal–Wright ratio rule on the velocity box (decision D2): actual over predicted
    decrease of the task merit below 1/4 shrinks ``vmax`` by 4 (not below ``tr_min``), above 3/4
    with the box active doubles it (not above ``cap``); otherwise ``vmax`` is returned as is."""
    denom = merit_before - predicted
    if denom <= 1e-16:
        return vmax
    ratio = (merit_before - merit_after) / denom
    if ratio < 0.25:
        return np.maximum(vmax / 4.0, tr_min)
    if ratio > 0.75 and box_active:
        return np.minimum(2.0 * vmax, cap)
    return vmax
