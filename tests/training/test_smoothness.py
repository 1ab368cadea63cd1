"""CAPS spatial smoothness in PPO (training/smoothness.py): the exact gradient, SB3's updates when
off, a flatter policy when on, resume and config checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.training import ppo_model  # noqa: E402
from residual_quad.training.checkpoints import checkpoints, load_newest_good  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_model import make_training_env, new_model  # noqa: E402
from residual_quad.training.ppo_vec import NullVecEnv  # noqa: E402
from residual_quad.training.smoothness import (  # noqa: E402
    SmoothPPO,
    mean_action,
    spatial_smoothness_loss,
)

GSDE = {"use_sde": True, "log_std_init": -3.5, "learn_std": False}


def _config(**ppo) -> PPOTrainConfig:
    return PPOTrainConfig(
        seed=5,
        total_steps=1024,
        n_envs=8,
        episode_s=5.0,
        eval_freq=0,
        eval_scenarios=[["light", "breezy", "hover"]],
        checkpoint_freq=0,
        env_threads=1,
        ppo=PPOHyperparams(n_steps=64, batch_size=128, n_epochs=2, **ppo),
    )


def _trained(cfg: PPOTrainConfig, learner: type | None = None) -> tuple[list, list, object]:
    """(initial, after two updates) parameters and the model of a seeded run; ``learner``
    replaces the class the config picks."""
    venv = VecNormalize(make_training_env(cfg), gamma=cfg.ppo.gamma)
    venv.seed(cfg.seed)
    try:
        with pytest.MonkeyPatch.context() as m:
            if learner is not None:
                m.setattr(ppo_model, "learner_class", lambda c: learner)
            model = new_model(cfg, venv)
        before = [p.detach().numpy().copy() for p in model.policy.parameters()]
        model.learn(cfg.total_steps)  # two rollouts of 8 envs x 64 steps, two updates
        after = [p.detach().numpy().copy() for p in model.policy.parameters()]
    finally:
        venv.close()
    return before, after, model


def test_the_config_picks_the_learner():
    assert ppo_model.learner_class(_config()) is PPO
    assert ppo_model.learner_class(_config(spatial_smoothness=0.5)) is SmoothPPO
    assert ppo_model.smoothness_kwargs(_config()) == {}
    assert ppo_model.smoothness_kwargs(_config(spatial_smoothness=0.5, smoothness_sigma=0.2)) == {
        "spatial_smoothness": 0.5,
        "smoothness_sigma": 0.2,
    }


def test_the_hook_adds_exactly_the_smoothness_gradient():
    """After SB3's loss has left its gradient, the optimizer step adds ``λ_S·∇L_S`` of the
    minibatch SB3 evaluated — checked against the gradient computed by hand, same noise."""
    lam, sigma = 2.5, 0.3
    model = SmoothPPO(
        "MlpPolicy",
        NullVecEnv(1),
        n_steps=8,
        batch_size=8,
        seed=0,
        device="cpu",
        spatial_smoothness=lam,
        smoothness_sigma=sigma,
        policy_kwargs={"net_arch": [16, 16]},
    )
    policy = model.policy
    for group in policy.optimizer.param_groups:
        group["lr"] = 0.0  # the step runs the hook but leaves the parameters
    obs = torch.randn(
        32, policy.observation_space.shape[0], generator=torch.Generator().manual_seed(1)
    )
    actions = torch.zeros(32, policy.action_space.shape[0])

    def ppo_like_loss() -> torch.Tensor:
        values, log_prob, _ = policy.evaluate_actions(obs, actions)
        return values.pow(2).mean() - log_prob.mean()

    params = [p for p in policy.parameters() if p.requires_grad]
    policy.optimizer.zero_grad()
    ppo_like_loss().backward()
    base = [p.grad.clone() for p in params]
    torch.manual_seed(7)
    policy.optimizer.step()
    hooked = [p.grad.clone() for p in params]

    policy.optimizer.zero_grad()
    torch.manual_seed(7)
    (lam * spatial_smoothness_loss(policy, obs, sigma)).backward()
    expected = [
        b + (p.grad if p.grad is not None else 0) for b, p in zip(base, params, strict=True)
    ]
    for got, want in zip(hooked, expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-9)
    assert any(not torch.equal(h, b) for h, b in zip(hooked, base, strict=True))  # it added
    assert model._minibatch_obs is None  # each minibatch is used once


def test_the_loss_is_zero_without_noise_and_grows_with_it():
    model = SmoothPPO("MlpPolicy", NullVecEnv(1), n_steps=8, batch_size=8, seed=0, device="cpu")
    obs = torch.randn(256, model.observation_space.shape[0])
    with torch.no_grad():
        assert float(spatial_smoothness_loss(model.policy, obs, 0.0)) == 0.0
        torch.manual_seed(0)
        small = float(spatial_smoothness_loss(model.policy, obs, 0.01))
        torch.manual_seed(0)
        large = float(spatial_smoothness_loss(model.policy, obs, 0.3))
    assert 0 < small < large
    mu = mean_action(model.policy, obs).detach().numpy()
    np.testing.assert_allclose(mu, model.predict(obs.numpy(), deterministic=True)[0], atol=1e-6)


@pytest.mark.parametrize("extra", [{}, GSDE], ids=["gauss", "gsde"])
def test_zero_smoothness_updates_as_sb3_ppo_bit_for_bit(extra):
    """``λ_S = 0``: the hook adds nothing and draws no noise; the same seed gives SB3's
    parameters after the first updates, bit for bit."""
    cfg = _config(**extra)
    start_a, plain, _ = _trained(cfg)
    start_b, smooth, model = _trained(cfg, learner=SmoothPPO)
    assert isinstance(model, SmoothPPO) and model.spatial_smoothness == 0
    assert all(np.array_equal(a, b) for a, b in zip(start_a, start_b, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(start_a, plain, strict=True))  # learned
    assert all(np.array_equal(a, b) for a, b in zip(plain, smooth, strict=True))


def test_the_term_makes_the_policy_flatter():
    """Same seed, same data budget: with a large ``λ_S`` the policy's measured sensitivity to
    a small input change falls below its start and below the run without the term."""
    sigma = 0.1
    _, _, plain = _trained(_config(**GSDE))
    _, _, smooth = _trained(_config(spatial_smoothness=1e4, smoothness_sigma=sigma, **GSDE))
    start = new_model(_config(**GSDE), plain.env)  # the same seed's policy before any update
    obs = torch.randn(
        2048, plain.observation_space.shape[0], generator=torch.Generator().manual_seed(3)
    )

    def sensitivity(model) -> float:
        torch.manual_seed(11)
        with torch.no_grad():
            return float(spatial_smoothness_loss(model.policy, obs, sigma))

    assert sensitivity(smooth) < 0.5 * sensitivity(plain)
    assert sensitivity(smooth) < sensitivity(start)


def test_a_resumed_run_keeps_its_smoothness_its_curve_is_logged_and_its_files_fly(tmp_path):
    cfg = _config(spatial_smoothness=3.0, smoothness_sigma=0.2, **GSDE)
    cfg.checkpoint_freq = 512
    train(cfg, tmp_path, progress=False)
    model, venv, _ = load_newest_good(checkpoints(tmp_path), make_training_env(cfg), cfg)
    try:
        assert type(model) is SmoothPPO
        assert (model.spatial_smoothness, model.smoothness_sigma) == (3.0, 0.2)
        assert model._minibatch_obs is None
    finally:
        venv.close()
    from residual_quad.training.tb_logging import read_scalars

    (run,) = (tmp_path / "tb").iterdir()
    curve = [v for _, v in read_scalars(run)["train/spatial_smoothness_loss"]]
    assert curve and all(math.isfinite(v) and v > 0 for v in curve)  # TensorBoard shows it
    ctrl = make_controller("ppo", path=tmp_path / "final.zip")
    from residual_quad.episode import run_episode

    result = run_episode(
        ctrl, payload="light", wind="breezy", trajectory="hover", seed=0, episode_s=2.0
    )
    assert result.steps > 0  # an untrained policy flies until it falls: the file loads and acts


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spatial_smoothness", -0.1),
        ("spatial_smoothness", math.nan),
        ("spatial_smoothness", math.inf),
        ("spatial_smoothness", True),
        ("smoothness_sigma", 0.0),
        ("smoothness_sigma", -1.0),
        ("smoothness_sigma", math.nan),
        ("smoothness_sigma", math.inf),
    ],
)
def test_bad_smoothness_settings_are_errors_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"ppo.{key}"):
        _config(**{key: value})


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_weight_is_accepted_exactly_when_finite_and_not_negative(lam):
    ok = math.isfinite(lam) and lam >= 0
    try:
        _config(spatial_smoothness=lam)
    except ValueError as err:
        assert not ok and "ppo.spatial_smoothness" in str(err)
    else:
        assert ok
