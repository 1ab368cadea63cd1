"""Training arithmetic of the residual network: gradient checks, the batch fast path, Adam."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.training.residual_net import (
    Adam,
    batch_step,
    loss_and_grad,
    normalize_targets,
)


def _flat_grad(grads: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([g.ravel() for g in grads])


def test_gradient_check_full_backward_pass(random_net):
    """Central differences over every one of the 5315 parameters: relative error < 1e-6."""
    net = random_net(1)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((9, 14)) * 2.0 + 1.0
    Y = rng.standard_normal((9, 3)) * 2.0 + np.array([0.3, -0.2, -4.0])
    _, grads = loss_and_grad(net, X, Y)
    g = _flat_grad(grads)
    fd = np.empty_like(g)
    h = 1e-5
    for i in range(net.n_params):
        old = net.flat[i]
        net.flat[i] = old + h
        lp = loss_and_grad(net, X, Y)[0]
        net.flat[i] = old - h
        lm = loss_and_grad(net, X, Y)[0]
        net.flat[i] = old
        fd[i] = (lp - lm) / (2 * h)
    rel = np.linalg.norm(fd - g) / (np.linalg.norm(fd) + np.linalg.norm(g))
    assert rel < 1e-6
    # every layer carries gradient (a dead layer would pass the norm check trivially)
    for grad in grads:
        assert np.abs(grad).max() > 1e-6


def test_mse_gradient_is_divided_by_the_element_count(random_net):
    """The analytic gradient must match the derivative of ``np.mean`` over all N·3 elements.

    Dividing by the sample count N instead (the bug [RES §4.3] describes) would make
    it exactly 3× too large; Adam would not notice, SGD would.
    """
    net = random_net(4, scale=0.1)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 14))
    Y = rng.standard_normal((40, 3))
    s = net.output_scale
    assert np.abs(net.predict(X)).max() < net.output_clip  # no clipped element

    def independent_loss() -> float:  # written without the network's loss code
        return float(np.mean(((net.predict(X) - Y) / s) ** 2))

    _, grads = loss_and_grad(net, X, Y)
    g_bias = grads[-1]  # output-layer bias: ∂loss/∂b = Σ_n ∂loss/∂z_n
    fd = np.empty(3)
    for j in range(3):
        old = net.b[-1][j]
        net.b[-1][j] = old + 1e-6
        lp = independent_loss()
        net.b[-1][j] = old - 1e-6
        lm = independent_loss()
        net.b[-1][j] = old
        fd[j] = (lp - lm) / 2e-6
    np.testing.assert_allclose(g_bias, fd, rtol=1e-6)
    # closed form: 2·Σ(ŷ − y)/(s·N·3) per output
    expected = 2.0 * (net.predict(X) - Y).sum(axis=0) / (s * X.shape[0] * 3)
    np.testing.assert_allclose(g_bias, expected, rtol=1e-10)


def test_training_fast_path_equals_reference_gradient(random_net):
    net = random_net(6)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((33, 14))
    Y = rng.standard_normal((33, 3)) * 3
    loss, grads = loss_and_grad(net, X, Y)
    buf = np.zeros_like(net.flat)
    loss_fast = batch_step(net, net.standardize(X), normalize_targets(net, Y), buf)
    assert loss_fast == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(buf, _flat_grad(grads), rtol=1e-9, atol=1e-14)


def test_output_clip_blocks_gradient():
    net = ResidualMLP(seed=0)
    net.b[-1][...] = (7.0, -7.0, 0.0)  # ×2.0 → ±14 m/s², beyond the ±10 clip
    X = np.zeros((4, 14))
    _, grads = loss_and_grad(net, X, np.zeros((4, 3)))
    assert np.all(grads[-1][:2] == 0.0)  # clipped outputs pass no gradient


def test_adam_minimizes_a_quadratic():
    x = np.array([3.0, -2.0, 0.5])
    opt = Adam(x, lr=0.05)
    for _ in range(2000):
        opt.step(2.0 * (x - np.array([1.0, 1.0, 1.0])))
    np.testing.assert_allclose(x, 1.0, atol=1e-3)
