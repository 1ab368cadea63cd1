"""The learning rate's polish (training/schedule.py): known answers, its config checks, and a
learner that ends at the polish's rate."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from residual_quad.training.schedule import PolishedSchedule, polished
from tests.training.test_smoothness import _config  # a small PPO config of 8 envs × 64 steps


def test_known_answers() -> None:
    s = PolishedSchedule(3e-4, 3e-5, 3e-6, 1 / 6)
    assert s(1.0) == 3e-4  # the start
    assert math.isclose(s(1 / 6), 3e-5, rel_tol=1e-12)  # the knee: the recipe's end rate
    assert math.isclose(s(0.0), 3e-6, rel_tol=1e-12)  # the polish's end
    assert math.isclose(s(1 / 12), 1.65e-5, rel_tol=1e-12)  # half way through the polish
    # before the knee: the linear decay to lr_final over the first 5/6 of the budget
    assert math.isclose(s(1 - 2.5 / 6), 3e-4 + (3e-5 - 3e-4) * 0.5, rel_tol=1e-12)


@given(
    st.floats(1e-6, 1e-2),
    st.floats(0.01, 1.0),
    st.floats(0.01, 1.0),
    st.floats(0.01, 0.99),
    st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20),
)
def test_falls_between_its_ends(start, f_end, f_final, polish, progress) -> None:
    end = start * f_end
    final = end * f_final
    s = PolishedSchedule(start, end, final, polish)
    rates = [s(p) for p in sorted(progress, reverse=True)]  # progress_remaining 1 → 0
    assert all(final * (1 - 1e-12) <= r <= start * (1 + 1e-12) for r in rates)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(rates, rates[1:], strict=False))


def test_off_by_default() -> None:
    cfg = _config()
    assert polished(cfg.ppo, cfg.total_steps) is None
    s = polished(_config(polish_steps=256, polish_lr=1e-5).ppo, 1024)
    assert s is not None and s.polish == 0.25 and (s.end, s.final) == (1e-4, 1e-5)


@pytest.mark.parametrize(
    ("ppo", "words"),
    [
        ({"polish_steps": -1}, "polish_steps must be an integer"),
        ({"polish_steps": 1024, "polish_lr": 1e-5}, "polish_steps must be an integer"),
        ({"polish_steps": 256.0, "polish_lr": 1e-5}, "polish_steps must be an integer"),
        ({"polish_steps": True, "polish_lr": 1e-5}, "polish_steps must be an integer"),
        ({"polish_lr": 1e-5}, "polish_steps is 0"),
        ({"polish_steps": 256}, "polish_lr must be a number in (0, lr_final"),
        ({"polish_steps": 256, "polish_lr": 0.0}, "polish_lr must be a number"),
        ({"polish_steps": 256, "polish_lr": 2e-4}, "polish_lr must be a number"),
        ({"polish_steps": 256, "polish_lr": float("nan")}, "polish_lr must be a number"),
        ({"polish_steps": 256, "polish_lr": "1e-5"}, "polish_lr must be a number"),
        ({"polish_steps": 256, "polish_lr": 1e-5, "lr_final": None}, "set lr_final"),
    ],
)
def test_bad_polish_is_a_one_line_error(ppo, words) -> None:
    with pytest.raises(ValueError, match="ppo.polish") as err:
        _config(**ppo)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_learner_ends_at_the_polish_rate() -> None:
    """Two updates (1 024 steps of 8 envs × 64): the second, at the budget's end, uses the
    polish's final rate — not ``lr_final``, where the plain decay would end."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import VecNormalize

    from residual_quad.training.ppo_model import make_training_env, new_model

    cfg = _config(polish_steps=512, polish_lr=1e-5)
    venv = VecNormalize(make_training_env(cfg), gamma=cfg.ppo.gamma)
    venv.seed(cfg.seed)
    try:
        model = new_model(cfg, venv)
        model.learn(cfg.total_steps)
        rates = [g["lr"] for g in model.policy.optimizer.param_groups]
    finally:
        venv.close()
    assert rates == [pytest.approx(1e-5, rel=1e-9)] * len(rates)
