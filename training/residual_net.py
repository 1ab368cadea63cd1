"""Training arithmetic of the residual network: back-propagation, the batch fast path and Adam.

Functions on a :class:`~residual_quad.controllers.residual.network.ResidualMLP` (which holds only
what inference needs): :func:`loss_and_grad` is the reference loss and hand-written backward pass
[RES §4.3], :func:`batch_step` the cache-free float32-friendly path the training loop runs, and
:class:`Adam` updates the network's flat parameter vector in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from residual_quad.controllers.residual.network import Activations, ResidualMLP


@dataclass
class ForwardCache:
    """What :func:`backward` needs from :func:`forward`."""

    act: Activations  # inputs, hidden activations and outputs of the batch
    mask: np.ndarray  # 1 where the output clip is inactive


def _tanh_inplace(a: np.ndarray) -> np.ndarray:
    """``tanh`` as ``2/(1 + e^{−2a}) − 1`` in place: same values to rounding, about twice as fast
    as ``np.tanh`` on training batches (``exp`` is the better-vectorized ufunc)."""
    with np.errstate(over="ignore"):  # e^{−2a} = inf for a ≪ 0 gives exactly −1
        np.multiply(a, -2.0, out=a)
        np.exp(a, out=a)
    np.add(a, 1.0, out=a)
    np.divide(2.0, a, out=a)
    np.subtract(a, 1.0, out=a)
    return a


def normalize_targets(net: ResidualMLP, Y: np.ndarray) -> np.ndarray:
    """Targets (m/s²) → units of the raw linear output, ``(Y − y_mean)/s`` (network dtype)."""
    return ((Y - net.y_mean) / net.output_scale).astype(net.dtype)


def forward(net: ResidualMLP, X: np.ndarray) -> tuple[np.ndarray, ForwardCache]:
    """Predictions (N, 3) in m/s² for raw features ``X`` (N, 14), and the cache."""
    act = net.activations(X)
    c = net.output_clip
    mask = (act.y > -c) & (act.y < c)
    return np.clip(act.y, -c, c), ForwardCache(act, mask)


def backward(net: ResidualMLP, cache: ForwardCache, dY: np.ndarray) -> list[np.ndarray]:
    """Gradients (order of ``net.params``) of a loss with ``∂loss/∂Ŷ = dY`` (m/s² units)."""
    D = (dY * cache.mask * net.output_scale).astype(net.dtype)  # ∂/∂z
    n = len(net.W)
    gW: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    gb: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    for i in range(n - 1, -1, -1):
        prev = cache.act.x_n if i == 0 else cache.act.hidden[i - 1]
        gW[i] = prev.T @ D
        gb[i] = D.sum(axis=0)
        if i > 0:
            D = (D @ net.W[i].T) * (1.0 - prev * prev)  # tanh' = 1 − tanh²
    return [g for pair in zip(gW, gb, strict=True) for g in pair]


def loss_and_grad(net: ResidualMLP, X: np.ndarray, Y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """MSE in standardized target units and its gradient, for raw features and targets (m/s²).

    ``loss = mean(((Ŷ − Y)/s)²)`` over all N·3 elements, so ``∂loss/∂Ŷ = 2(Ŷ − Y)/(s²·N·3)``:
    the gradient is divided by the *element* count, exactly as ``np.mean`` averages (dividing
    by N alone would make it 3× too large — invisible with Adam, wrong with SGD) [RES §4.3].
    """
    Yhat, cache = forward(net, X)
    s2 = net.output_scale**2
    err = Yhat - Y
    loss = float(np.mean(err * err)) / s2
    dY = err * (2.0 / (s2 * err.size))
    return loss, backward(net, cache, dY)


def batch_step(net: ResidualMLP, Xn: np.ndarray, T: np.ndarray, grad: np.ndarray) -> float:
    """Training fast path: loss and gradient for standardized inputs ``Xn`` and normalized
    targets ``T`` (see ``net.standardize`` and :func:`normalize_targets`).

    The same loss as :func:`loss_and_grad` (so the same ÷(N·3) gradient), written into the
    flat buffer ``grad`` (shape of ``net.flat``) without building a cache.
    """
    gW, gb = net.param_views(grad)
    hs = [Xn]
    for W, b in zip(net.W[:-1], net.b[:-1], strict=True):
        a = hs[-1] @ W
        a += b
        hs.append(_tanh_inplace(a))
    z = hs[-1] @ net.W[-1]
    z += net.b[-1]
    # the output clip in normalized units, per axis
    lo = (-net.output_clip - net.y_mean) / net.output_scale
    hi = (net.output_clip - net.y_mean) / net.output_scale
    err = np.clip(z, lo.astype(net.dtype), hi.astype(net.dtype)) - T
    loss = float(np.mean(err * err))
    D = err * ((z > lo) & (z < hi))
    D *= 2.0 / err.size
    for i in range(len(net.W) - 1, -1, -1):
        prev = hs[i]
        np.dot(prev.T, D, out=gW[i])
        np.sum(D, axis=0, out=gb[i])
        if i > 0:
            D = D @ net.W[i].T
            D *= 1.0 - prev * prev
    return loss


class Adam:
    """Adam (Kingma & Ba 2015) updating one flat parameter vector in place."""

    def __init__(
        self,
        params: np.ndarray,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.params = params
        self.lr = float(lr)
        self.b1, self.b2 = betas
        self.eps = eps
        self.m = np.zeros_like(params)
        self.v = np.zeros_like(params)
        self._tmp = np.zeros_like(params)
        self.t = 0

    def step(self, grad: np.ndarray) -> None:
        """One update with gradient ``grad`` (shape of the parameters)."""
        self.t += 1
        b1, b2, m, v, tmp = self.b1, self.b2, self.m, self.v, self._tmp
        step = self.lr * math.sqrt(1.0 - b2**self.t) / (1.0 - b1**self.t)
        m *= b1
        np.multiply(grad, 1.0 - b1, out=tmp)
        m += tmp
        v *= b2
        np.multiply(grad, grad, out=tmp)
        tmp *= 1.0 - b2
        v += tmp
        np.sqrt(v, out=tmp)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= step
        self.params -= tmp
