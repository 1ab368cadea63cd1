"""Exact HLSP for a hard box level on top of small equality levels (few variables).

The quadrotor controller solves two such problems every control step (:mod:`.quad`): the
thrust-vector Newton step (3 variables: trust region ∩ thrust/tilt box ≻ vertical ≻ horizontal)
and the rotor allocation (4 rotor thrusts: rotor bounds ≻ roll/pitch ≻ collective ≻ yaw). The
generic :class:`~.hlsp.HLSPSolver` spends ~0.4–1.3 ms per call in Python bookkeeping; this module
solves the same lexicographic problem::

    lexmin_x ( ||A_1 x - b_1||², ..., ||A_p x - b_p||² )   s.t.   lower <= x <= upper   (hard)

exactly, in a few µs when no bound is active, by enumerating faces of the box:

* for a face ``P`` (a set of variables fixed at one of their bounds) the equality cascade over the
  free variables (minimum-norm least squares in the nullspace of the levels above, as in the
  numpy reference) gives a candidate ``x_P``;
* the lexicographic optimum ``x*`` lies in the relative interior of some face ``P*``, where it is a
  local, hence (convexity) global, optimum of every level over the face's affine hull, so
  ``x_{P*} = x*`` whenever the cascade's final point is unique; conversely every feasible
  candidate is lexicographically no better than ``x*``;
* a candidate is accepted at once when it is feasible and satisfies every level's KKT conditions
  (stationarity with the box multipliers of the right sign -- sufficient, the levels are convex);
  the previous call's face and the face of the violated bounds are tried first, and only when
  both fail are all ``3^n`` faces enumerated and the lexicographically smallest feasible candidate
  kept (exact, slower; rare in closed loop).

When the task rows stack to a square non-singular matrix and the exact solution lies inside the
box (the common case in flight), the answer is one ``np.linalg.solve``.

Multipliers follow :mod:`~.hlsp`'s layout: ``multipliers[l][j]`` for ``j <= l`` with level 0
the box (one value per variable, 0 when free) and ``λ_{l,l} = w_l``; the higher-level rows enter
stationarity ``Σ_{j<=l} A_jᵀ λ_{j,l} = 0`` with free sign, the active box rows with ``λ >= 0`` at
the upper and ``λ <= 0`` at the lower bound, minimum-norm solution.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .hlsp import Level, _active_set_lsqp

__all__ = ["BatchedBoxHLSP", "BoxHLSP", "BoxHLSPResult", "box_levels"]

# face codes per variable
FREE, AT_UPPER, AT_LOWER, FIXED = 0, 1, -1, 2


@dataclass
class BoxHLSPResult:
    """Solution of a box-topped equality HLSP.

    ``slacks[l]`` is ``A_l x - b_l`` of task level ``l`` (0-based, box excluded); ``face`` codes
    every variable (0 free, 1 at upper, -1 at lower, 2 fixed because ``lower == upper``);
    ``multipliers`` as in the module docstring (``None`` unless requested); ``candidates`` counts
    the faces evaluated and ``enumerated`` tells whether the exhaustive fallback ran.
    """

    x: np.ndarray
    slacks: list[np.ndarray]
    face: np.ndarray
    multipliers: list[list[np.ndarray]] | None
    candidates: int
    enumerated: bool

    def slack_norms(self) -> np.ndarray:
        """``||w_l||`` for every task level."""
        return np.array([float(np.sqrt(w @ w)) for w in self.slacks])


def box_levels(
    lower: np.ndarray, upper: np.ndarray, levels: Sequence[tuple[np.ndarray, np.ndarray]]
) -> list[Level]:
    """The same problem as generic :class:`~.hlsp.Level` objects (for cross-checking with
    :func:`~.hlsp.solve_hlsp`)."""
    n = len(lower)
    return [Level.box(n, lower, upper)] + [Level.eq(A, b) for A, b in levels]


class BoxHLSP:
    """Reusable exact solver for ``n`` variables (``n <= 6``; enumeration is ``3^n`` faces).

    Parameters
    ----------
    n:
        Number of variables.
    tol:
        Feasibility, rank and KKT-sign tolerance (relative to the problem scale).
    multipliers:
        Return the per-level multipliers (needed by the Newton/BFGS variants).
    """

    def __init__(self, n: int, *, tol: float = 1e-9, multipliers: bool = True) -> None:
        if not 1 <= n <= 6:
            raise ValueError(f"BoxHLSP is meant for 1..6 variables, got n = {n}")
        self.n = int(n)
        self.tol = float(tol)
        self.multipliers = bool(multipliers)
        self._eye = np.eye(self.n)
        self._faces = [np.array(f) for f in itertools.product((0, 1, -1), repeat=self.n)]
        self._free = np.zeros(self.n, dtype=int)
        self.reset()

    def reset(self) -> None:
        """Forget the warm-start face."""
        self._last_face: np.ndarray | None = None

    def load_face(self, face: np.ndarray) -> None:
        """Start the next :meth:`solve` from the warm face ``face`` (n,) of an explicit state
        (codes as :attr:`BoxHLSPResult.face`; all free is no warm start)."""
        self._last_face = face

    def store_face(self, face: np.ndarray) -> None:
        """Write the face the last :meth:`solve` ended on into ``face`` (n,), in place
        (unchanged when no solve ran since :meth:`load_face`)."""
        if self._last_face is not None:
            face[...] = self._last_face

    # -------------------------------------------------------------------------------- public
    def solve(
        self,
        lower: np.ndarray,
        upper: np.ndarray,
        levels: Sequence[tuple[np.ndarray, np.ndarray]],
        *,
        inverse: np.ndarray | None = None,
    ) -> BoxHLSPResult:
        """Lexicographic optimum of ``levels`` (``(A_l, b_l)`` pairs, highest first) in the box.

        ``inverse`` may hold the inverse of the stacked task matrix when the caller knows it is
        square and non-singular (a constant allocation matrix, a cofactor inverse); it only
        speeds up the first candidate.
        """
        lo = np.asarray(lower, dtype=float)
        up = np.asarray(upper, dtype=float)
        if lo.shape != (self.n,) or up.shape != (self.n,):
            raise ValueError(f"bounds must have shape ({self.n},)")
        lo_l, up_l = lo.tolist(), up.tolist()
        if any(a > b for a, b in zip(lo_l, up_l, strict=True)):
            raise ValueError("lower > upper in the box")
        levs = [(A if A.ndim == 2 else np.atleast_2d(A), b) for A, b in levels]
        ftol = self.tol * (1.0 + max(max(map(abs, lo_l)), max(map(abs, up_l))))
        pinned_l = [b - a <= ftol for a, b in zip(lo_l, up_l, strict=True)]
        any_pinned = any(pinned_l)
        tried = 0

        # 1. square stack: the exact solution, if it lies in the box
        x0 = None
        if not any_pinned:
            if inverse is not None:
                b = np.concatenate([b for _, b in levs]) if len(levs) > 1 else levs[0][1]
                x0 = inverse @ b
            else:
                x0 = _square_solution(levs, self.n)
            if x0 is not None:
                xl = x0.tolist()
                if all(a - ftol <= v <= c + ftol for a, v, c in zip(lo_l, xl, up_l, strict=True)):
                    tried += 1
                    return self._finish(np.clip(x0, lo, up), self._free, levs, tried, False)
        pinned = np.array(pinned_l)

        # 2. primal active-set walk from the warm face (or the free face): fix the bounds a
        #    candidate violates, release a bound whose multiplier has the wrong sign; every
        #    accepted point satisfies all levels' KKT conditions, hence is the optimum
        start = self._last_face if self._last_face is not None else np.zeros(self.n, dtype=int)
        if x0 is not None and not np.any(start):  # the free face's point is x0 (infeasible)
            start = _violated(x0, lo, up, ftol)
        face = np.where(pinned, FIXED, start)
        seen: set[tuple[int, ...]] = set()
        for _ in range(2 * self.n + 2):
            key = tuple(int(v) for v in face)
            if key in seen:
                break
            seen.add(key)
            x, ok = self._candidate(face, lo, up, levs, ftol)
            tried += 1
            if not ok:
                face = np.where(face == FREE, _violated(x, lo, up, ftol), face)
                continue
            mult, bad = self._kkt(x, face, levs)
            if mult is not None:
                return self._finish(x, face, levs, tried, False, mult)
            if bad < 0:
                break
            face = face.copy()
            face[bad] = FREE

        # 3. exhaustive: the lexicographically smallest feasible candidate
        best_x, best_face, best_key = None, None, None
        for f in self._faces:
            face = np.where(pinned, FIXED, f)
            if np.any(pinned & (f != 0)):
                continue
            x, ok = self._candidate(face, lo, up, levs, ftol)
            tried += 1
            if not ok:
                continue
            key = [float(np.sqrt(w @ w)) for w in _slacks(levs, x)]
            if best_key is None or _lex_less(key, best_key, self.tol * (1.0 + max(best_key))):
                best_x, best_face, best_key = x, face, key
        if best_x is None:  # cannot happen for a non-empty box; keep the clipped free solution
            best_x, best_face = np.clip(x0 if x0 is not None else lo, lo, up), np.zeros(self.n)
        return self._finish(best_x, np.asarray(best_face, dtype=int), levs, tried, True)

    # -------------------------------------------------------------------------------- internals
    def _candidate(
        self,
        face: np.ndarray,
        lo: np.ndarray,
        up: np.ndarray,
        levs: list[tuple[np.ndarray, np.ndarray]],
        ftol: float,
    ) -> tuple[np.ndarray, bool]:
        """Cascade on the face's affine hull; returns the point and whether it is in the box."""
        x = np.where(face == AT_UPPER, up, np.where(face != FREE, lo, 0.0))
        free = np.flatnonzero(face == FREE)
        # shortcut: the leading whole levels form a non-singular square system on the free
        # variables -> every one of them is met exactly and nothing is left for the rest
        nf, acc = free.size, 0
        for li, (A, _) in enumerate(levs):
            acc += A.shape[0]
            if acc >= nf:
                if acc == nf and nf:
                    M = np.vstack([a[:, free] for a, _ in levs[: li + 1]])
                    r = np.concatenate([b - a @ x for a, b in levs[: li + 1]])
                    try:
                        y = np.linalg.solve(M, r)
                    except np.linalg.LinAlgError:
                        break
                    if _amax(M @ y - r) <= 1e-10 * (1.0 + _amax(r)):
                        x[free] += y
                        ok = bool(np.all(x >= lo - ftol) and np.all(x <= up + ftol))
                        return x, ok
                break
        Z = np.eye(free.size)
        for A, b in levs:
            if Z.shape[1] == 0:
                break
            M = A[:, free] @ Z
            r = b - A @ x
            U, s, Vt = np.linalg.svd(M, full_matrices=True)
            k = int(np.sum(s > 1e-12 * max(1.0, s[0]))) if s.size else 0
            if k:
                y = Vt[:k].T @ ((U[:, :k].T @ r) / s[:k])
                x[free] += Z @ y
            Z = Z @ Vt[k:].T
        ok = bool(np.all(x >= lo - ftol) and np.all(x <= up + ftol))
        return x, ok

    def _kkt(
        self,
        x: np.ndarray,
        face: np.ndarray,
        levs: list[tuple[np.ndarray, np.ndarray]],
    ) -> tuple[list[list[np.ndarray]] | None, int]:
        """``(multipliers, -1)`` when every level's KKT conditions hold at ``x`` on ``face``;
        otherwise ``(None, k)`` with ``k`` the bound whose multiplier has the worst sign (or -1
        when stationarity itself fails)."""
        n = self.n
        fixed = np.flatnonzero(face != FREE)
        box_rows = self._eye[fixed]
        mult: list[list[np.ndarray]] = [[np.zeros(n)]]
        rows: list[np.ndarray] = [box_rows]
        sizes = [fixed.size]
        sgn = np.where(face == AT_UPPER, 1.0, np.where(face == AT_LOWER, -1.0, 0.0))
        tiny = 1e-12 * (1.0 + _amax(x))
        for A, b in levs:
            w = A @ x - b
            rhs = -(A.T @ w)
            B = np.vstack(rows)
            if B.shape[0] and _amax(w) > tiny * (1.0 + _amax(b)):
                lam = _small_lstsq(B.T, rhs)
                resid = B.T @ lam - rhs
                if _amax(resid) > 1e-7 * (1.0 + _amax(rhs)):
                    return None, -1
            else:
                if B.shape[0] == 0 and _amax(rhs) > 1e-7 * (1.0 + _amax(b)):
                    return None, -1
                lam = np.zeros(B.shape[0])
            box = np.zeros(n)
            box[fixed] = lam[: fixed.size]
            sig = 1e-7 * (1.0 + _amax(lam))
            signed = sgn * box  # must be >= 0 on every active bound
            k = int(np.argmin(signed))
            if signed[k] < -sig:
                # degenerate rows: look for multipliers with the right signs (as hlsp does)
                lam = _signed_multipliers(B, rhs, sgn[fixed])
                if lam is None:
                    return None, k
                box = np.zeros(n)
                box[fixed] = lam[: fixed.size]
            mult.append(_level_row(box, lam, fixed.size, sizes, w))
            rows.append(A)
            sizes.append(A.shape[0])
        return mult, -1

    def _finish(
        self,
        x: np.ndarray,
        face: np.ndarray,
        levs: list[tuple[np.ndarray, np.ndarray]],
        tried: int,
        enumerated: bool,
        mult: list[list[np.ndarray]] | None = None,
    ) -> BoxHLSPResult:
        slacks = _slacks(levs, x)
        self._last_face = face
        if self.multipliers and mult is None:
            tiny = 1e-12 * (1.0 + _amax(x))
            if all(_amax(w) <= tiny for w in slacks):
                mult = [[np.zeros(self.n)]]
                for li in range(len(levs)):
                    row = [np.zeros(self.n)] + [np.zeros(levs[j][0].shape[0]) for j in range(li)]
                    row.append(slacks[li])
                    mult.append(row)
            else:
                mult = self._kkt(x, face, levs)[0] or _min_norm_multipliers(
                    x, face, levs, self._eye
                )
        return BoxHLSPResult(x, slacks, face, mult if self.multipliers else None, tried, enumerated)


class BatchedBoxHLSP:
    """:class:`BoxHLSP`'s first candidate for N problems of one layout (one per env) at once.

    Its batch algorithm differs from the single solver's: :meth:`square` is the single solver's
    first candidate for every row at once (the stacked task matrix is square with a known
    inverse and its exact solution lies in the box -- the common case in flight); a caller takes
    its rows and solves the others one by one with the single solver from that row's warm face
    (:meth:`BoxHLSP.load_face`), so every row gets the single solver's answer (bit for bit: the
    same operations on the same numbers). The warm faces are the caller's state (a row that
    took :meth:`square`'s point ends on the free face).

    Args:
        single: the single solver (its settings; it solves the rows :meth:`square` leaves).
    """

    def __init__(self, single: BoxHLSP):
        self.single = single

    def square(
        self,
        lower: np.ndarray,
        upper: np.ndarray,
        levels: Sequence[tuple[np.ndarray, np.ndarray]],
        inverse: np.ndarray,
        usable: np.ndarray | bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        """The exact solution ``inverse @ b`` of every row, clipped to the box, the levels'
        slacks ``A_l x − b_l`` (N, m_l) and the rows ``done`` (N,) where the single solver returns
        this point at its first candidate: ``usable`` inverse, no pinned variable, the point in
        the box and, when multipliers are asked for, slacks at round-off (the multipliers then
        are the slacks themselves). Bounds (N, n), ``levels`` ``(A (N, m_l, n), b (N, m_l))``,
        ``inverse`` (N, n, n)."""
        tol = self.single.tol
        ftol = (tol * (1.0 + np.maximum(np.abs(lower).max(axis=1), np.abs(upper).max(axis=1))))[
            :, None
        ]
        b = np.concatenate([b for _, b in levels], axis=1)
        x0 = np.matmul(inverse, b[:, :, None])[:, :, 0]
        done = usable & ~(upper - lower <= ftol).any(axis=1)
        done &= ((lower - ftol <= x0) & (x0 <= upper + ftol)).all(axis=1)
        x = np.clip(x0, lower, upper)
        slacks = [np.matmul(A, x[:, :, None])[:, :, 0] - b for A, b in levels]
        if self.single.multipliers:
            tiny = 1e-12 * (1.0 + np.abs(x).max(axis=1))
            for w in slacks:
                done &= np.abs(w).max(axis=1) <= tiny
        return x, slacks, done


def _square_solution(levs: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray | None:
    """Exact solution of the stacked levels when they form a non-singular ``n × n`` system."""
    if sum(A.shape[0] for A, _ in levs) != n:
        return None
    A = np.vstack([A for A, _ in levs]) if len(levs) > 1 else levs[0][0]
    b = np.concatenate([b for _, b in levs]) if len(levs) > 1 else levs[0][1]
    try:
        x = np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        return None
    # reject an ill-conditioned solve: the residual must be at round-off level
    if not np.all(np.isfinite(x)) or _amax(A @ x - b) > 1e-9 * (1.0 + _amax(b)):
        return None
    return x


def _amax(a: np.ndarray) -> float:
    """``max |a_i|`` (0 for an empty array); plain Python is faster than numpy at these sizes."""
    return max(map(abs, a.ravel().tolist()), default=0.0)


def _small_lstsq(M: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Minimum-norm least squares; one LU solve when ``M`` is square and well conditioned."""
    if M.shape[0] == M.shape[1]:
        try:
            y = np.linalg.solve(M, r)
            if _amax(M @ y - r) <= 1e-10 * (1.0 + _amax(r)):
                return y
        except np.linalg.LinAlgError:
            pass
    return np.linalg.lstsq(M, r, rcond=None)[0]


def _signed_multipliers(B: np.ndarray, rhs: np.ndarray, sgn_box: np.ndarray) -> np.ndarray | None:
    """Solution of ``Bᵀλ = rhs`` with ``sgn·λ >= 0`` on the leading box rows, or ``None``."""
    nb = sgn_box.size
    sel = np.flatnonzero(sgn_box != 0)
    G = np.zeros((sel.size, B.shape[0]))
    G[np.arange(sel.size), sel] = -sgn_box[sel]
    try:
        lam, _, _ = _active_set_lsqp(
            B.T, rhs, G, np.zeros(sel.size), np.zeros(B.shape[0]), [], 1e-12, 200
        )
    except RuntimeError:
        return None
    if _amax(B.T @ lam - rhs) > 1e-7 * (1.0 + _amax(rhs)):
        return None
    if np.any(sgn_box * lam[:nb] < -1e-7 * (1.0 + _amax(lam))):
        return None
    return lam


def _violated(x: np.ndarray, lo: np.ndarray, up: np.ndarray, ftol: float) -> np.ndarray:
    """Face that fixes every variable ``x`` puts outside the box at the bound it crosses."""
    return np.where(x > up + ftol, AT_UPPER, np.where(x < lo - ftol, AT_LOWER, FREE))


def _slacks(levs: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> list[np.ndarray]:
    return [A @ x - b for A, b in levs]


def _lex_less(a: list[float], b: list[float], tol: float) -> bool:
    """Whether slack-norm vector ``a`` is lexicographically smaller than ``b`` (with tolerance)."""
    for u, v in zip(a, b, strict=True):
        if u < v - tol:
            return True
        if u > v + tol:
            return False
    return False


def _level_row(
    box: np.ndarray, lam: np.ndarray, n_fixed: int, sizes: list[int], w: np.ndarray
) -> list[np.ndarray]:
    """One level subproblem's multipliers: the box's, each higher level's rows (split out of
    the stacked ``lam`` after the ``n_fixed`` box entries) and the level's own slack ``w``."""
    row = [box]
    k = n_fixed
    for sz in sizes[1:]:
        row.append(lam[k : k + sz].copy())
        k += sz
    row.append(w)
    return row


def _min_norm_multipliers(
    x: np.ndarray,
    face: np.ndarray,
    levs: list[tuple[np.ndarray, np.ndarray]],
    eye: np.ndarray,
) -> list[list[np.ndarray]]:
    """Minimum-norm stationarity multipliers without the sign test (degenerate faces)."""
    n = x.size
    fixed = np.flatnonzero(face != FREE)
    rows = [eye[fixed]]
    sizes = [fixed.size]
    mult: list[list[np.ndarray]] = [[np.zeros(n)]]
    for A, b in levs:
        w = A @ x - b
        B = np.vstack(rows)
        lam = np.linalg.lstsq(B.T, -(A.T @ w), rcond=None)[0] if B.shape[0] else np.zeros(0)
        box = np.zeros(n)
        box[fixed] = lam[: fixed.size]
        mult.append(_level_row(box, lam, fixed.size, sizes, w))
        rows.append(A)
        sizes.append(A.shape[0])
    return mult
