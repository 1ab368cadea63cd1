"""The RLS law on N rows (:meth:`RLSLaw.update`) equals N single :class:`LastLayerRLS` on the
same sample streams.

Random settings (hypothesis), streams with NaN/inf samples and masked-out envs: θ and P agree to
1e-9 (relative), and the step, cap-hit and rejection counters exactly; the fold of the scale ``s``
into ``P̃`` happens at the same step on well-excited data.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.law import put_rows, tree_map
from residual_quad.controllers.rls import LastLayerRLS, RLSConfig, RLSLaw

N_ENVS, N, M = 3, 17, 3


class RowsRLS:
    """N rows of :class:`RLSLaw` state, read the way the tests compare them."""

    def __init__(self, theta0, n_envs, cfg=None):
        self.law = RLSLaw(theta0, cfg)
        self.state = self.law.init_state(n_envs)

    def update(self, phi, y, mask=None):
        self.state, e = self.law.update(self.state, phi, y, mask)
        return e

    def reset(self, index):
        put_rows(self.state, index, tree_map(lambda x: x[0], self.law.init_state(1)))

    theta0 = property(lambda self: self.law.theta0)
    theta = property(lambda self: self.state.theta)
    P = property(lambda self: self.law.covariance(self.state))
    trace = property(lambda self: self.law.trace(self.state))
    applied = property(lambda self: self.law.applied(self.state))
    steps = property(lambda self: self.state.steps)
    cap_hits = property(lambda self: self.state.cap_hits)
    rejected = property(lambda self: self.state.rejected)
    _s = property(lambda self: self.state.s)


def run_both(cfg, phis, ys, masks, n=N):
    rng = np.random.default_rng(0)
    theta0 = rng.normal(size=(n, M))
    batch = RowsRLS(theta0, N_ENVS, cfg)
    singles = [LastLayerRLS(theta0, cfg) for _ in range(N_ENVS)]
    for phi, y, mask in zip(phis, ys, masks, strict=True):
        batch.update(phi, y, mask)
        for i, rls in enumerate(singles):
            if mask[i]:
                rls.update(phi[i], y[i])
    return batch, singles


def assert_same(batch, singles):
    theta = np.stack([r.theta for r in singles])
    P = np.stack([r.P for r in singles])
    assert np.abs(batch.theta - theta).max() <= 1e-9 * max(1.0, np.abs(theta).max())
    assert np.abs(batch.P - P).max() <= 1e-9 * max(1.0, np.abs(P).max())
    assert batch.steps.tolist() == [r.steps for r in singles]
    assert batch.cap_hits.tolist() == [r.cap_hits for r in singles]
    assert batch.rejected.tolist() == [r.rejected for r in singles]
    assert np.all(np.isfinite(batch.theta)) and np.all(np.isfinite(batch.P))


@settings(max_examples=40, deadline=None)
@given(
    p0=st.sampled_from([1e-3, 1e-2, 0.1]),
    forgetting=st.floats(0.95, 1.0),
    trace_cap=st.sampled_from([1.0, 10.0, 1000.0]),
    leak=st.sampled_from([0.0, 0.01]),
    warmup=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_batched_rls_equals_single_rls(p0, forgetting, trace_cap, leak, warmup, seed):
    cfg = RLSConfig(
        p0=p0, forgetting=forgetting, trace_cap=trace_cap, leak=leak, warmup_steps=warmup
    )
    rng = np.random.default_rng(seed)
    steps = 30
    phis = rng.normal(size=(steps, N_ENVS, N))
    ys = rng.normal(size=(steps, N_ENVS, M))
    bad = rng.random((steps, N_ENVS)) < 0.1
    phis[bad, rng.integers(0, N)] = rng.choice([np.nan, np.inf, -np.inf])
    masks = rng.random((steps, N_ENVS)) < 0.8
    batch, singles = run_both(cfg, phis, ys, masks)
    assert_same(batch, singles)
    applied = batch.applied
    for i, r in enumerate(singles):
        assert np.abs(applied[i] - r.applied).max() <= 1e-9 * max(1.0, np.abs(r.applied).max())


def test_scale_folds_into_p_at_the_same_step():
    cfg = RLSConfig(p0=100.0, forgetting=0.95, trace_cap=1e100)
    rng = np.random.default_rng(1)
    steps = 220  # s grows by 1/0.95 per step: from 100 past 1e6 after 180 steps
    phis = rng.normal(size=(steps, N_ENVS, 3))
    ys = rng.normal(size=(steps, N_ENVS, M))
    masks = np.ones((steps, N_ENVS), dtype=bool)
    batch, singles = run_both(cfg, phis, ys, masks, n=3)
    assert_same(batch, singles)
    assert np.allclose(batch._s, [r.state.s for r in singles], rtol=1e-12)
    assert np.all(batch._s < 1e3)  # folded (unfolded it would be 100·0.95⁻²²⁰ ≈ 8e6)


def test_reset_of_one_env_leaves_the_others():
    rng = np.random.default_rng(2)
    batch = RowsRLS(rng.normal(size=(N, M)), N_ENVS)
    for _ in range(5):
        batch.update(rng.normal(size=(N_ENVS, N)), rng.normal(size=(N_ENVS, M)))
    theta, P = batch.theta.copy(), batch.P
    batch.reset(1)
    assert np.array_equal(batch.theta[1], batch.theta0) and batch.steps[1] == 0
    assert np.array_equal(batch.P[1], RLSConfig().p0 * np.eye(N))
    for i in (0, 2):
        assert np.array_equal(batch.theta[i], theta[i]) and np.array_equal(batch.P[i], P[i])
