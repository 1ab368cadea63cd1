"""Gymnasium registration of ``ResidualQuad-v0`` (called by ``import residual_quad``).

``gym.make("ResidualQuad-v0", ...)`` builds :class:`~residual_quad.envs.residual_quad_env.
ResidualQuadEnv`; ``gym.make_vec("ResidualQuad-v0", num_envs=N, ...)`` builds the batched
:class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv` (the registered vector entry
point, Gymnasium's default vectorization mode for this id; ``vectorization_mode="sync"`` or
``"async"`` still give Gymnasium's own wrappers of N single envs).

The spec's ``max_episode_steps`` is the default episode's length (20 s at 100 Hz: 2000 steps), so
tools that read it see the truth. As for every Gymnasium env it is a limit on top of the env's own
end: an episode lasts ``min(episode_s · control_hz, max_episode_steps)`` steps. A longer
``episode_s`` therefore needs ``max_episode_steps`` as well —
``gym.make(ENV_ID, episode_s=30, max_episode_steps=3000)`` — and the ``reset`` after an episode
cut at the registered default warns (the env cannot see the ``TimeLimit`` around it, but an
episode ended exactly there by a reset is that limit). (The first version moved the limit with
``episode_s`` through an additional wrapper; Gymnasium refuses a vector entry point on a spec
with additional wrappers, so the standard semantics won.)
"""

from __future__ import annotations

import gymnasium as gym

ENV_ID = "ResidualQuad-v0"

REMOTE_ENV_ID = "ResidualQuadRemote-v0"
"""The client of a simulation server (``rquad serve``): :mod:`residual_quad.remote.client`."""

DEFAULT_MAX_EPISODE_STEPS = 2000
"""Steps of the default episode: ``episode_s = 20`` s at ``control_hz = 100`` Hz."""


def time_limit_warning(max_steps: int, limit: int | None, episode_s: float) -> str | None:
    """The warning for an episode of ``max_steps`` steps ended after ``limit`` steps by
    Gymnasium's limit, or ``None``: only the registered default cutting a longer ``episode_s`` is
    flagged (a different explicit limit is the caller's choice)."""
    if limit is None or limit != DEFAULT_MAX_EPISODE_STEPS or max_steps <= limit:
        return None
    return (
        f"episode_s={episode_s:g} s is {max_steps} control steps, but the registered "
        f"max_episode_steps ({limit}) ends every episode after {limit} steps; pass "
        f"max_episode_steps={max_steps} to gym.make / gym.make_vec to fly the whole episode"
    )


def register_envs() -> None:
    """Register the environment once; importing the package twice is harmless."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="residual_quad.envs.residual_quad_env:ResidualQuadEnv",
            vector_entry_point="residual_quad.envs.vector_env:ResidualQuadVectorEnv",
            disable_env_checker=False,
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
        )
    if REMOTE_ENV_ID not in gym.registry:  # its module needs the server extra only when made
        gym.register(
            id=REMOTE_ENV_ID,
            entry_point="residual_quad.remote.client:ResidualQuadRemoteEnv",
            disable_env_checker=True,
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
        )
