"""Gymnasium registration of ``ResidualQuad-v0`` (called by ``import residual_quad``)."""

from __future__ import annotations

import gymnasium as gym

ENV_ID = "ResidualQuad-v0"


def register_envs() -> None:
    """Register the environment once; importing the package twice is harmless."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="residual_quad.envs.residual_quad_env:ResidualQuadEnv",
            disable_env_checker=False,
        )
