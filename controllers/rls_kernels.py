"""The covariance updates of the batched RLS (:meth:`~residual_quad.controllers.rls.RLSLaw.update`)
as compiled kernels: one pass over each ``P̃`` instead of a chain of whole-batch numpy temporaries.

Bits: each kernel performs, element by element, the operations of the numpy formula it replaces
in the same order (numba's default IEEE math: no reassociation, no fused multiply-add), so
``P̃`` carries the same bits as with those formulas; the sums (``P̃φ``, ``φᵀP̃φ``) and the
product ``P²`` stay with numpy and BLAS. ``tests/controllers/test_rls_kernels.py`` compares
both kernels with the numpy formulas bit for bit.
"""

from __future__ import annotations

import numpy as np

from residual_quad.compiled import compiled

__all__ = ["efra_covariance", "rank1_downdate"]


@compiled
def _rank1_downdate(Pt, gc, g):  # pragma: no cover - compiled
    N, p = g.shape
    for r in range(N):
        for i in range(p):
            gi = gc[r, i]
            for j in range(p):
                Pt[r, i, j] = Pt[r, i, j] - gi * g[r, j]


@compiled
def _efra(P, rows, P2, g, k, lam, delta, beta):  # pragma: no cover - compiled
    B, p = g.shape
    for r in range(B):
        row = rows[r]
        kr = k[r]
        for i in range(p):
            for j in range(i, p):
                qij = (P[row, i, j] - kr * (g[r, i] * g[r, j])) / lam - delta * P2[r, i, j]
                qji = (P[row, j, i] - kr * (g[r, j] * g[r, i])) / lam - delta * P2[r, j, i]
                if i == j:  # kept as ½(q + q), not q: the two differ where q + q overflows
                    qij = qij + beta
                    qji = qji + beta
                s = 0.5 * (qij + qji)
                P[row, i, j] = s
                P[row, j, i] = s


def rank1_downdate(Pt: np.ndarray, gc: np.ndarray, g: np.ndarray) -> None:
    """``P̃ −= gc·gᵀ`` row by row, in place: ``Pt`` (N, p, p), ``gc`` and ``g`` (N, p)."""
    _rank1_downdate(Pt, np.ascontiguousarray(gc), np.ascontiguousarray(g))


def efra_covariance(
    P: np.ndarray,
    rows: np.ndarray,
    P2: np.ndarray,
    g: np.ndarray,
    k: np.ndarray,
    forgetting: float,
    delta: float,
    beta: float,
) -> None:
    """The EFRA covariance step of the rows ``rows`` of ``P`` (N, p, p), in place:
    ``P⁺ = ½(Q + Qᵀ)``, ``Q = (P − k·g·gᵀ)/λ − δ·P2 + β·I`` with ``g = Pφ`` and ``P2 = P²`` of
    those rows (B, p) and (B, p, p), ``k`` (B,) the gains."""
    _efra(
        P,
        np.ascontiguousarray(rows, dtype=np.int64),
        P2,
        np.ascontiguousarray(g),
        np.ascontiguousarray(k),
        float(forgetting),
        float(delta),
        float(beta),
    )
