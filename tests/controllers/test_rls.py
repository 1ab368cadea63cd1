"""RLS on the last layer: agreement with the textbook update, identification, safeguards."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers.rls import LastLayerRLS, RLSConfig, reference_update


def _regressor(rng: np.random.Generator, n: int = 65) -> np.ndarray:
    """A tanh-layer-like regressor with the trailing bias 1."""
    return np.append(np.tanh(rng.standard_normal(n - 1)), 1.0)


def test_matches_full_matrix_reference_with_cap_and_leak():
    rng = np.random.default_rng(0)
    theta0 = rng.standard_normal((65, 3))
    cfg = RLSConfig(p0=0.05, forgetting=0.97, trace_cap=4.0, warmup_steps=0, leak=1e-3)
    rls = LastLayerRLS(theta0, cfg)
    P, theta = cfg.p0 * np.eye(65), theta0.copy()
    fixed = _regressor(rng)
    for k in range(3000):
        phi = fixed if k % 3 == 0 else _regressor(rng)  # mixes rich and repeated excitation
        y = rng.standard_normal(3)
        rls.update(phi, y)
        P, theta = reference_update(P, theta, phi, y, cfg, theta0)
    assert rls.cap_hits > 0  # the cap was exercised
    np.testing.assert_allclose(rls.P, P, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rls.theta, theta, rtol=1e-9, atol=1e-10)
    assert rls.trace == pytest.approx(np.trace(P), rel=1e-9)


def test_recovers_known_last_layer_weights():
    rng = np.random.default_rng(1)
    theta_true = rng.standard_normal((65, 3))
    theta0 = theta_true + 0.5 * rng.standard_normal((65, 3))  # an imperfect offline layer
    rls = LastLayerRLS(theta0, RLSConfig(p0=1.0, forgetting=1.0, trace_cap=1e6, warmup_steps=0))
    for _ in range(2000):
        phi = _regressor(rng)
        rls.update(phi, theta_true.T @ phi + 1e-3 * rng.standard_normal(3))
    err0 = np.linalg.norm(theta0 - theta_true)
    err = np.linalg.norm(rls.theta - theta_true)
    assert err < 1e-2 * err0
    # predictions on fresh regressors (outputs of O(3)) are accurate to a few 1e-3
    phis = np.array([_regressor(rng) for _ in range(200)])
    assert np.sqrt(np.mean((phis @ rls.theta - phis @ theta_true) ** 2)) < 5e-3


def test_trace_cap_scales_under_single_direction_excitation():
    rng = np.random.default_rng(2)
    cap = 5.0
    rls = LastLayerRLS(np.zeros((65, 3)), RLSConfig(p0=0.01, forgetting=0.98, trace_cap=cap))
    phi = _regressor(rng)  # the same direction forever: hover
    u = phi / np.linalg.norm(phi)
    for _ in range(3000):
        rls.update(phi, np.array([0.1, -0.2, 0.3]))
        assert rls.trace <= cap * (1 + 1e-12)
    assert rls.cap_hits > 2000  # without the cap tr P would grow like 0.98⁻ᵏ
    P = rls.P
    np.testing.assert_array_equal(P, P.T)  # symmetric by construction
    eig = np.linalg.eigvalsh(P)
    assert eig.min() > 0
    # scaled, not reset: the excited direction stays far more certain than the others
    assert u @ P @ u < 1e-3 * eig.max()
    assert not np.allclose(P, P[0, 0] * np.eye(65))


def test_warmup_identifies_without_changing_applied_weights():
    rng = np.random.default_rng(3)
    theta0 = rng.standard_normal((65, 3))
    rls = LastLayerRLS(theta0, RLSConfig(p0=0.1, warmup_steps=100))
    snapshot = theta0.copy()
    for _ in range(100):  # 100 identify-only updates: every prediction meanwhile uses θ₀
        assert not rls.warmup_done
        assert np.array_equal(rls.applied, snapshot)
        rls.update(_regressor(rng), rng.standard_normal(3))
        assert not np.array_equal(rls.theta, snapshot)  # ... while it identifies
    assert rls.warmup_done
    assert np.array_equal(rls.applied, rls.theta) and not np.array_equal(rls.applied, snapshot)


def test_leak_pulls_toward_the_offline_layer():
    theta0 = np.ones((65, 3))
    leak = 0.01
    rls = LastLayerRLS(theta0, RLSConfig(leak=leak, warmup_steps=0))
    rls.theta[...] = 3.0
    zero = np.zeros(65)  # no information: only the leak acts
    for _ in range(100):
        rls.update(zero, np.zeros(3))
    np.testing.assert_allclose(rls.theta - theta0, 2.0 * (1 - leak) ** 100, rtol=1e-12)


def test_reset_and_private_offline_copy():
    rng = np.random.default_rng(4)
    theta0 = rng.standard_normal((65, 3))
    given = theta0.copy()
    rls = LastLayerRLS(given, RLSConfig(p0=0.02))
    given[...] = 0.0  # the caller's array is not the RLS's
    with pytest.raises(ValueError):
        rls.theta0[0, 0] = 1.0  # read-only
    for _ in range(50):
        rls.update(_regressor(rng), rng.standard_normal(3))
    rls.reset()
    assert np.array_equal(rls.theta, theta0) and np.array_equal(rls.theta0, theta0)
    np.testing.assert_array_equal(rls.P, 0.02 * np.eye(65))
    assert rls.steps == 0 and rls.cap_hits == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"p0": 0.0},
        {"p0": float("nan")},
        {"p0": float("inf")},
        {"p0": 2000.0},  # above the trace cap: the first update would only scale it down
        {"forgetting": 0.0},
        {"forgetting": 0.4},  # below 0.5: a memory under two samples
        {"forgetting": 1.01},
        {"forgetting": float("nan")},
        {"trace_cap": -1.0},
        {"trace_cap": float("inf")},  # tr P could grow like λ⁻ᵏ until it overflows
        {"trace_cap": float("nan")},
        {"trace_cap": 1e101},
        {"warmup_steps": -1},
        {"warmup_steps": 2.5},
        {"warmup_steps": float("nan")},
        {"warmup_steps": "10"},
        {"leak": 1.0},
        {"leak": float("nan")},
        {"leak": "0.1"},
        {"p0": True},
    ],
)
def test_config_validation(kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=f"rls.{name}"):
        RLSConfig(**kwargs)


def test_the_accepted_extremes_cannot_overflow():
    """λ = 0.5 with the largest cap: single-direction excitation grows the unexcited directions
    by 1/λ per step (without a cap tr P overflows after 1024 steps); the cap holds it."""
    cfg = RLSConfig(p0=1e100, forgetting=0.5, trace_cap=1e100, warmup_steps=0)
    rls = LastLayerRLS(np.zeros((65, 3)), cfg)
    phi = _regressor(np.random.default_rng(5))
    for _ in range(2000):
        rls.update(phi, np.array([0.1, -0.2, 0.3]))
    assert np.isfinite(rls.trace) and rls.trace <= cfg.trace_cap * (1 + 1e-12)
    assert np.all(np.isfinite(rls.P)) and np.all(np.isfinite(rls.theta))
    assert rls.rejected == 0


@pytest.mark.parametrize("where", ["phi", "y"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300])
def test_a_non_finite_sample_changes_nothing_and_is_counted(where, bad):
    """One NaN/inf (or overflowing) sample used to make θ and P NaN for good (``tr P > cap`` is
    False for NaN, so the cap never acted); now it is skipped whole."""
    rng = np.random.default_rng(6)
    rls = LastLayerRLS(rng.standard_normal((65, 3)), RLSConfig(warmup_steps=0))
    twin = LastLayerRLS(rls.theta0, RLSConfig(warmup_steps=0))
    for k in range(200):
        phi, y = _regressor(rng), rng.standard_normal(3)
        twin.update(phi, y)
        rls.update(phi, y)
        if k == 100:
            phi, y = phi.copy(), y.copy()
            (phi if where == "phi" else y)[7 % (65 if where == "phi" else 3)] = bad
            rls.update(phi, y)
    assert rls.rejected == 1 and twin.rejected == 0
    assert rls.steps == twin.steps == 200
    np.testing.assert_array_equal(rls.theta, twin.theta)
    np.testing.assert_array_equal(rls.P, twin.P)
    rls.reset()
    assert rls.rejected == 0
