"""Asymmetric actor-critic [ASYM]: a PPO critic that sees privileged truth, an actor blind to it.

With ``privileged_critic: true`` the training env
(:class:`~residual_quad.training.ppo_vec.QuadVecEnv`) appends :data:`PRIVILEGED_NAMES` — truth
from the vector env's ``info``, never part of the observation — after the actor's feature
columns. :class:`AsymmetricActorCriticPolicy` gives the critic every column and the actor a copy
of the observation whose privileged columns are replaced by zeros (:class:`ActorColumns`, not a
product: a NaN or an infinity there cannot leak), so the actor is a function of the actor
columns alone, bit for bit. SB3's ``MlpExtractor`` takes one input size for both heads, hence
the mask rather than a slice. The policy file keeps only what the actor needs
(:class:`~residual_quad.controllers.numpy_policy.NumpyPolicy` drops the first layer's privileged
inputs, the saved normalization statistics are the actor columns'), and flies with the ``ppo``
controller.

This module imports torch and stable-baselines3: loading an asymmetric policy file imports it
(SB3 pickles the policy class by reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

#: the privileged columns, in order: payload (kg), mean wind under the gusts and the current
#: wind (world, m/s), the period's true residual acceleration (world, m/s²), rotor efficiency
PRIVILEGED_NAMES: tuple[str, ...] = (
    "payload_kg",
    *(f"mean_wind_w_{a}" for a in "xyz"),
    *(f"wind_w_{a}" for a in "xyz"),
    *(f"residual_accel_w_{a}" for a in "xyz"),
    *(f"rotor_efficiency_{k}" for k in range(4)),
)
PRIVILEGED_DIM = len(PRIVILEGED_NAMES)
#: the ``info`` keys the columns come from, with their widths
_INFO_SOURCES = (
    ("payload_kg", 1),
    ("mean_wind", 3),
    ("wind", 3),
    ("residual_accel", 3),
    ("rotor_efficiency", 4),
)


def privileged_columns(info: dict[str, Any], rows: np.ndarray) -> np.ndarray:
    """The privileged columns ``(len(rows), PRIVILEGED_DIM)`` of the vector env's batched
    ``info`` (a step's or a reset's) at ``rows``, float32 as the observation."""
    parts = [
        np.asarray(info[key], dtype=np.float64)[rows].reshape(len(rows), w)
        for key, w in _INFO_SOURCES
    ]
    return np.concatenate(parts, axis=1).astype(np.float32)


class ActorColumns(BaseFeaturesExtractor):
    """The observation with every column from ``actor_dim`` on replaced by zero (the actor's
    features extractor: its output does not depend on those columns)."""

    def __init__(self, observation_space: spaces.Box, actor_dim: int):
        super().__init__(observation_space, int(np.prod(observation_space.shape)))
        self.actor_dim = int(actor_dim)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        x = observations.flatten(1)
        zeros = torch.zeros_like(x[:, self.actor_dim :])
        return torch.cat([x[:, : self.actor_dim], zeros], dim=1)


class AsymmetricActorCriticPolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` with separate extractors: the actor's :class:`ActorColumns`
    (the first ``actor_dim`` columns), the critic's the whole observation."""

    def __init__(self, *args: Any, actor_dim: int, **kwargs: Any):
        self.actor_dim = int(actor_dim)
        kwargs["share_features_extractor"] = False
        super().__init__(*args, **kwargs)
        self.pi_features_extractor = ActorColumns(self.observation_space, self.actor_dim)
        # the optimizer was built over the parameters before the swap: neither extractor has any
        self.features_extractor = self.pi_features_extractor

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["actor_dim"] = self.actor_dim
        return data
