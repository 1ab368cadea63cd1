"""Hierarchical least-squares programming (HLSP) with equality and inequality levels.

A problem is a list of levels, highest priority first. Level ``l`` holds rows
``lower_l <= A_l x <= upper_l`` (equal bounds make an equality row). The solver minimizes the
slacks lexicographically in the least-squares sense ([HN eq. 7]; ``docs/hnewton.md`` M1)::

    lexmin_x ( ||w_1||^2, ..., ||w_p||^2 ),   w_l = A_l x - clip(A_l x, lower_l, upper_l)

and returns the Lagrange multipliers ``λ_{j,l}`` of every active row ``j`` of levels ``1..l`` in
every level subproblem ``l`` -- the data the hierarchical Hessian of the Newton method needs.

Sign conventions (one signed number per original row):

* slack ``w`` of a row: ``A x - upper`` above the upper bound, ``A x - lower`` below the lower bound
  (negative), ``A x - b`` for an equality row, 0 inside the bounds;
* multipliers satisfy stationarity ``sum_{j<=l} A_j^T λ_{j,l} = 0`` with ``λ_{l,l} = w_l``;
  an inequality row pushing at its upper bound has ``λ >= 0``, at its lower bound ``λ <= 0``.

Two backends share this interface:

* ``"numpy"``: the reference nullspace cascade with a primal active set per level
  (``docs/hnewton.md`` M7), warm-started from the previous active set;
* ``"daqp"``: DAQP's prioritized mode (``break_points``). DAQP normalizes every row, which would
  weight the least-squares slacks by ``1/||a_i||``, so each row ``a_i`` gets an explicit slack
  variable ``v_i`` (``lower <= a_i x - v_i <= upper`` on a hard top level, ``v_l = 0`` softly on
  level ``l``); unit rows are already exact and keep no slack. Multipliers are recovered
  afterwards by a least-squares solve of the stationarity conditions per level.
"""

from __future__ import annotations

from collections.abc import Sequence
from ctypes import c_int
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "HLSPResult",
    "HLSPSolver",
    "Level",
    "solve_hlsp",
]

_INF = 1e30  # DAQP's "no bound"

# daqp sense flags (daqp/include/constants.h)
_ACTIVE, _LOWER, _IMMUTABLE, _SOFT = 1, 2, 4, 8

# per-row activity codes returned in HLSPResult.active
INACTIVE, UPPER, LOWER_, EQUALITY = 0, 1, -1, 2


@dataclass
class Level:
    """One priority level: rows ``lower <= A x <= upper`` (use ±inf for a missing bound)."""

    A: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    name: str = ""

    @classmethod
    def eq(cls, A: np.ndarray, b: np.ndarray, name: str = "") -> Level:
        """Equality rows ``A x = b``."""
        b = np.asarray(b, dtype=float)
        return cls(np.asarray(A, dtype=float), b.copy(), b.copy(), name)

    @classmethod
    def box(cls, n: int, lower: np.ndarray | float, upper: np.ndarray | float) -> Level:
        """Bounds ``lower <= x <= upper`` on all ``n`` variables."""
        lo = np.broadcast_to(np.asarray(lower, dtype=float), (n,)).copy()
        up = np.broadcast_to(np.asarray(upper, dtype=float), (n,)).copy()
        return cls(np.eye(n), lo, up, "box")


@dataclass
class HLSPResult:
    """Solution of an HLSP.

    ``slacks[l]`` is the signed slack of every row of level ``l``; ``multipliers[l][j]`` (for
    ``j <= l``) holds ``λ_{j,l}``, one signed value per row of level ``j`` (0 for inactive rows);
    ``active[l]`` codes every row as 0 inactive, 1 at/above upper, -1 at/below lower, 2 equality.
    """

    x: np.ndarray
    slacks: list[np.ndarray]
    multipliers: list[list[np.ndarray]] | None
    active: list[np.ndarray]
    iterations: int
    backend: str
    status: str = "optimal"
    info: dict = field(default_factory=dict)

    def slack_norms(self) -> np.ndarray:
        """``||w_l||`` for every level."""
        return np.array([float(np.linalg.norm(w)) for w in self.slacks])


LevelLike = Level | tuple[np.ndarray, np.ndarray, np.ndarray]


def _as_levels(levels: Sequence[LevelLike], n: int | None) -> tuple[list[Level], int]:
    """Validate shapes and convert tuples to :class:`Level` (float arrays, ±inf bounds)."""
    if len(levels) == 0:
        raise ValueError("an HLSP needs at least one level")
    out: list[Level] = []
    for k, lev in enumerate(levels):
        if isinstance(lev, Level):
            A, lo, up, name = lev.A, lev.lower, lev.upper, lev.name
        else:
            if len(lev) != 3:
                raise ValueError(f"level {k}: expected (A, lower, upper), got {len(lev)} items")
            A, lo, up = lev
            name = ""
        A = np.atleast_2d(np.asarray(A, dtype=float))
        lo = np.atleast_1d(np.asarray(lo, dtype=float)).ravel()
        up = np.atleast_1d(np.asarray(up, dtype=float)).ravel()
        if A.ndim != 2:
            raise ValueError(f"level {k}: A must be 2-D, got shape {A.shape}")
        if n is None:
            n = A.shape[1]
        if A.shape[1] != n:
            raise ValueError(f"level {k}: A has {A.shape[1]} columns, expected n = {n}")
        m = A.shape[0]
        if lo.shape != (m,) or up.shape != (m,):
            raise ValueError(
                f"level {k}: bounds must have shape ({m},), got lower {lo.shape}, upper {up.shape}"
            )
        if np.any(lo > up):
            raise ValueError(f"level {k}: lower > upper in rows {np.flatnonzero(lo > up)}")
        if not (np.all(np.isfinite(A)) and not np.any(np.isnan(lo)) and not np.any(np.isnan(up))):
            raise ValueError(f"level {k}: A and bounds must be finite numbers (bounds may be ±inf)")
        out.append(Level(A, lo, up, name))
    assert n is not None
    return out, n


def _null(A: np.ndarray, tol: float) -> np.ndarray:
    """Orthonormal basis of the null space of ``A`` (columns), rank decided relative to ``tol``."""
    n = A.shape[1]
    if A.shape[0] == 0:
        return np.eye(n)
    _, s, vt = np.linalg.svd(A, full_matrices=True)
    rank = int(np.sum(s > tol * max(1.0, s[0] if s.size else 0.0)))
    return vt[rank:].T


def _signed_slack(ax: np.ndarray, lo: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Signed slack of rows with values ``ax``: distance outside ``[lo, up]`` (0 inside)."""
    return np.where(ax > up, ax - up, 0.0) + np.where(ax < lo, ax - lo, 0.0)


def _activity(
    ax: np.ndarray, lo: np.ndarray, up: np.ndarray, eq: np.ndarray, tol: np.ndarray
) -> np.ndarray:
    """Per-row code: 2 equality, 1 at/above upper, -1 at/below lower, 0 strictly inside."""
    act = np.zeros(ax.shape, dtype=int)
    act[ax >= up - tol] = UPPER
    act[ax <= lo + tol] = LOWER_
    act[eq] = EQUALITY
    return act


def _lsq(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minimum-norm least-squares solution (copes with rank deficiency)."""
    if A.shape[1] == 0:
        return np.zeros(0)
    if A.shape[0] == 0:
        return np.zeros(A.shape[1])
    return np.linalg.lstsq(A, b, rcond=None)[0]


def _independent(rows: np.ndarray, order: Sequence[int], tol: float) -> list[int]:
    """Greedy subset of ``order`` whose rows are linearly independent (Gram-Schmidt)."""
    basis: list[np.ndarray] = []
    keep: list[int] = []
    for i in order:
        r = rows[i].astype(float).copy()
        nr0 = np.linalg.norm(r)
        if nr0 == 0.0:
            continue
        for q in basis:
            r -= (q @ r) * q
        nr = np.linalg.norm(r)
        if nr > tol * nr0 * 1e3:
            basis.append(r / nr)
            keep.append(i)
    return keep


def _active_set_lsqp(
    M: np.ndarray,
    m: np.ndarray,
    G: np.ndarray,
    g: np.ndarray,
    y: np.ndarray,
    work: list[int],
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, list[int], int]:
    """Primal active set for ``min ½||M y - m||² s.t. G y <= g`` from a feasible ``y``.

    ``work`` is the initial working set (rows tight at ``y`` and linearly independent). The step
    is the minimum-norm least-squares step in the nullspace of the working rows, so singular
    ``MᵀM`` (rank-deficient tasks) is handled without regularization.
    """
    nv = M.shape[1]
    W = list(work)
    scale = 1.0 + float(np.linalg.norm(m))
    for it in range(1, max_iter + 1):
        N = _null(G[W], 1e-12) if W else np.eye(nv)
        r = m - M @ y
        p = N @ _lsq(M @ N, r) if N.shape[1] else np.zeros(nv)
        if np.linalg.norm(p) <= tol * (1.0 + np.linalg.norm(y)):
            if not W:
                return y, W, it
            grad = M.T @ (M @ y - m)
            mu = _lsq(G[W].T, -grad)
            j = int(np.argmin(mu))
            if mu[j] >= -tol * scale:
                return y, W, it
            W.pop(j)
            continue
        gp = G @ p
        room = np.maximum(g - G @ y, 0.0)
        alpha, block = 1.0, -1
        cand = np.flatnonzero(gp > 1e-14 * (1.0 + np.abs(G).sum(axis=1)) * np.linalg.norm(p))
        in_w = set(W)
        for i in cand:
            if i in in_w:
                continue
            a = room[i] / gp[i]
            if a < alpha:
                alpha, block = a, int(i)
        y = y + alpha * p
        if block >= 0:
            W.append(block)
    raise RuntimeError(f"HLSP active set did not converge in {max_iter} iterations")


class HLSPSolver:
    """Reusable HLSP solver keeping the last active set for warm starts.

    Parameters
    ----------
    backend:
        ``"daqp"`` (compiled dual active set, prioritized mode) or ``"numpy"`` (reference).
    tol:
        Activity / rank tolerance. A slack above ``tol`` (relative to the row scale) fixes a row
        as an equality for the lower levels.
    multipliers:
        Compute the per-level multipliers ``λ_{j,l}`` (skip it when only ``x`` is needed).
    rho_soft:
        DAQP soft-constraint weight; the slack of a level is exact up to about
        ``rho_soft · ||x||``.
    polish:
        (daqp) always re-solve with the numpy cascade warm-started from DAQP's active set; exact
        to round-off, slower.
    verify:
        (daqp) check the KKT conditions of every level subproblem (stationarity and multiplier
        signs) on DAQP's point and polish only when they fail or DAQP reports a failure. DAQP's
        prioritized mode is accurate to about 1e-10 on most problems but occasionally leaves a
        level off by up to 1e-6 (degenerate rows), which this check catches.
    verify_tol:
        Stationarity / sign tolerance of that check, relative to the problem scale.
    warm_start:
        Start from the previous call's active set when the row layout is unchanged.
    """

    def __init__(
        self,
        backend: str = "daqp",
        *,
        tol: float = 1e-9,
        multipliers: bool = True,
        rho_soft: float = 3e-8,
        polish: bool = False,
        verify: bool = True,
        verify_tol: float = 1e-9,
        warm_start: bool = True,
        max_iter: int = 500,
    ) -> None:
        if backend not in ("daqp", "numpy"):
            raise ValueError(f"unknown HLSP backend {backend!r}; use 'daqp' or 'numpy'")
        if backend == "daqp":
            import daqp  # noqa: F401  (fail early when the compiled solver is missing)
        self.backend = backend
        self.tol = float(tol)
        self.multipliers = bool(multipliers)
        self.rho_soft = float(rho_soft)
        self.polish = bool(polish)
        self.verify = bool(verify)
        self.verify_tol = float(verify_tol)
        self.warm_start = bool(warm_start)
        self.max_iter = int(max_iter)
        self._last_active: list[np.ndarray] | None = None
        self._last_layout: tuple[int, ...] | None = None

    def reset(self) -> None:
        """Forget the warm-start active set."""
        self._last_active = None
        self._last_layout = None

    def solve(
        self,
        levels: Sequence[LevelLike],
        *,
        active: list[np.ndarray] | None = None,
    ) -> HLSPResult:
        """Solve the HLSP; ``active`` overrides the stored warm-start active set."""
        levs, n = _as_levels(levels, None)
        layout = (n, *(lv.A.shape[0] for lv in levs))
        hint = active
        if hint is None and self.warm_start and self._last_layout == layout:
            hint = self._last_active
        if hint is not None and [len(h) for h in hint] != list(layout[1:]):
            raise ValueError("warm-start active set does not match the level sizes")
        if self.backend == "numpy":
            res = _solve_numpy(levs, n, self.tol, self.max_iter, hint)
        else:
            res = _solve_daqp(levs, n, self.tol, self.rho_soft, hint)
            polish = self.polish or res.status != "optimal"
            if not polish and self.verify:
                res.multipliers = level_multipliers(levs, res.x, res.active, self.tol)
                polish = not kkt_ok(levs, res, self.verify_tol)
            if polish:
                res = self._polish(levs, n, res, hint)
        return self._finish(levs, res, layout)

    def _polish(
        self, levs: list[Level], n: int, res: HLSPResult, hint: list[np.ndarray] | None
    ) -> HLSPResult:
        """Re-solve with the numpy cascade, warm-started from DAQP's active set."""
        hint_d = res.active if res.status == "optimal" else hint
        pol = _solve_numpy(levs, n, self.tol, self.max_iter, hint_d)
        pol.backend = "daqp+polish"
        pol.iterations += res.iterations
        pol.info = {**res.info, "polished": True}
        return pol

    def _finish(self, levs: list[Level], res: HLSPResult, layout: tuple[int, ...]) -> HLSPResult:
        """Multipliers if still missing, and the warm-start record."""
        if self.multipliers and res.multipliers is None:
            res.multipliers = level_multipliers(levs, res.x, res.active, self.tol)
        if self.warm_start:
            self._last_active = [a.copy() for a in res.active]
            self._last_layout = layout
        return res


def solve_hlsp(
    levels: Sequence[LevelLike],
    backend: str = "daqp",
    *,
    multipliers: bool = True,
    tol: float = 1e-9,
    polish: bool = False,
) -> HLSPResult:
    """Solve one HLSP without warm start (see :class:`HLSPSolver`)."""
    solver = HLSPSolver(backend, tol=tol, multipliers=multipliers, polish=polish, warm_start=False)
    return solver.solve(levels)


# ------------------------------------------------------------------------------------------------
# numpy reference: nullspace cascade + primal active set per level
# ------------------------------------------------------------------------------------------------


def _row_tol(A: np.ndarray, lo: np.ndarray, up: np.ndarray, tol: float) -> np.ndarray:
    """Absolute activity tolerance per row, relative to the row's scale."""
    b = np.where(np.isfinite(up), np.abs(up), 0.0) + np.where(np.isfinite(lo), np.abs(lo), 0.0)
    return tol * (1.0 + np.linalg.norm(A, axis=1) + b)


def _solve_numpy(
    levs: list[Level],
    n: int,
    tol: float,
    max_iter: int,
    hint: list[np.ndarray] | None,
    x0: np.ndarray | None = None,
) -> HLSPResult:
    """Reference cascade: one least-squares problem per level in the nullspace of the fixed rows
    above, primal active set for its inequalities (``docs/hnewton.md`` M7)."""
    x = np.zeros(n) if x0 is None else np.asarray(x0, dtype=float).copy()
    Z = np.eye(n)
    C = np.zeros((0, n))  # hard one-sided rows C x <= d inherited from above
    d = np.zeros(0)
    C_src: list[tuple[int, int, int]] = []  # (level, row, sign) of every hard row
    iters = 0
    for li, lev in enumerate(levs):
        A, lo, up = lev.A, lev.lower, lev.upper
        rt = _row_tol(A, lo, up, tol)
        eq = (up - lo) <= rt * 1e-3
        ie = np.flatnonzero(eq)
        # one-sided soft inequality rows g x <= h
        src_up = np.flatnonzero(~eq & np.isfinite(up))
        src_lo = np.flatnonzero(~eq & np.isfinite(lo))
        Gs = np.vstack([A[src_up], -A[src_lo]])
        hs = np.concatenate([up[src_up], -lo[src_lo]])
        src = np.concatenate([src_up, src_lo])
        sign = np.concatenate([np.ones(src_up.size), -np.ones(src_lo.size)])
        ms = Gs.shape[0]
        r = Z.shape[1]
        if r > 0:
            # unknowns y = (z, w_s)
            E = A[ie]
            be = 0.5 * (lo[ie] + up[ie])
            M = np.zeros((ie.size + ms, r + ms))
            M[: ie.size, :r] = E @ Z
            M[ie.size :, r:] = np.eye(ms)
            mvec = np.concatenate([be - E @ x, np.zeros(ms)])
            G = np.zeros((ms + C.shape[0], r + ms))
            G[:ms, :r] = Gs @ Z
            G[:ms, r:] = -np.eye(ms)
            G[ms:, :r] = C @ Z
            g = np.concatenate([hs - Gs @ x, d - C @ x])
            y = np.concatenate([np.zeros(r), np.maximum(0.0, Gs @ x - hs)])
            work: list[int] = []
            if hint is not None:
                h = hint[li]

                codes = h[src]
                soft_on = ((sign > 0) & (codes == UPPER)) | ((sign < 0) & (codes == LOWER_))

                h_hard = [
                    (hint[lv][row] == UPPER and sg > 0) or (hint[lv][row] == LOWER_ and sg < 0)
                    for lv, row, sg in C_src
                ]
                want = [
                    k
                    for k in range(ms)
                    if (sign[k] > 0 and h[src[k]] == UPPER) or (sign[k] < 0 and h[src[k]] == LOWER_)
                ]
                gap = g - G @ y
                tight = gap <= 1e-12 * (1.0 + np.abs(g))
                want = [k for k in want if tight[k]]
                hard_tight = [ms + k for k in range(C.shape[0]) if tight[ms + k]]
                work = _independent(G, want + hard_tight, 1e-12)
                # guessed active set: rows the previous solution had active, taken as equalities
                guess = [int(k) for k in np.flatnonzero(soft_on)] + [
                    ms + k for k in range(C.shape[0]) if h_hard[k]
                ]
                guess = _independent(G, guess, 1e-12)
                if guess:
                    yg = _lsq(G[guess], g[guess])
                    Ng = _null(G[guess], 1e-12)
                    if Ng.shape[1]:
                        yg = yg + Ng @ _lsq(M @ Ng, mvec - M @ yg)
                    if np.all(G @ yg <= g + 1e-10 * (1.0 + np.abs(g))):
                        y, work = yg, guess
            y, _, it = _active_set_lsqp(M, mvec, G, g, y, work, tol, max_iter)
            iters += it
            x = x + Z @ y[:r]
        if li == len(levs) - 1:
            break
        ax = A @ x
        w = _signed_slack(ax, lo, up)
        w[ie] = ax[ie] - 0.5 * (lo[ie] + up[ie])
        # fix this level for the ones below
        viol = np.abs(w) > rt
        fixed = np.flatnonzero(eq | viol)
        if fixed.size and Z.shape[1]:
            Z = Z @ _null(A[fixed] @ Z, 1e-10)
        hard_up = np.flatnonzero(~eq & ~viol & np.isfinite(up))
        hard_lo = np.flatnonzero(~eq & ~viol & np.isfinite(lo))
        C_src += [(li, int(i), 1) for i in hard_up] + [(li, int(i), -1) for i in hard_lo]
        C = np.vstack([C, A[hard_up], -A[hard_lo]])
        d = np.concatenate([d, up[hard_up], -lo[hard_lo]])
    slacks, actives = _slacks_and_activity(levs, x, tol)
    return HLSPResult(x, slacks, None, actives, iters, "numpy")


def _slacks_and_activity(
    levs: list[Level], x: np.ndarray, tol: float, act_scale: float = 1.0
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Signed slacks and activity codes of every level at the final point ``x``."""
    slacks, actives = [], []
    for lev in levs:
        ax = lev.A @ x
        rt = _row_tol(lev.A, lev.lower, lev.upper, tol)
        eq = (lev.upper - lev.lower) <= rt * 1e-3
        w = _signed_slack(ax, lev.lower, lev.upper)
        w[eq] = ax[eq] - 0.5 * (lev.lower[eq] + lev.upper[eq])
        slacks.append(w)
        actives.append(_activity(ax, lev.lower, lev.upper, eq, rt * act_scale))
    return slacks, actives


# ------------------------------------------------------------------------------------------------
# multipliers λ_{j,l} from stationarity
# ------------------------------------------------------------------------------------------------


def level_multipliers(
    levs: Sequence[LevelLike], x: np.ndarray, active: list[np.ndarray], tol: float = 1e-9
) -> list[list[np.ndarray]]:
    """Per-level multipliers from stationarity, ``sum_{j<l} A_j^T λ_{j,l} = -A_l^T w_l``.

    The active rows of the higher levels (equalities, violated rows, and saturated inequality
    rows) enter with free sign; the minimum-norm solution is returned. ``λ_{l,l} = w_l``.
    """
    levels, _ = _as_levels(levs, x.shape[0])
    out: list[list[np.ndarray]] = []
    sign_req: list[np.ndarray] = []  # +1: λ >= 0 required, -1: λ <= 0, 0: free
    for li, lev in enumerate(levels):
        ax = lev.A @ x
        w = _signed_slack(ax, lev.lower, lev.upper)
        eq = active[li] == EQUALITY
        w[eq] = ax[eq] - lev.upper[eq]
        rhs = -lev.A.T @ w
        rows, index = [], []
        for j in range(li):
            idx = np.flatnonzero(active[j] != INACTIVE)
            rows.append(levels[j].A[idx])
            index.append(idx)
        lam_level = [np.zeros(levels[j].A.shape[0]) for j in range(li)]
        if rows and sum(r.shape[0] for r in rows):
            B = np.vstack(rows)
            lam = _lsq(B.T, rhs)
            sgn = np.concatenate([sign_req[j][idx] for j, idx in enumerate(index)])
            if np.any(sgn * lam < -tol * (1.0 + np.abs(lam).max())):
                # degenerate active set: pick multipliers with the right signs
                sel = np.flatnonzero(sgn != 0)
                G = np.zeros((sel.size, lam.size))
                G[np.arange(sel.size), sel] = -sgn[sel]
                lam, _, _ = _active_set_lsqp(
                    B.T, rhs, G, np.zeros(sel.size), np.zeros(lam.size), [], tol, 200
                )
            k = 0
            for j, idx in enumerate(index):
                lam_level[j][idx] = lam[k : k + idx.size]
                k += idx.size
        lam_level.append(w)
        out.append(lam_level)
        free = (active[li] == EQUALITY) | (np.abs(w) > _row_tol(lev.A, lev.lower, lev.upper, tol))
        sign_req.append(
            np.where(
                free, 0, np.where(active[li] == UPPER, 1, np.where(active[li] == LOWER_, -1, 0))
            )
        )
    return out


def kkt_ok(levs: Sequence[LevelLike], res: HLSPResult, tol: float) -> bool:
    """Whether ``res`` satisfies stationarity and the multiplier signs of every level subproblem.

    A saturated (not violated) inequality row of a higher level must push the right way:
    ``λ >= 0`` at its upper bound, ``λ <= 0`` at its lower bound.
    """
    levels, _ = _as_levels(levs, res.x.shape[0])
    if res.multipliers is None:
        return False
    scale = 1.0 + max(float(np.abs(lv.A).max(initial=0.0)) for lv in levels)
    scale *= 1.0 + max(float(np.abs(w).max(initial=0.0)) for w in res.slacks)
    if stationarity_residual(levels, res.multipliers).max(initial=0.0) > tol * scale:
        return False
    for lam in res.multipliers:
        for j in range(len(lam) - 1):
            free = np.abs(res.slacks[j]) > _row_tol(
                levels[j].A, levels[j].lower, levels[j].upper, 1e-9
            )
            act = res.active[j]
            bad_up = (act == UPPER) & ~free & (lam[j] < -tol * scale)
            bad_lo = (act == LOWER_) & ~free & (lam[j] > tol * scale)
            if bad_up.any() or bad_lo.any():
                return False
    return True


def stationarity_residual(levs: Sequence[LevelLike], mult: list[list[np.ndarray]]) -> np.ndarray:
    """``||sum_{j<=l} A_j^T λ_{j,l}||`` for every level (0 at a KKT point)."""
    levels, _ = _as_levels(levs, None)
    return np.array(
        [
            float(np.linalg.norm(sum(levels[j].A.T @ lam[j] for j in range(len(lam)))))
            for lam in mult
        ]
    )


# ------------------------------------------------------------------------------------------------
# DAQP backend
# ------------------------------------------------------------------------------------------------


def _needs_slack(A: np.ndarray) -> np.ndarray:
    """Rows that get an explicit slack variable in the DAQP formulation.

    Only a coordinate row ``±e_k`` whose coordinate no other coordinate row touches (a plain box)
    is passed as is: DAQP's row normalization leaves it unchanged and it cannot make the working
    set singular. Every other row is slacked, so the hard rows ``a_i x - v_i`` are always
    linearly independent (parallel or rank-deficient task rows stay well posed).
    """
    nnz = np.count_nonzero(A, axis=1)
    unit = (nnz == 1) & np.isclose(np.abs(A).sum(axis=1), 1.0, rtol=0.0, atol=1e-15)
    need = ~unit
    if unit.any():
        cols = np.argmax(np.abs(A[unit]), axis=1)
        counts = np.bincount(cols, minlength=A.shape[1])
        dup = counts[cols] > 1
        idx = np.flatnonzero(unit)
        need[idx[dup]] = True
    return need


def _solve_daqp(
    levs: list[Level],
    n: int,
    tol: float,
    rho_soft: float,
    hint: list[np.ndarray] | None,
) -> HLSPResult:
    """Prioritized DAQP solve in the slack formulation (see module docstring)."""
    import daqp

    sizes = [lv.A.shape[0] for lv in levs]
    A_all = np.vstack([lv.A for lv in levs]) if len(levs) > 1 else levs[0].A
    lo_all = np.concatenate([lv.lower for lv in levs])
    up_all = np.concatenate([lv.upper for lv in levs])
    m = A_all.shape[0]
    need = _needs_slack(A_all)
    sl = np.flatnonzero(need)
    ns = sl.size
    nz = n + ns
    # rows: [hard slack rows (ns)] + [all m rows, level by level]
    Abig = np.zeros((ns + m, nz))
    Abig[:ns, :n] = A_all[sl]
    Abig[np.arange(ns), n + np.arange(ns)] = -1.0
    direct = np.flatnonzero(~need)
    Abig[ns + direct, :n] = A_all[direct]
    Abig[ns + sl, n + np.arange(ns)] = 1.0
    bu = np.empty(ns + m)
    bl = np.empty(ns + m)
    bu[:ns], bl[:ns] = up_all[sl], lo_all[sl]
    bu[ns:], bl[ns:] = up_all, lo_all
    bu[ns + sl] = 0.0
    bl[ns + sl] = 0.0
    np.clip(bu, -_INF, _INF, out=bu)
    np.clip(bl, -_INF, _INF, out=bl)
    sense = np.zeros(ns + m, dtype=c_int)
    sense[ns:][bu[ns:] - bl[ns:] <= 0.0] = _IMMUTABLE | _ACTIVE
    if hint is not None:
        h = np.concatenate(hint)
        on = (h == UPPER) | (h == LOWER_)
        sense[ns:][on] |= _ACTIVE
        sense[ns:][h == LOWER_] |= _LOWER
    bp = np.cumsum([ns, *sizes]).astype(c_int)
    if ns == 0:
        bp = bp[1:]
    z, _, exitflag, info = daqp.solve(
        None,
        None,
        Abig,
        bu,
        bl,
        sense,
        break_points=bp,
        rho_soft=rho_soft,
        primal_tol=1e-10,
    )
    x = np.asarray(z[:n], dtype=float)
    status = "optimal" if exitflag in (1, 2) else f"daqp exitflag {exitflag}"
    slacks, actives = _slacks_and_activity(levs, x, tol, act_scale=1e2)
    return HLSPResult(
        x,
        slacks,
        None,
        actives,
        int(info.get("iterations", 0)),
        "daqp",
        status,
        {"exitflag": int(exitflag)},
    )
