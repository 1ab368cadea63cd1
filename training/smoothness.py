"""CAPS spatial smoothness for PPO [CAPS]: a penalty on how much the policy's mean action moves
when its input moves a little.

A policy that adds to a tracker (``ppo_res``) closes a second feedback loop around the plant; a
steep policy is a high gain in that loop, and in calm air ours rings at 2–4 Hz through the
position and velocity errors (docs/ppo.md, "ppo_res"). The reward's action-smoothness cost sees
only the actions the rollouts took; CAPS's spatial term acts on the network itself:

    L_S = λ_S · mean ‖μ(s) − μ(s + σ·ε)‖²,   ε ~ N(0, I)

with ``μ`` the actor's mean action (the deterministic action that flies), ``s`` the minibatch's
observations as the network sees them (after ``VecNormalize``, so ``σ`` is in units of each
feature's standard deviation) and one fresh ``ε`` per sample from torch's generator (SB3 seeds
it with the run's seed).

:class:`SmoothPPO` is SB3's ``PPO`` whose every minibatch step descends ``L_PPO + L_S``: the
policy hands each minibatch's observations to :meth:`SmoothPPO._add_smoothness_gradient`, an
optimizer step pre-hook that adds ``∇L_S`` to the gradients SB3's loss left before Adam steps.
The one difference from one summed loss: SB3 clips the PPO gradient's norm (``max_grad_norm``)
before the hook, so ``∇L_S`` is not clipped. With ``λ_S = 0`` nothing is added and the updates
are SB3's, bit for bit (tested).

This module imports torch and stable-baselines3; :func:`~residual_quad.training.ppo_model.
new_model` imports it only for a config with ``ppo.spatial_smoothness > 0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO


def mean_action(policy: Any, obs: torch.Tensor) -> torch.Tensor:
    """The actor's mean action ``μ(obs)`` (before any squashing or clipping): what
    ``predict(..., deterministic=True)`` flies for a Gaussian or gSDE policy (an anchored
    policy's own, ``μ(x) − μ(x̄)``)."""
    if hasattr(policy, "anchored_mean"):
        return policy.anchored_mean(obs)
    features = policy.extract_features(obs, policy.pi_features_extractor)
    if isinstance(features, tuple):  # a policy with separate extractors returns both
        features = features[0]
    return policy.action_net(policy.mlp_extractor.forward_actor(features))


def spatial_smoothness_loss(policy: Any, obs: torch.Tensor, sigma: float) -> torch.Tensor:
    """``mean ‖μ(obs) − μ(obs + σ·ε)‖²`` over the batch, one ``ε ~ N(0, I)`` per row [CAPS]."""
    noisy = obs + sigma * torch.randn_like(obs)
    return (mean_action(policy, obs) - mean_action(policy, noisy)).pow(2).sum(dim=1).mean()


class SmoothPPO(PPO):
    """SB3 ``PPO`` with CAPS's spatial smoothness term (see the module docstring).

    ``spatial_smoothness`` is ``λ_S`` (≥ 0), ``smoothness_sigma`` is ``σ`` (> 0, in normalized
    observation units). Both are saved with the model and come back with ``SmoothPPO.load``,
    which a resumed run uses; plain ``PPO.load`` also loads the file (for flying it).
    """

    def __init__(
        self,
        *args: Any,
        spatial_smoothness: float = 0.0,
        smoothness_sigma: float = 0.1,
        **kwargs: Any,
    ):
        self.spatial_smoothness = float(spatial_smoothness)
        self.smoothness_sigma = float(smoothness_sigma)
        self._minibatch_obs: torch.Tensor | None = None
        self._smoothness_losses: list[float] = []
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        self._attach()

    def _attach(self) -> None:
        """Keep each minibatch's observations on their way into the loss and add ``∇L_S`` at
        every optimizer step (``_setup_model`` runs again on ``load``, so does this)."""
        policy = self.policy
        evaluate = policy.evaluate_actions  # the class's method: every load builds a new policy

        def evaluate_actions(obs: torch.Tensor, actions: torch.Tensor) -> Any:
            self._minibatch_obs = obs  # SB3's train hands every minibatch here first
            return evaluate(obs, actions)

        policy.evaluate_actions = evaluate_actions
        policy.optimizer.register_step_pre_hook(self._add_smoothness_gradient)

    def _add_smoothness_gradient(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Optimizer pre-step hook: add ``∇(λ_S·L_S)`` of the current minibatch."""
        obs, self._minibatch_obs = self._minibatch_obs, None
        if obs is None or self.spatial_smoothness <= 0:
            return
        loss = self.spatial_smoothness * spatial_smoothness_loss(
            self.policy, obs, self.smoothness_sigma
        )
        loss.backward()
        self._smoothness_losses.append(float(loss.detach()))

    def train(self) -> None:
        self._smoothness_losses = []
        super().train()
        if self._smoothness_losses:
            self.logger.record(
                "train/spatial_smoothness_loss", float(np.mean(self._smoothness_losses))
            )

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_minibatch_obs", "_smoothness_losses"]
