"""Planar stick robots: analytic kinematics and rod dynamics against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.evaluation.studies.stick.robot import StickRobot

EPS = 1e-6


@pytest.mark.parametrize("lengths", [[1.0, 1.0], [1.0, 0.7, 0.5], [0.3, 0.9, 0.4, 1.1, 0.6]])
def test_point_jacobian_and_hessian_match_finite_differences(lengths):
    r = StickRobot(lengths)
    rng = np.random.default_rng(len(lengths))
    q = rng.uniform(-2, 2, r.n)
    I = np.eye(r.n)
    for link in range(r.n):
        for frac in (1.0, 0.5):
            p, J, H = r.point_all(q, link, frac)
            Jn = np.stack(
                [
                    (r.point(q + EPS * I[j], link, frac) - r.point(q - EPS * I[j], link, frac))
                    / (2 * EPS)
                    for j in range(r.n)
                ],
                axis=1,
            )
            Hn = np.stack(
                [
                    (
                        r.point_jacobian(q + EPS * I[j], link, frac)
                        - r.point_jacobian(q - EPS * I[j], link, frac)
                    )
                    / (2 * EPS)
                    for j in range(r.n)
                ],
                axis=2,
            )
            assert np.abs(J - Jn).max() < 1e-8
            assert np.abs(H - Hn).max() < 1e-8
            assert np.allclose(H, np.swapaxes(H, 1, 2))
            np.testing.assert_allclose(p, r.point(q, link, frac))


def test_dynamics_match_lagrangian_finite_differences():
    r = StickRobot([1.0, 0.7, 0.5], masses=[2.0, 1.0, 0.5])
    q = np.array([0.3, -0.8, 1.1])
    qd = np.array([0.5, -1.0, 0.7])
    I = np.eye(3)
    M = r.mass_matrix(q)
    assert np.allclose(M, M.T) and np.all(np.linalg.eigvalsh(M) > 0)
    Md = sum(
        (r.mass_matrix(q + EPS * I[j]) - r.mass_matrix(q - EPS * I[j])) / (2 * EPS) * qd[j]
        for j in range(3)
    )

    def T2(x):
        return qd @ r.mass_matrix(x) @ qd

    dT = np.array([(T2(q + EPS * I[j]) - T2(q - EPS * I[j])) / (2 * EPS) for j in range(3)])

    def V(x):
        return sum(r.masses[i] * 9.81 * r.point(x, i, 0.5)[1] for i in range(3))

    dV = np.array([(V(q + EPS * I[j]) - V(q - EPS * I[j])) / (2 * EPS) for j in range(3)])
    np.testing.assert_allclose(r.bias(q, qd), Md @ qd - 0.5 * dT + dV, atol=1e-7)
    tau = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(M @ r.forward_dynamics(q, qd, tau) + r.bias(q, qd), tau)
