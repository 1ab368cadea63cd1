"""Shared fixtures: headless rendering and a fresh env factory."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402

import residual_quad  # noqa: E402,F401  (registers ResidualQuad-v0)


@pytest.fixture
def make_env():
    """Factory for unwrapped-checker envs, closed after the test."""
    envs = []

    def _make(**kwargs):
        env = gym.make("ResidualQuad-v0", **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()
