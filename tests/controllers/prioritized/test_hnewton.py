"""Generic hierarchical Newton controller: hierarchical Hessian and parameters."""

from __future__ import annotations

import numpy as np
import pytest
from planar_chain import ChainPointTask

from residual_quad.controllers.prioritized import HierarchicalNewton, HNewtonParams


def test_hierarchical_hessian_matches_lagrangian_gradient_fd():
    lengths = [1.0, 0.8, 0.6]
    tasks = [
        [ChainPointTask(lengths, 2, np.array([1.0, 1.0]))],
        [ChainPointTask(lengths, 1, np.zeros(2))],
    ]
    ctrl = HierarchicalNewton(tasks, 3, HNewtonParams(lambda_scale="dt", dt=0.01))
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, 3)
    lam = [[rng.normal(size=2)], [rng.normal(size=2), rng.normal(size=2)]]
    ev = ctrl.evaluate(q)
    H = ctrl.hierarchical_hessian(ev, lam, 1)

    def grad(x):  # ∇_q L_2 = Σ_j J_j(x)^T λ_{j,2} (optimization scaling Δt)
        e = ctrl.evaluate(x)
        return 0.01 * sum(e[j][1].T @ lam[1][j] for j in range(2))

    I = np.eye(3)
    Hn = np.stack([(grad(q + 1e-6 * I[k]) - grad(q - 1e-6 * I[k])) / 2e-6 for k in range(3)], 1)
    assert np.abs(H - Hn).max() < 1e-8


def test_params_validation():
    with pytest.raises(ValueError, match="method"):
        HNewtonParams(method="sqp")
    with pytest.raises(ValueError, match="switch"):
        HNewtonParams(switch="sometimes")
    assert HNewtonParams(dt=0.005).nu == pytest.approx(1e-12 * 0.005**2)


def test_the_chain_task_matches_its_finite_differences():
    """The helper task's Jacobian and Hessian are those of its position (what the Hessian test
    above relies on)."""
    task = ChainPointTask([1.0, 0.8, 0.6], 2, np.zeros(2))
    q = np.random.default_rng(1).uniform(-1, 1, 3)
    e, J, H = task.evaluate(q)
    I = np.eye(3)
    Jn = np.stack(
        [
            (task.evaluate(q + 1e-6 * I[k])[0] - task.evaluate(q - 1e-6 * I[k])[0]) / 2e-6
            for k in range(3)
        ],
        1,
    )
    Hn = np.stack(
        [
            (task.evaluate(q + 1e-6 * I[k])[1] - task.evaluate(q - 1e-6 * I[k])[1]) / 2e-6
            for k in range(3)
        ],
        2,
    )
    assert np.abs(J - Jn).max() < 1e-8
    assert np.abs(H - Hn).max() < 1e-8
    assert np.allclose(
        e,
        [
            np.cos(q[0]) + 0.8 * np.cos(q[:2].sum()) + 0.6 * np.cos(q.sum()),
            np.sin(q[0]) + 0.8 * np.sin(q[:2].sum()) + 0.6 * np.sin(q.sum()),
        ],
    )
