"""The reward terms against hand-computed values; the strict ``RewardWeights``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.reward import (
    REWARD_TERMS,
    RewardWeights,
    position_error,
    reward_terms,
    total_reward,
)


def _obs(pos, vel, omega_b):
    obs = np.zeros(OBS_DIM)
    obs[ObsLayout.pos] = pos
    obs[ObsLayout.vel] = vel
    obs[ObsLayout.omega_b] = omega_b
    return obs.tolist()


def test_position_error_is_the_euclidean_distance():
    assert position_error(_obs([1.0, 2.0, 3.0], [0] * 3, [0] * 3), [1.0, -2.0, 0.0]) == 5.0


def test_reward_terms_by_hand():
    obs = _obs([0.0, 0.0, 1.0], [1.0, 2.0, 2.0], [0.0, 3.0, 4.0])
    weights = RewardWeights(alive=1.0, pos=1.0, vel=0.1, rate=0.02, smooth=0.01)
    terms = reward_terms(
        weights, obs, [1.0, 0.0, 0.0], 0.5, [0.5, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 1.0]
    )
    assert list(terms) == list(REWARD_TERMS)
    assert terms["alive"] == 1.0
    assert terms["pos"] == -0.5  # −1 · 0.5 m
    assert terms["vel"] == pytest.approx(-0.1 * math.sqrt(8.0))  # e_v = (0, 2, 2)
    assert terms["rate"] == pytest.approx(-0.02 * 5.0)  # ‖(0, 3, 4)‖
    assert terms["smooth"] == pytest.approx(-0.01 * (0.25 + 4.0))
    total = terms["alive"] + terms["pos"] + terms["vel"] + terms["rate"] + terms["smooth"]
    assert total_reward(terms) == total


def test_reward_weights_defaults_and_overrides():
    assert RewardWeights() == RewardWeights(1.0, 1.0, 0.1, 0.02, 0.01)
    assert RewardWeights.from_spec(None) == RewardWeights()
    assert RewardWeights.from_spec({"alive": 2.0}) == RewardWeights(alive=2.0)
    weights = RewardWeights(smooth=0.0)
    assert RewardWeights.from_spec(weights) is weights


def test_reward_weights_unknown_key_lists_valid_ones():
    with pytest.raises(ValueError, match="speed") as err:
        RewardWeights.from_spec({"speed": 1.0})
    for name in REWARD_TERMS:
        assert name in str(err.value)


def test_env_reward_is_the_sum_of_its_terms(make_env):
    env = make_env(trajectory="helix", reward_weights={"alive": 2.0, "rate": 0.5})
    env.reset(seed=0)
    for _ in range(20):
        _, reward, _, _, info = env.step(np.array([0.1, -0.1, 0.1, -0.1]))
        assert reward == total_reward(info["reward_terms"])
        assert info["reward_terms"]["alive"] == 2.0
