"""The learner's speed settings (training/ppo_model.py): same seed, same numbers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

from residual_quad.training import ppo_model  # noqa: E402
from residual_quad.training.checkpoints import checkpoints, load_newest_good  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_model import (  # noqa: E402
    make_training_env,
    multi_tensor_adam,
    new_model,
)

GSDE_FIXED = PPOHyperparams(
    n_steps=64, batch_size=128, n_epochs=2, use_sde=True, log_std_init=-3.5, learn_std=False
)


def _config(**kw) -> PPOTrainConfig:
    base = {
        "seed": 5,
        "total_steps": 1024,
        "n_envs": 8,
        "episode_s": 5.0,
        "eval_freq": 0,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "checkpoint_freq": 0,
        "env_threads": 1,
        "ppo": PPOHyperparams(n_steps=64, batch_size=128, n_epochs=2),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


def _two_updates(cfg: PPOTrainConfig, foreach: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(initial, after two updates) parameters of a seeded run, Adam's kernels as asked."""
    venv = VecNormalize(make_training_env(cfg), gamma=cfg.ppo.gamma)
    venv.seed(cfg.seed)
    try:
        model = new_model(cfg, venv)
        assert all(g["foreach"] is True for g in model.policy.optimizer.param_groups)  # default
        multi_tensor_adam(model, on=foreach)
        assert all(g["foreach"] is foreach for g in model.policy.optimizer.param_groups)
        before = [p.detach().numpy().copy() for p in model.policy.parameters()]
        model.learn(cfg.total_steps)  # two rollouts of 8 envs x 64 steps, two updates
        after = [p.detach().numpy().copy() for p in model.policy.parameters()]
    finally:
        venv.close()
    return before, after


@pytest.mark.parametrize(
    "ppo", [PPOHyperparams(n_steps=64, batch_size=128, n_epochs=2), GSDE_FIXED], ids=["ppo", "gsde"]
)
def test_multi_tensor_adam_keeps_the_first_updates_bit_for_bit(ppo):
    """The shipped speed setting changes no number: same seed, same parameters after the first
    updates as torch's per-parameter Adam (SB3's default on the CPU) — with a learned and with a
    frozen gSDE exploration scale (``ppo``'s and the absolute ``ppo_res``'s settings)."""
    cfg = _config(ppo=ppo)
    start_a, fast = _two_updates(cfg, foreach=True)
    start_b, plain = _two_updates(cfg, foreach=False)
    assert all(np.array_equal(a, b) for a, b in zip(start_a, start_b, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(start_a, fast, strict=True))  # it learned
    assert all(np.array_equal(a, b) for a, b in zip(fast, plain, strict=True))


def test_a_resumed_model_gets_the_speed_setting_back(tmp_path, monkeypatch):
    """A checkpoint restores the optimizer's saved parameter groups; resuming applies the
    learner settings again, whatever the checkpoint was saved with."""
    cfg = _config(total_steps=1024, checkpoint_freq=512, ppo=GSDE_FIXED)
    with monkeypatch.context() as m:  # a run from before the setting: per-parameter Adam
        m.setattr(ppo_model, "multi_tensor_adam", lambda model: multi_tensor_adam(model, False))
        train(cfg, tmp_path, progress=False)
    found = checkpoints(tmp_path)
    assert all(not g["foreach"] for g in _saved_param_groups(found[0]))
    model, venv, _ = load_newest_good(found, make_training_env(cfg), cfg)
    try:
        assert all(g["foreach"] is True for g in model.policy.optimizer.param_groups)
        assert not model.policy.log_std.requires_grad  # fix_std too
    finally:
        venv.close()


def _saved_param_groups(path) -> list[dict]:
    from stable_baselines3.common.save_util import load_from_zip_file

    _, params, _ = load_from_zip_file(path, device="cpu")
    return params["policy.optimizer"]["param_groups"]


@pytest.mark.slow
def test_multi_tensor_adam_keeps_the_first_sac_updates_bit_for_bit():
    """SAC's actor, critic and temperature optimizers get the same setting, and it changes no
    number either (a few dozen gradient steps, same seed)."""
    from residual_quad.training.ppo_config import OffPolicyHyperparams

    cfg = _config(
        algo="sac",
        total_steps=512,
        normalize_reward=False,
        offpolicy=OffPolicyHyperparams(
            buffer_size=1000, batch_size=32, learning_starts=256, net_arch=[16, 16]
        ),
    )
    runs = []
    for foreach in (True, False):
        venv = VecNormalize(make_training_env(cfg), norm_reward=False, gamma=cfg.discount())
        venv.seed(cfg.seed)
        try:
            model = new_model(cfg, venv)
            multi_tensor_adam(model, on=foreach)
            groups = [*model.actor.optimizer.param_groups, *model.critic.optimizer.param_groups]
            groups += model.ent_coef_optimizer.param_groups
            assert all(g["foreach"] is foreach for g in groups)
            start = [p.detach().numpy().copy() for p in model.policy.parameters()]
            model.learn(cfg.total_steps)
            runs.append((start, [p.detach().numpy().copy() for p in model.policy.parameters()]))
        finally:
            venv.close()
    (start_a, fast), (_, plain) = runs
    assert any(not np.array_equal(a, b) for a, b in zip(start_a, fast, strict=True))  # it learned
    assert all(np.array_equal(a, b) for a, b in zip(fast, plain, strict=True))
