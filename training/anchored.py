"""PPO's actor anchored at zero tracking error (``ppo.anchored: true``): the mean action is
``μ(x) − μ(x̄)`` (:mod:`residual_quad.controllers.anchor`), the exploration noise gSDE's or the
Gaussian's around it, the critic SB3's.

The policy sees ``VecNormalize``'s normalized features, so it holds the normalizer's mean and
scale as buffers (:meth:`AnchoredActorCriticPolicy.set_normalizer`); :class:`AnchorStats`
copies them at the start of each rollout, so a rollout and the update that follows it anchor
with the same statistics, and once more when training ends, so the saved policy and its
file's ``obs_norm`` agree.

This module imports torch and stable-baselines3: loading an anchored policy file imports it
(SB3 pickles the policy class by reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import (
    DiagGaussianDistribution,
    Distribution,
    StateDependentNoiseDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel

from residual_quad.controllers.anchor import SparseAnchor, anchor_map, anchored_inputs
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.policy_inputs import FeatureSpec

# the dtypes of SparseAnchor's fields as buffers: keep, rows (indices), mix, c
_SPARSE_DTYPES = (torch.float32, torch.long, torch.float32, torch.float32)


class AnchoredActorCriticPolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` whose mean action is ``μ(x) − μ(x̄)``.

    Args (beyond SB3's): ``anchor_features`` — the inputs' :class:`FeatureSpec` record with
    its ``preview_k``;
    ``anchor_action_dim`` — the action size (3); ``clip_obs`` — the normalizer's bound;
    ``anchor_mass_kg`` — the nominal mass (kg) the accelerometer is anchored with (the trackers'
    :class:`~residual_quad.controllers.base.ControlContext`'s).
    """

    def __init__(
        self,
        *args: Any,
        anchor_features: dict[str, Any],
        anchor_action_dim: int,
        clip_obs: float,
        anchor_mass_kg: float = ControlContext().airframe.mass,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.anchor_features = dict(anchor_features)
        self.anchor_action_dim = int(anchor_action_dim)
        self.clip_obs = float(clip_obs)
        self.anchor_mass_kg = float(anchor_mass_kg)
        record = self.anchor_features
        spec = FeatureSpec.from_record(record, int(record.get("preview_k", 0)))
        m, c = anchor_map(spec, self.anchor_action_dim, self.anchor_mass_kg)
        d = int(np.prod(self.observation_space.shape))
        if m.shape != (d, d):
            raise ValueError(
                f"the anchor's inputs ({m.shape[0]} values) are not the observation ({d})"
            )
        self.register_buffer("anchor_m", torch.as_tensor(m, dtype=torch.float32))
        self.register_buffer("anchor_c", torch.as_tensor(c, dtype=torch.float32))
        # what the products use: derived from M and c, so not saved, but module state that
        # moves with the policy (``.to(device)``) as the saved buffers do
        sparse = SparseAnchor.of(m, c)
        for name, value, dtype in zip(SparseAnchor._fields, sparse, _SPARSE_DTYPES, strict=True):
            self.register_buffer(f"_sparse_{name}", torch.as_tensor(value, dtype=dtype), False)
        self.register_buffer("obs_mean", torch.zeros(d))
        self.register_buffer("obs_std", torch.ones(d))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["anchor_features"] = self.anchor_features
        data["anchor_action_dim"] = self.anchor_action_dim
        data["clip_obs"] = self.clip_obs
        data["anchor_mass_kg"] = self.anchor_mass_kg
        return data

    def set_normalizer(self, mean: np.ndarray, std: np.ndarray) -> None:
        """The normalized inputs' mean and scale (``√(var + ε)``) the anchor maps through."""
        self.obs_mean.copy_(torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(np.asarray(std), dtype=torch.float32))

    def anchored(self, obs: torch.Tensor) -> torch.Tensor:
        """``x̄_n`` of a batch of normalized observations."""
        x = obs.float().flatten(1)
        sparse = SparseAnchor(*(getattr(self, f"_sparse_{k}") for k in SparseAnchor._fields))
        bar = anchored_inputs(x, sparse, self.obs_mean, self.obs_std)
        return torch.clamp(bar, -self.clip_obs, self.clip_obs)

    def _actor_mean(self, obs: torch.Tensor) -> torch.Tensor:
        features = BaseModel.extract_features(self, obs, self.pi_features_extractor)
        return self.action_net(self.mlp_extractor.forward_actor(features))

    def anchored_mean(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``μ(x) − μ(x̄)`` (before any clipping): what flies deterministically."""
        return self._actor_mean(obs) - self._actor_mean(self.anchored(obs))

    def _distribution(self, obs: torch.Tensor, latent_pi: torch.Tensor) -> Distribution:
        mean = self.action_net(latent_pi) - self._actor_mean(self.anchored(obs))
        if isinstance(self.action_dist, StateDependentNoiseDistribution):
            return self.action_dist.proba_distribution(mean, self.log_std, latent_pi)
        if isinstance(self.action_dist, DiagGaussianDistribution):
            return self.action_dist.proba_distribution(mean, self.log_std)
        raise ValueError(f"an anchored policy needs a Gaussian action, not {self.action_dist}")

    def _latents(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.extract_features(obs)
        if self.share_features_extractor:
            return self.mlp_extractor(features)
        pi_features, vf_features = features
        return (
            self.mlp_extractor.forward_actor(pi_features),
            self.mlp_extractor.forward_critic(vf_features),
        )

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        latent_pi, latent_vf = self._latents(obs)
        distribution = self._distribution(obs, latent_pi)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        actions = actions.reshape((-1, *self.action_space.shape))  # type: ignore[misc]
        return actions, self.value_net(latent_vf), log_prob

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        latent_pi, latent_vf = self._latents(obs)
        distribution = self._distribution(obs, latent_pi)
        log_prob = distribution.log_prob(actions)
        return self.value_net(latent_vf), log_prob, distribution.entropy()

    def get_distribution(self, obs: torch.Tensor) -> Distribution:
        features = BaseModel.extract_features(self, obs, self.pi_features_extractor)
        return self._distribution(obs, self.mlp_extractor.forward_actor(features))


class AnchorStats(BaseCallback):
    """Copies the training env's ``VecNormalize`` statistics into an anchored policy at the
    start of each rollout and when training ends (identity statistics without one)."""

    def _sync(self) -> None:
        policy = self.model.policy
        if not isinstance(policy, AnchoredActorCriticPolicy):
            return
        norm = self.model.get_vec_normalize_env()
        d = policy.obs_mean.shape[0]
        if norm is None or not norm.norm_obs:
            policy.set_normalizer(np.zeros(d), np.ones(d))
            return
        rms = norm.obs_rms
        policy.set_normalizer(rms.mean[:d], np.sqrt(rms.var[:d] + norm.epsilon))

    def _on_training_start(self) -> None:
        self._sync()

    def _on_rollout_start(self) -> None:
        self._sync()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self._sync()
