"""EFRA covariance management of the last-layer RLS: known answers and bounds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from residual_quad.controllers.rls import (
    LastLayerRLS,
    RLSConfig,
    efra_bound,
    efra_fixed_point,
    efra_positive_margin,
)

N, M = 65, 3


def _regressor(rng: np.random.Generator) -> np.ndarray:
    return np.append(np.tanh(2.0 * rng.standard_normal(N - 1)), 1.0)


def test_fixed_point_solves_its_equation():
    cfg = RLSConfig(covariance="efra", forgetting=0.98, efra_beta=1e-3, efra_delta=0.05)
    s = efra_fixed_point(cfg)
    assert s == pytest.approx(s / cfg.forgetting + cfg.efra_beta - cfg.efra_delta * s * s)


def test_without_excitation_the_covariance_settles_at_the_fixed_point():
    # the trace-cap scheme grows tr P like λ⁻ᵏ up to the cap; EFRA settles at σ*·I
    cfg = RLSConfig(covariance="efra", warmup_steps=0)
    rls = LastLayerRLS(np.zeros((N, M)), cfg)
    for _ in range(5000):
        rls.update(np.zeros(N), np.zeros(M))
    np.testing.assert_allclose(rls.P, efra_fixed_point(cfg) * np.eye(N), rtol=1e-9, atol=1e-12)
    capped = LastLayerRLS(np.zeros((N, M)), RLSConfig(warmup_steps=0))
    for _ in range(5000):
        capped.update(np.zeros(N), np.zeros(M))
    assert capped.trace == pytest.approx(capped.config.trace_cap)  # lives at the cap


def test_one_step_matches_the_textbook_formula():
    rng = np.random.default_rng(3)
    cfg = RLSConfig(covariance="efra", p0=0.2, forgetting=0.97, efra_alpha=0.7)
    theta0 = rng.standard_normal((N, M))
    rls = LastLayerRLS(theta0, cfg)
    P, theta = cfg.p0 * np.eye(N), theta0.copy()
    for _ in range(20):
        phi, y = _regressor(rng), rng.standard_normal(M)
        rls.update(phi, y)
        Pphi = P @ phi
        d = 1.0 + phi @ Pphi
        theta = theta + cfg.efra_alpha * np.outer(Pphi, y - theta.T @ phi) / d
        # [EFRA]: the quadratic damping acts on the covariance before the step
        P = (
            (P - cfg.efra_alpha * np.outer(Pphi, Pphi) / d) / cfg.forgetting
            + cfg.efra_beta * np.eye(N)
            - cfg.efra_delta * P @ P
        )
    np.testing.assert_allclose(rls.P, P, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(rls.theta, theta, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "excitation", ["rich", "one direction", "none then rich", "none then one strong direction"]
)
def test_eigenvalues_stay_inside_the_bounds(excitation):
    rng = np.random.default_rng(7)
    cfg = RLSConfig(covariance="efra", warmup_steps=0)
    rls = LastLayerRLS(rng.standard_normal((N, M)), cfg)
    top = efra_fixed_point(cfg)
    single = np.append(np.zeros(N - 1), 1.0) * 5.0
    lo, hi = np.inf, 0.0
    for k in range(1500):
        if excitation == "rich" or (excitation == "none then rich" and k >= 500):
            phi = _regressor(rng)
        elif excitation == "one direction":
            phi = single
        elif excitation == "none then one strong direction" and k >= 500:
            phi = 100.0 * single  # a direction that grew to σ* while unexcited, hit hard
        else:
            phi = np.zeros(N)
        rls.update(phi, rng.standard_normal(M))
        if k % 25 == 0:
            eig = np.linalg.eigvalsh(rls.P)
            lo, hi = min(lo, eig[0]), max(hi, eig[-1])
    assert 0.0 < lo
    assert hi <= top * (1.0 + 1e-12)
    assert rls.trace <= N * top * (1.0 + 1e-12)


def _efra_walk(a, lam, beta, delta, p0, phis):
    """[EFRA]'s recursion written out (no safeguard), the smallest eigenvalue on the way."""
    n = phis.shape[1]
    P, low = p0 * np.eye(n), np.inf
    for phi in phis:
        Pphi = P @ phi
        corrected = (P - a * np.outer(Pphi, Pphi) / (1.0 + phi @ Pphi)) / lam
        P = corrected + beta * np.eye(n) - delta * P @ P
        low = min(low, float(np.linalg.eigvalsh(P)[0]))
    return low


def _unexcited_then_hit(n=4, quiet=400, hits=30):
    phis = np.zeros((quiet + hits, n))
    phis[quiet:, 0] = 100.0
    return phis


def test_a_at_or_above_lambda_is_refused_because_p_goes_indefinite():
    # the setting a tuning trial flew into an overflow: a = 1, λ = 0.96
    walk = _efra_walk(1.0, 0.96, 1e-4, 0.002, 0.01, _unexcited_then_hit())
    assert walk < 0.0  # the recursion itself leaves the positive definite cone
    with pytest.raises(ValueError, match="efra_alpha < forgetting"):
        RLSConfig(covariance="efra", efra_alpha=1.0, forgetting=0.96)
    with pytest.raises(ValueError, match="efra_alpha < forgetting"):
        RLSConfig(covariance="efra", efra_alpha=0.99, forgetting=0.99)
    # the same gain is fine with the trace-cap scheme, which has no δ·P² term
    RLSConfig(covariance="trace_cap", efra_alpha=1.0, forgetting=0.96)
    # just below λ the walk stays positive definite
    assert _efra_walk(0.95, 0.96, 1e-4, 0.002, 0.01, _unexcited_then_hit()) > 0.0


@settings(max_examples=60, deadline=None)
@given(
    lam=st.floats(0.5, 1.0),
    a_share=st.floats(0.01, 1.2),
    beta=st.floats(1e-6, 0.1),
    delta=st.floats(1e-4, 0.5),
    p0_share=st.floats(0.001, 3.0),
    gain=st.floats(0.0, 1e3),
    seed=st.integers(0, 2**16),
)
def test_accepted_settings_keep_p_positive_definite_and_bounded(
    lam, a_share, beta, delta, p0_share, gain, seed
):
    """Every setting the configuration check accepts, fed unexcited stretches and strong single
    directions, keeps every eigenvalue in (0, S] — the bound the check promises."""
    sigma = efra_fixed_point(SimpleNamespace(forgetting=lam, efra_beta=beta, efra_delta=delta))
    try:
        cfg = RLSConfig(
            covariance="efra",
            forgetting=lam,
            efra_alpha=min(a_share * lam, 1.0),
            efra_beta=beta,
            efra_delta=delta,
            p0=min(p0_share * sigma, 1000.0),
            warmup_steps=0,
        )
    except ValueError:
        assume(False)  # refused: nothing is promised
    assert efra_positive_margin(cfg) > 0.0
    rng = np.random.default_rng(seed)
    n = 6
    rls = LastLayerRLS(np.zeros((n, 2)), cfg)
    low, high = np.inf, 0.0
    for k in range(300):
        phi = np.zeros(n)
        if (k // 50) % 2:  # every other stretch: one random axis, hit with the drawn gain
            phi[rng.integers(n)] = gain
        rls.update(phi, rng.standard_normal(2))
        eig = np.linalg.eigvalsh(rls.P)
        low, high = min(low, eig[0]), max(high, eig[-1])
    assert low > 0.0
    assert high <= efra_bound(cfg) * (1.0 + 1e-9)


def test_non_finite_sample_changes_nothing():
    cfg = RLSConfig(covariance="efra", warmup_steps=0)
    rls = LastLayerRLS(np.ones((N, M)), cfg)
    rls.update(np.full(N, 0.1), np.ones(M))
    P, theta = rls.P, rls.theta.copy()
    rls.update(np.full(N, np.nan), np.ones(M))
    assert rls.rejected == 1
    np.testing.assert_array_equal(rls.P, P)
    np.testing.assert_array_equal(rls.theta, theta)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("covariance", "bogus"),
        ("efra_alpha", 0.0),
        ("efra_alpha", 1.5),
        ("efra_beta", 0.0),
        ("efra_delta", -1.0),
        ("efra_delta", float("nan")),
    ],
)
def test_bad_settings_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        RLSConfig(**{key: value})


def test_reset_restores_the_prior():
    cfg = RLSConfig(covariance="efra", p0=0.03)
    rls = LastLayerRLS(np.zeros((N, M)), cfg)
    rng = np.random.default_rng(0)
    for _ in range(50):
        rls.update(_regressor(rng), rng.standard_normal(M))
    rls.reset()
    np.testing.assert_array_equal(rls.P, 0.03 * np.eye(N))
    assert rls.steps == 0


def test_the_batched_rls_follows_efra_row_by_row():
    """N single EFRA RLS on the same streams (NaN/inf samples, masked envs, a reset of one env):
    θ and P agree to 1e-9 (relative), the counters exactly, and the prior's scale is folded in at
    each row's first update."""
    from tests.controllers.test_batch_rls import RowsRLS

    n_envs = 3
    for cfg in (RLSConfig(covariance="efra"), RLSConfig(covariance="efra", leak=0.01, p0=0.1)):
        rng = np.random.default_rng(1)
        theta0 = rng.standard_normal((N, M))
        batch = RowsRLS(theta0, n_envs, cfg)
        singles = [LastLayerRLS(theta0, cfg) for _ in range(n_envs)]
        for t in range(60):
            phi = np.stack([_regressor(rng) for _ in range(n_envs)])
            y = rng.standard_normal((n_envs, M))
            if t % 7 == 3:
                phi[t % n_envs, 5] = np.nan
            mask = rng.random(n_envs) < 0.8
            if t == 30:
                batch.reset(1)
                singles[1].reset()
            batch.update(phi, y, mask)
            for i, rls in enumerate(singles):
                if mask[i]:
                    rls.update(phi[i], y[i])
        theta = np.stack([r.theta for r in singles])
        P = np.stack([r.P for r in singles])
        assert np.abs(batch.theta - theta).max() <= 1e-9 * max(1.0, np.abs(theta).max())
        assert np.abs(batch.P - P).max() <= 1e-9 * max(1.0, np.abs(P).max())
        assert batch.steps.tolist() == [r.steps for r in singles]
        assert batch.rejected.tolist() == [r.rejected for r in singles]
        assert min(r.rejected for r in singles) >= 0 and sum(r.rejected for r in singles) > 0
        np.testing.assert_allclose(batch.trace, [r.trace for r in singles], rtol=1e-9)
