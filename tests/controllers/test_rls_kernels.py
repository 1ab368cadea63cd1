"""The compiled covariance updates of the batched RLS equal the numpy formulas they replace,
bit for bit (``controllers/rls_kernels.py``): same operations, same order, IEEE math."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.rls_kernels import efra_covariance, rank1_downdate


def _spd(rng: np.random.Generator, n_envs: int, p: int) -> np.ndarray:
    A = rng.standard_normal((n_envs, p, p))
    return A @ A.transpose(0, 2, 1) / p


def _numpy_efra(P, rows, g, k, lam, delta, beta):
    """The EFRA step of the rows as whole-batch numpy expressions (the reference)."""
    Pr = P[rows]
    gg = g[:, :, None] * g[:, None, :]
    P_new = (Pr - k[:, None, None] * gg) / lam
    P_new -= delta * (Pr @ Pr)
    diag = np.arange(P.shape[1])
    P_new[:, diag, diag] += beta
    out = P.copy()
    out[rows] = 0.5 * (P_new + P_new.transpose(0, 2, 1))
    return out


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_envs=st.integers(1, 9),
    p=st.integers(1, 12),
    zeros=st.booleans(),
    scale=st.sampled_from([1e-300, 1e-8, 1.0, 1e8, 1e154]),
)
def test_efra_kernel_equals_the_numpy_formula_bit_for_bit(seed, n_envs, p, zeros, scale):
    """Any rows (all in order, a subset, one), signed zeros in ``Pφ`` (ReLU features), scales
    from subnormal products to overflow: the same bits, infinities and NaNs included."""
    rng = np.random.default_rng(seed)
    P = _spd(rng, n_envs, p) * scale
    g = rng.standard_normal((n_envs, p)) * np.sqrt(scale)
    if zeros:
        g[rng.random(g.shape) < 0.3] = -0.0
    k = rng.random(n_envs)
    lam, delta, beta = 0.99, 2e-3, 1e-4
    for rows in (np.arange(n_envs), np.flatnonzero(rng.random(n_envs) < 0.5)):
        got = P.copy()
        Pr = got[rows]
        with np.errstate(all="ignore"):
            want = _numpy_efra(P, rows, g[rows], k[rows], lam, delta, beta)
            P2 = Pr @ Pr
            efra_covariance(got, rows, P2, g[rows], k[rows], lam, delta, beta)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))  # bits, -0.0 and NaN


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_envs=st.integers(1, 9), p=st.integers(1, 12))
def test_rank1_kernel_equals_the_numpy_formula_bit_for_bit(seed, n_envs, p):
    rng = np.random.default_rng(seed)
    Pt = _spd(rng, n_envs, p)
    g = rng.standard_normal((n_envs, p))
    g[rng.random(g.shape) < 0.2] = -0.0
    gc = rng.standard_normal(n_envs)[:, None] * g
    want = Pt - gc[:, :, None] * g[:, None, :]
    rank1_downdate(Pt, gc, g)
    assert np.array_equal(Pt.view(np.int64), want.view(np.int64))


def test_the_batched_efra_update_is_independent_of_the_block():
    """Blocks of rows are a cost choice: a batch larger than a block (and a masked one) ends
    with the bits of the same regressions flown one block at a time."""
    from residual_quad.controllers.rls import RLSConfig, RLSLaw

    rng = np.random.default_rng(3)
    theta0 = rng.standard_normal((65, 3)) * 0.1
    law = RLSLaw(theta0, RLSConfig(covariance="efra", forgetting=0.995))
    big = law.init_state(37)
    parts = [law.init_state(n) for n in (16, 16, 5)]
    for _ in range(30):
        phi = np.maximum(rng.standard_normal((37, 65)), 0.0)  # ReLU-like: exact zeros
        y = rng.standard_normal((37, 3))
        mask = rng.random(37) < 0.8
        big, _ = law.update(big, phi, y, mask)
        for j, (a, b) in enumerate(((0, 16), (16, 32), (32, 37))):
            parts[j], _ = law.update(parts[j], phi[a:b], y[a:b], mask[a:b])
    Pt = np.concatenate([s.Pt for s in parts])
    theta = np.concatenate([s.theta for s in parts])
    assert np.array_equal(big.Pt, Pt) and np.array_equal(big.theta, theta)
