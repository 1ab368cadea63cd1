"""The Newton core shared by the generic method and the quadrotor's thrust-vector step."""

from __future__ import annotations

import numpy as np

from residual_quad.controllers.prioritized import FunctionTask, HierarchicalNewton, HNewtonParams
from residual_quad.controllers.prioritized.newton import (
    NewtonCore,
    adapt_trust_region,
    clamp_factor,
    task_multipliers,
)
from residual_quad.controllers.prioritized.quad import (
    HNewtonQuadParams,
    ThrustVectorNewton,
    thrust_vector_tasks,
)
from residual_quad.envs.airframe import Airframe


def test_clamp_factor():
    H = np.diag([2.0, -1.0, 0.0])
    R = clamp_factor(H, 1e-6)
    np.testing.assert_allclose(R.T @ R, np.diag([2.0, 1e-6, 1e-6]), atol=1e-12)


def _thrust_vector_pair(method: str) -> tuple[ThrustVectorNewton, HierarchicalNewton]:
    """The quadrotor's thrust-vector Newton and the generic method on the same two levels."""
    frame, dt = Airframe(), 0.01
    tv = ThrustVectorNewton(frame, dt, HNewtonQuadParams(method=method))

    def level(rows: slice, dim: int) -> FunctionTask:
        def fun(q):
            a, J, H = thrust_vector_tasks(q, frame.mass, frame.gravity)
            return a[rows], J[rows], H[rows]

        return FunctionTask(fun, dim)

    params = HNewtonParams(method=method, dt=dt, kp=1.0 / dt, vmax=tv.vmax, backend="numpy")
    gen = HierarchicalNewton([[level(slice(2, 3), 1)], [level(slice(0, 2), 2)]], 3, params)
    return tv, gen


def test_generic_and_thrust_vector_newton_share_one_core():
    """Both controllers are a ``NewtonCore`` and do not override its pieces; given the same state
    they produce bit-identical Hessians, factors, BFGS updates and switching decisions."""
    rng = np.random.default_rng(4)
    for method in ("lm", "bfgs", "newton"):
        tv, gen = _thrust_vector_pair(method)
        for ctl in (tv, gen):
            assert isinstance(ctl, NewtonCore)
            for name in ("switch_on", "hierarchical_hessian", "level_factor", "bfgs_update"):
                assert getattr(type(ctl), name) is getattr(NewtonCore, name)
        assert tv.settings == gen.settings
        q0 = np.array([11.0, 0.2, -0.3])
        q1 = q0 + np.array([0.4, -0.05, 0.02])
        a_des = np.array([2.0, -1.0, 0.5])
        ev0, ev1 = tv.evaluate(q0, a_des), tv.evaluate(q1, a_des)
        np.testing.assert_array_equal(ev1[1][1], gen.evaluate(q1)[1][1])
        lam = [[rng.normal(size=1)], [rng.normal(size=1), rng.normal(size=2)]]
        for ctl in (tv, gen):
            ctl.lam = [[v.copy() for v in row] for row in lam]
            ctl.remember(q0, ev0)
            ctl.bfgs_update(q1, ev1)
        for li in range(2):
            np.testing.assert_array_equal(tv.B[li], gen.B[li])
            np.testing.assert_array_equal(
                tv.hierarchical_hessian(ev1, lam, li), gen.hierarchical_hessian(ev1, lam, li)
            )
            R_tv, R_gen = tv.level_factor(li, ev1, lam), gen.level_factor(li, ev1, lam)
            np.testing.assert_array_equal(R_tv, R_gen)
        for w in (0.0, 5e-7, 2e-6, 1.0):
            assert tv.switch_on(w) == gen.switch_on(w)


def test_task_multipliers_drop_top_level_and_augmentation_rows():
    mult = [
        [np.arange(3.0)],
        [np.arange(3.0), np.array([1.0, 9.0, 9.0])],
        [np.arange(3.0), np.array([2.0, 9.0]), np.array([3.0, 4.0, 9.0])],
    ]
    lam = task_multipliers(mult, (1, 2))
    assert [[v.tolist() for v in row] for row in lam] == [[[1.0]], [[2.0], [3.0, 4.0]]]
    assert task_multipliers(None, (1, 2)) is None


def test_trust_region_ratio_rule():
    v = np.array([1.0, 2.0])
    cap = np.array([1.5, 10.0])
    np.testing.assert_array_equal(adapt_trust_region(v, 1.0, 0.0, 0.9, True, 0.3, cap), [0.3, 0.5])
    np.testing.assert_array_equal(adapt_trust_region(v, 1.0, 0.0, 0.1, True, 0.3, cap), [1.5, 4.0])
    assert adapt_trust_region(v, 1.0, 0.0, 0.1, False, 0.3, cap) is v
    assert adapt_trust_region(v, 1.0, 1.0, 0.1, True, 0.3, cap) is v  # no predicted decrease
