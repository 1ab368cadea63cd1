"""The numpy forward of an SB3 actor: :class:`NumpyPolicy`, what every policy controller flies
with where the architecture is a plain MLP
(:func:`~residual_quad.controllers.policy_file.load_policy` builds it; SB3's ``predict``
otherwise). torch is never imported here: the layers are read from the loaded model's modules."""

from __future__ import annotations

from typing import Any

import numpy as np

from residual_quad.compiled import compiled
from residual_quad.controllers.anchor import SparseAnchor, anchored_inputs

_ACTIVATIONS: dict[str, Any] = {
    "Tanh": np.tanh,
    "ReLU": lambda h: np.maximum(h, 0.0),
    "Identity": lambda h: h,
}


def _einsum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with a summation order that does not depend on the batch size."""
    return np.einsum("nd,de->ne", a, b)


@compiled
def _rows_times(x, w):  # pragma: no cover - compiled
    n_rows, n_in = x.shape
    out = np.zeros((n_rows, w.shape[1]))
    for n in range(n_rows):
        o = out[n]
        for d in range(n_in):
            xd = x[n, d]
            wd = w[d]
            for h in range(wd.shape[0]):
                o[h] = o[h] + xd * wd[h]
    return out


@compiled
def _rows_times_narrow(x, w):  # pragma: no cover - compiled
    n_rows, n_in = x.shape
    out = np.empty((n_rows, w.shape[1]))
    for n in range(n_rows):
        for h in range(w.shape[1]):
            a = 0.0
            for d in range(n_in):
                a = a + x[n, d] * w[d, h]
            out[n, h] = a
    return out


#: below this many outputs a layer's product keeps each sum in a register (one per output)
_NARROW = 8


def layer_product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` for ``x`` (n, d) and ``w`` (d, h), each output summed over ``d`` in ascending
    order from zero, one multiply and one add per term (numba's IEEE arithmetic: never fused),
    compiled. That is ``np.einsum("nd,dh->nh")``'s order where it runs its elementwise loop
    (``h`` ≥ 2), and its bits where numpy's baseline has no fused multiply-add (x86-64 wheels),
    in about half its time for a policy's layers. A row's bits do not depend on the others; a
    one-output layer (``h`` = 1, where ``einsum`` sums in another order) stays with ``einsum``."""
    if w.shape[1] < 2:
        return _einsum(x, w)
    x = np.ascontiguousarray(x, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    return (_rows_times_narrow if w.shape[1] < _NARROW else _rows_times)(x, w)


#: action distributions whose deterministic action is the action net's output (gSDE's noise is
#: state-dependent, its mean is not)
_MEAN_HEADS = ("DiagGaussianDistribution", "StateDependentNoiseDistribution")


class NumpyPolicy:
    """The deterministic action of an SB3 MLP actor (``ActorCriticPolicy`` with a flat
    observation and a Gaussian action head, its asymmetric twin
    :class:`~residual_quad.training.privileged.AsymmetricActorCriticPolicy` with the privileged
    inputs dropped, or the SAC/TQC actor: latent → mean → ``tanh``), evaluated in float64 numpy.

    Why: SB3's ``predict`` costs a few hundred µs a call (tensor conversions, float32 torch),
    more than the whole vehicle step; this forward costs a few µs. Its products are
    sums in a fixed order (:func:`layer_product`, ``np.einsum``'s) that does not depend on the
    batch size, so one observation and a batch of them give bit-identical actions (a BLAS matrix
    product does not: a one-row product takes another kernel). It equals SB3's float32 forward
    to float32 rounding (``tests/controllers/test_ppo_numpy.py``).
    """

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray, Any]], squash: bool = False):
        self.layers = layers  # (W (in, out), b (out,), activation) each; the last is the mean
        self.squash = squash  # tanh of the mean (SAC/TQC's squashed Gaussian)
        for w, _, _ in layers:  # compile (or load) the layer kernels now, not in the first
            layer_product(np.zeros((1, w.shape[0])), w)  # control period (a server's clock)
        #: an anchored actor's (anchor, mean, std, clip): the mean is μ(x) − μ(x̄)
        #: (:mod:`~residual_quad.controllers.anchor`); ``None`` for a plain one
        self.anchor: tuple[SparseAnchor, np.ndarray, np.ndarray, float] | None = None

    @classmethod
    def from_sb3(cls, policy: Any) -> NumpyPolicy | None:
        """The numpy forward of ``policy``, or ``None`` where its architecture is not a plain
        MLP actor (another extractor, activation or distribution): then ``predict`` is used."""
        if hasattr(policy, "actor") and hasattr(policy.actor, "mu"):
            return cls._from_squashed(policy.actor)
        actor_dim = None
        if type(policy).__name__ == "AsymmetricActorCriticPolicy":
            if type(policy.pi_features_extractor).__name__ != "ActorColumns":
                return None
            actor_dim = int(policy.actor_dim)
        elif (
            type(policy).__name__ not in ("ActorCriticPolicy", "AnchoredActorCriticPolicy")
            or type(policy.pi_features_extractor).__name__ != "FlattenExtractor"
        ):
            return None
        if type(policy.action_dist).__name__ not in _MEAN_HEADS or getattr(
            policy, "squash_output", False
        ):
            return None
        network = cls._mlp([*policy.mlp_extractor.policy_net, policy.action_net])
        if network is not None and actor_dim is not None:  # inputs always zero: dropped
            w, b, act = network.layers[0]
            network.layers[0] = (w[:actor_dim].copy(), b, act)
        if network is not None and hasattr(policy, "anchor_m"):
            m, c, mean, std = (
                getattr(policy, k).detach().cpu().numpy().astype(np.float64)
                for k in ("anchor_m", "anchor_c", "obs_mean", "obs_std")
            )
            network.anchor = (SparseAnchor.of(m, c), mean, std, float(policy.clip_obs))
        return network

    @classmethod
    def _from_squashed(cls, actor: Any) -> NumpyPolicy | None:
        """SAC/TQC's actor: ``tanh(mu(latent_pi(x)))`` (flat extractor, no gSDE)."""
        if (
            type(actor.features_extractor).__name__ != "FlattenExtractor"
            or getattr(actor, "use_sde", False)
            or type(actor.action_dist).__name__ != "SquashedDiagGaussianDistribution"
        ):
            return None
        network = cls._mlp([*actor.latent_pi, actor.mu])
        if network is not None:
            network.squash = True
        return network

    @classmethod
    def _mlp(cls, modules: list[Any]) -> NumpyPolicy | None:
        """Linear layers and their activations as numpy layers (``None``: another module)."""
        layers: list[tuple[np.ndarray, np.ndarray, Any]] = []
        for module in modules:
            kind = type(module).__name__
            if kind == "Linear":
                w = module.weight.detach().cpu().numpy().astype(np.float64).T.copy()
                b = module.bias.detach().cpu().numpy().astype(np.float64).copy()
                layers.append((w, b, _ACTIVATIONS["Identity"]))
            elif kind in _ACTIVATIONS and layers:
                w, b, _ = layers[-1]
                layers[-1] = (w, b, _ACTIVATIONS[kind])
            else:
                return None
        return cls(layers)

    def mean(self, x: np.ndarray) -> np.ndarray:
        """The network's output (n, a) for the normalized features ``x`` (n, d), unclipped."""
        h = np.asarray(x, dtype=np.float64)
        for w, b, act in self.layers:
            h = act(layer_product(h, w) + b)
        return h

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Mean actions (n, 4), clipped to [-1, 1], of the normalized features ``x`` (n, d)."""
        if self.anchor is None:
            h = self.mean(x)
        else:  # one forward of x and x̄ stacked (each row's bits do not depend on the others)
            anchor, mean, std, clip = self.anchor
            x64 = np.asarray(x, dtype=np.float64)
            bar = np.clip(anchored_inputs(x64, anchor, mean, std, _einsum), -clip, clip)
            both = self.mean(np.concatenate((x64, bar)))
            h = both[: len(x64)] - both[len(x64) :]
        if self.squash:
            h = np.tanh(h)
        return np.clip(h, -1.0, 1.0)
