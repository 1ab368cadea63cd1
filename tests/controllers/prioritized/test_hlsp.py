"""HLSP solver: both backends against a brute-force cascade of scipy optimizations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import null_space
from scipy.optimize import minimize

from residual_quad.controllers.prioritized.hlsp import (
    HLSPSolver,
    Level,
    kkt_ok,
    solve_hlsp,
    stationarity_residual,
)


def _signed(A, lo, up, x):
    ax = A @ x
    w = np.where(ax > up, ax - up, 0.0) + np.where(ax < lo, ax - lo, 0.0)
    eq = lo == up
    w[eq] = (ax - up)[eq]
    return w


def brute_cascade(levels, fix_tol=1e-7):
    """Level by level SLSQP in nullspace coordinates, several starts (independent reference)."""
    n = levels[0][0].shape[1]
    x, Z = np.zeros(n), np.eye(n)
    C, d = np.zeros((0, n)), np.zeros(0)
    norms = []
    for A, lo, up in levels:
        r = Z.shape[1]
        if r:

            def cost(z, A=A, lo=lo, up=up, x=x, Z=Z):
                w = _signed(A, lo, up, x + Z @ z)
                return 0.5 * w @ w

            def grad(z, A=A, lo=lo, up=up, x=x, Z=Z):
                return Z.T @ (A.T @ _signed(A, lo, up, x + Z @ z))

            cons = []
            if C.shape[0]:
                cons = [
                    {
                        "type": "ineq",
                        "fun": lambda z, C=C, d=d, x=x, Z=Z: d - C @ (x + Z @ z),
                        "jac": lambda z, C=C, Z=Z: -C @ Z,
                    }
                ]
            best = None
            starts = [np.zeros(r)] + [np.random.default_rng(k).normal(size=r) for k in range(3)]
            for z0 in starts:
                res = minimize(
                    cost,
                    z0,
                    jac=grad,
                    constraints=cons,
                    method="SLSQP",
                    options={"ftol": 1e-16, "maxiter": 1000},
                )
                if C.shape[0] and np.min(d - C @ (x + Z @ res.x)) < -1e-9:
                    continue
                if best is None or res.fun < best.fun:
                    best = res
            x = x + Z @ best.x
        w = _signed(A, lo, up, x)
        norms.append(np.linalg.norm(w))
        fixed = (np.abs(w) > fix_tol) | (lo == up)
        if fixed.any() and Z.shape[1]:
            Z = Z @ null_space(A[fixed] @ Z, rcond=1e-10)
        hard = ~fixed
        fu, fl = hard & np.isfinite(up), hard & np.isfinite(lo)
        C = np.vstack([C, A[fu], -A[fl]])
        d = np.concatenate([d, up[fu], -lo[fl]])
    return np.array(norms)


def random_problem(rng, n, nlev):
    """Equality and inequality rows, infeasible levels, rank-deficient rows."""
    levels = []
    for _ in range(nlev):
        m = int(rng.integers(1, 4))
        A = rng.normal(size=(m, n))
        if m > 1 and rng.random() < 0.3:
            A[-1] = A[0] * rng.normal()  # rank deficient
        c = 2.0 * rng.normal(size=m)
        kind = rng.random(m)
        lo = np.where(kind < 0.4, c, np.where(kind < 0.7, -np.inf, c - rng.random(m)))
        up = np.where(
            kind < 0.4, c, np.where(kind < 0.7, c, np.where(kind < 0.85, np.inf, c + rng.random(m)))
        )
        levels.append((A, lo, up))
    return levels


PROBLEMS = [random_problem(np.random.default_rng(s), 2 + s % 4, 2 + s % 3) for s in range(40)]
REFS = {}


def _ref(i):
    if i not in REFS:
        REFS[i] = brute_cascade(PROBLEMS[i])
    return REFS[i]


@pytest.mark.parametrize("backend", ["numpy", "daqp"])
def test_random_problems_match_brute_force(backend):
    solver = HLSPSolver(backend, warm_start=False)
    for i, levels in enumerate(PROBLEMS):
        ref = _ref(i)
        res = solver.solve(levels)
        got = res.slack_norms()
        # 1e-8 on every level's slack norm (relative for norms above 1)
        assert np.all(np.abs(got - ref) <= 1e-8 * (1.0 + ref)), (i, got, ref)
        assert stationarity_residual(levels, res.multipliers).max() < 1e-8
        assert kkt_ok(levels, res, 1e-6)


def test_infeasible_parallel_rows_and_multiplier_signs():
    # level 1: x0 <= 1 and x0 >= 3 (infeasible), level 2: x1 = 2
    A = np.array([[1.0, 0.0], [1.0, 0.0]])
    levels = [(A, [-np.inf, 3.0], [1.0, np.inf]), (np.array([[0.0, 1.0]]), [2.0], [2.0])]
    for backend in ("numpy", "daqp"):
        res = solve_hlsp(levels, backend)
        np.testing.assert_allclose(res.x, [2.0, 2.0], atol=1e-9)
        np.testing.assert_allclose(res.slacks[0], [1.0, -1.0], atol=1e-9)
        assert res.multipliers[0][0] @ A[:, 0] == pytest.approx(0.0, abs=1e-9)


def test_saturated_inequality_multiplier_sign():
    # box x <= 1 on top, x = 3 below: λ_{1,2} of the box pushes at its upper bound (>= 0)
    levels = [Level.box(1, -1.0, 1.0), Level.eq(np.array([[1.0]]), [3.0])]
    for backend in ("numpy", "daqp"):
        res = solve_hlsp(levels, backend)
        assert res.x[0] == pytest.approx(1.0, abs=1e-9)
        lam = res.multipliers[1]
        assert lam[1][0] == pytest.approx(-2.0, abs=1e-9)  # λ_{2,2} = w_2
        assert lam[0][0] == pytest.approx(2.0, abs=1e-9)  # stationarity: λ_box + w = 0
        assert res.active[0][0] == 1


def test_warm_start_reuses_active_set():
    rng = np.random.default_rng(5)
    levels = [Level.box(6, -0.3, 0.3), Level.eq(rng.normal(size=(4, 6)), rng.normal(size=4))]
    levels.append(Level.eq(np.eye(6), np.ones(6)))
    cold = HLSPSolver("numpy", warm_start=False).solve(levels)
    ws = HLSPSolver("numpy")
    ws.solve(levels)
    warm = ws.solve(levels)
    np.testing.assert_allclose(warm.slack_norms(), cold.slack_norms(), atol=1e-10)
    assert warm.iterations < cold.iterations


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="columns"):
        solve_hlsp([(np.eye(2), [0, 0], [1, 1]), (np.eye(3), [0, 0, 0], [1, 1, 1])])
    with pytest.raises(ValueError, match="bounds must have shape"):
        solve_hlsp([(np.eye(2), [0, 0, 0], [1, 1])])
    with pytest.raises(ValueError, match="lower > upper"):
        solve_hlsp([(np.eye(2), [2, 0], [1, 1])])
    with pytest.raises(ValueError, match="at least one level"):
        solve_hlsp([])
    with pytest.raises(ValueError, match="backend"):
        HLSPSolver("cvx")


def test_inputs_and_errors():
    lv = [(np.eye(2, dtype=int), np.array([-1, -1]), np.array([1, 1])), ([[1.0, 1.0]], [3], [3])]
    res = solve_hlsp(lv, "daqp")  # lists / int arrays are cast
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-9)
    s = HLSPSolver("daqp")
    good = [Level.box(2, -1.0, 1.0), Level.eq(np.array([[1.0, 1.0]]), [3.0])]
    s.solve(good)
    bad = [Level.box(2, -1.0, 1.0), Level.eq(np.array([[np.nan, 1.0]]), [3.0])]
    with pytest.raises(ValueError, match="finite"):
        s.solve(bad)
    bad = [Level(np.eye(2), np.array([2.0, 0.0]), np.array([1.0, 1.0])), good[1]]
    with pytest.raises(ValueError, match="lower > upper"):
        s.solve(bad)
    with pytest.raises(ValueError, match="warm-start"):
        s.solve(good, active=[np.zeros(3, int), np.zeros(1, int)])
    np.testing.assert_allclose(s.solve(good, active=[np.ones(2), np.zeros(1)]).x, [1, 1], atol=1e-9)
