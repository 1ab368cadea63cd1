"""Property-based tests of the RLS: no setting it accepts can overflow, and no sample can poison it.

* any :class:`RLSConfig` either raises ``ValueError`` at construction or keeps ``θ`` and ``P``
  finite, ``tr P`` within the cap, under the worst excitation (one direction forever);
* a stream with NaN/inf/huge entries injected at random steps leaves the RLS exactly where the
  same stream without those samples would (bit for bit), and :attr:`LastLayerRLS.rejected` counts
  them.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.rls import LastLayerRLS, RLSConfig

N, M = 17, 3  # a small last layer: the properties do not depend on its size

any_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0.0, max_value=2.0),
    st.sampled_from([0.5, 1.0, 1e-300, 1e100, 1e101]),
)


@settings(max_examples=60, deadline=None)
@given(
    p0=any_float,
    forgetting=any_float,
    trace_cap=any_float,
    leak=st.one_of(any_float, st.just(0.0)),
    seed=st.integers(0, 2**16),
)
def test_accepted_settings_cannot_overflow(p0, forgetting, trace_cap, leak, seed):
    try:
        cfg = RLSConfig(p0=p0, forgetting=forgetting, trace_cap=trace_cap, leak=leak)
    except ValueError:
        return  # refused at construction: the promise
    rng = np.random.default_rng(seed)
    rls = LastLayerRLS(rng.standard_normal((N, M)), cfg)
    phi = np.append(np.tanh(rng.standard_normal(N - 1)), 1.0)  # one direction: hover
    for _ in range(1100):  # λ = 0.5 without a cap overflows after 1024 steps
        rls.update(phi, rng.standard_normal(M))
    assert np.isfinite(rls.trace) and rls.trace <= cfg.trace_cap * (1 + 1e-9)
    assert np.all(np.isfinite(rls.P)) and np.all(np.isfinite(rls.theta))
    assert rls.rejected == 0


bad_value = st.sampled_from([np.nan, np.inf, -np.inf, 1e200, -1e300])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    forgetting=st.sampled_from([0.9, 0.99, 1.0]),
    faults=st.dictionaries(
        st.integers(0, 199),  # step
        st.tuples(st.booleans(), st.integers(0, N - 1), bad_value),  # (in phi?, index, value)
        max_size=12,
    ),
)
def test_injected_bad_samples_are_skipped_exactly(seed, forgetting, faults):
    rng = np.random.default_rng(seed)
    cfg = RLSConfig(p0=0.05, forgetting=forgetting, trace_cap=10.0, leak=1e-3, warmup_steps=0)
    theta0 = rng.standard_normal((N, M))
    faulty, clean = LastLayerRLS(theta0, cfg), LastLayerRLS(theta0, cfg)
    for k in range(200):
        phi = np.append(np.tanh(rng.standard_normal(N - 1)), 1.0)
        y = rng.standard_normal(M)
        if k in faults:
            in_phi, i, value = faults[k]
            phi, y = phi.copy(), y.copy()
            if in_phi:
                phi[i] = value
            else:
                y[i % M] = value
            faulty.update(phi, y)
        else:
            faulty.update(phi, y)
            clean.update(phi, y)
    assert faulty.rejected == len(faults) and clean.rejected == 0
    assert faulty.steps == clean.steps == 200 - len(faults)
    np.testing.assert_array_equal(faulty.theta, clean.theta)
    np.testing.assert_array_equal(faulty.P, clean.P)
    assert faulty.cap_hits == clean.cap_hits
