"""Training episodes of mixed lengths (``episode_lengths``): each episode's length is drawn from
the list by a seeded generator and the episode ends there as a time limit, so PPO bootstraps it;
bad lists are refused before anything is built."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.training.ppo_config import PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_vec import QuadVecEnv, ScenarioSampler  # noqa: E402

SAMPLER = ScenarioSampler(["none", "heavy"], ["calm", "windy"], ["hover", "helix"])


def _ends(lengths, seed: int = 0, decisions: int = 60, n: int = 3, repeat: int = 2):
    """Each env's episode lengths (control periods) and whether each end was a time limit."""
    venv = QuadVecEnv(
        n, SAMPLER, action_repeat=repeat, nthread=1, scenario_seed=seed,
        action_mode="ctbr", episode_s=1.0, episode_lengths=lengths,
    )  # fmt: skip
    ends: list[list[tuple[int, bool]]] = [[] for _ in range(n)]
    flown = np.zeros(n, dtype=np.int64)
    try:
        venv.seed(seed)
        venv.reset()
        hover = np.zeros((n, 4), dtype=np.float32)  # ctbr zero: the hover collective
        for _ in range(decisions):
            *_, dones, infos = venv.step(hover)
            for i, info in enumerate(infos):
                flown[i] += info["control_steps"]
                if dones[i]:
                    ends[i].append((int(flown[i]), bool(info["TimeLimit.truncated"])))
                    assert "terminal_observation" in info
                    flown[i] = 0
    finally:
        venv.close()
    return ends


def test_every_episode_ends_at_its_length_as_a_time_limit():
    """Known answer: one length of 0.2 s (20 control periods at 100 Hz): every episode of
    every env ends after exactly 20 periods (10 decisions), truncated, not terminated."""
    ends = _ends([0.2])
    for env_ends in ends:
        assert len(env_ends) == 6 and all(e == (20, True) for e in env_ends)


def test_lengths_are_drawn_from_the_list_by_a_seeded_generator():
    lengths = [0.1, 0.3]  # 10 and 30 control periods
    first, again = _ends(lengths, seed=4), _ends(lengths, seed=4)
    assert first == again  # same seed, same lengths
    drawn = {steps for env_ends in first for steps, _ in env_ends}
    assert drawn == {10, 30}  # both drawn; nothing else
    assert _ends(lengths, seed=5) != first  # another seed, other draws


def test_without_lengths_an_episode_runs_to_episode_s():
    ends = _ends(None, decisions=30)  # 60 periods of a 100-period episode: no end yet
    assert ends == [[], [], []]


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0], [25.0], [float("nan")], ["5"], [True], 5.0])
def test_bad_lengths_are_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=r"episode_lengths must be null or a non-empty list"):
        PPOTrainConfig(episode_s=20.0, episode_lengths=bad)


def test_a_length_below_one_control_period_is_refused_by_the_adapter():
    with pytest.raises(ValueError, match="episode_lengths entries must be in"):
        QuadVecEnv(
            1, SAMPLER, nthread=1, action_mode="ctbr", episode_s=1.0, episode_lengths=[0.001]
        )
