"""Gymnasium registration of ``ResidualQuad-v0`` (called by ``import residual_quad``).

The spec's ``max_episode_steps`` is the default episode's length (20 s at 100 Hz: 2000 steps), so
tools that read it (``gym.spec(...)``, RL libraries) see the truth. The environment truncates
itself after ``episode_s`` anyway; ``gym.make`` wraps it in a ``TimeLimit`` of the spec's length,
which would cut a longer ``episode_s`` short, so a :class:`MatchEpisodeLength` wrapper (a
registered additional wrapper) sets that ``TimeLimit`` to the environment's own length when it was
left at the registered default. A ``max_episode_steps`` other than the default given to
``gym.make`` is kept (the episode then ends at the shorter of the two).
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec
from gymnasium.wrappers import TimeLimit

ENV_ID = "ResidualQuad-v0"

REMOTE_ENV_ID = "ResidualQuadRemote-v0"
"""The client of a simulation server (``rquad serve``): :mod:`residual_quad.remote.client`."""

DEFAULT_MAX_EPISODE_STEPS = 2000
"""Steps of the default episode: ``episode_s = 20`` s at ``control_hz = 100`` Hz."""


class MatchEpisodeLength(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Sets the ``TimeLimit`` below it to the environment's own episode length (``max_steps``)
    when that limit is the registered default, so a custom ``episode_s`` is not cut at 2000."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        steps = getattr(env.unwrapped, "max_steps", None)
        inner = env
        while isinstance(inner, gym.Wrapper):
            if isinstance(inner, TimeLimit):
                if steps is not None and inner._max_episode_steps == DEFAULT_MAX_EPISODE_STEPS:
                    inner._max_episode_steps = steps
                    inner._cached_spec = None  # its spec reports the new length
                break
            inner = inner.env


def register_envs() -> None:
    """Register the environment once; importing the package twice is harmless."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="residual_quad.envs.residual_quad_env:ResidualQuadEnv",
            disable_env_checker=False,
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
            additional_wrappers=(
                WrapperSpec(
                    name="MatchEpisodeLength",
                    entry_point="residual_quad.envs.registration:MatchEpisodeLength",
                    kwargs={},
                ),
            ),
        )
    if REMOTE_ENV_ID not in gym.registry:  # its module needs the server extra only when made
        gym.register(
            id=REMOTE_ENV_ID,
            entry_point="residual_quad.remote.client:ResidualQuadRemoteEnv",
            disable_env_checker=True,
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
            additional_wrappers=(
                WrapperSpec(
                    name="MatchEpisodeLength",
                    entry_point="residual_quad.envs.registration:MatchEpisodeLength",
                    kwargs={},
                ),
            ),
        )
