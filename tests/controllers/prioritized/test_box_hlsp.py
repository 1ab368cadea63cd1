"""Exact box-topped HLSP (``BoxHLSP``) against the numpy reference cascade."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers.prioritized.box_hlsp import AT_LOWER, AT_UPPER, BoxHLSP, box_levels
from residual_quad.controllers.prioritized.hlsp import solve_hlsp, stationarity_residual


# ------------------------------------------------------------------------------ fast HLSP
def _random_problem(rng: np.random.Generator, n: int, sizes: list[int]):
    levs = [(rng.normal(size=(m, n)), 2.0 * rng.normal(size=m)) for m in sizes]
    lo = -rng.uniform(0.1, 1.5, n)
    up = rng.uniform(0.1, 1.5, n)
    return lo, up, levs


@pytest.mark.parametrize("n,sizes", [(3, [1, 2]), (4, [2, 1, 1]), (3, [1, 2, 3]), (4, [1, 3])])
def test_box_hlsp_matches_numpy_reference(n: int, sizes: list[int]) -> None:
    rng = np.random.default_rng(n * 10 + len(sizes))
    solver = BoxHLSP(n)
    active_seen = 0
    for _ in range(60):
        lo, up, levs = _random_problem(rng, n, sizes)
        res = solver.solve(lo, up, levs)
        ref = solve_hlsp(box_levels(lo, up, levs), backend="numpy")
        assert np.all(res.x >= lo - 1e-9) and np.all(res.x <= up + 1e-9)
        np.testing.assert_allclose(res.slack_norms(), ref.slack_norms()[1:], atol=1e-7)
        if sum(sizes) >= n:  # full-rank stack: the optimum is unique
            np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
        active_seen += int(np.any(res.face != 0))
        # multipliers: stationarity at every level, right signs on the active bounds
        mult = res.multipliers
        assert mult is not None
        assert stationarity_residual(box_levels(lo, up, levs), mult).max() < 1e-7
        for lam in mult[1:]:
            assert np.all(lam[0][res.face == AT_UPPER] >= -1e-7)
            assert np.all(lam[0][res.face == AT_LOWER] <= 1e-7)
    assert active_seen > 20  # the box was active often enough to mean something


def test_box_hlsp_fast_path_exact_square_solution() -> None:
    A = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [1.0, 0.0, 3.0]])
    x_true = np.array([0.1, -0.2, 0.3])
    levels = [(A[:1], A[:1] @ x_true), (A[1:], A[1:] @ x_true)]
    res = BoxHLSP(3).solve(-np.ones(3), np.ones(3), levels)
    np.testing.assert_allclose(res.x, x_true, atol=1e-14)
    assert res.candidates == 1 and not res.enumerated


def test_box_hlsp_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        BoxHLSP(3).solve(np.ones(3), np.zeros(3), [(np.eye(3), np.zeros(3))])
    with pytest.raises(ValueError):
        BoxHLSP(0)
