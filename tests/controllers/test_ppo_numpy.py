"""The numpy forward of the PPO actor: SB3's actions to float32 rounding, one observation and a
batch bit for bit, and SB3's own predict for architectures it cannot read."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.controllers.batch import batch_from_spec  # noqa: E402
from residual_quad.controllers.driver import LawBatch, LawController  # noqa: E402
from residual_quad.controllers.numpy_policy import NumpyPolicy  # noqa: E402
from residual_quad.controllers.ppo import PPOController  # noqa: E402
from residual_quad.controllers.specs import make_controller, parse_spec  # noqa: E402
from residual_quad.episode import observation_env  # noqa: E402


@pytest.fixture(scope="module")
def shipped():
    return PPOController()


def _width(law: PPOController) -> int:
    """The network's input width (the shipped file's observation layout)."""
    return int(law.model.observation_space.shape[0])


def test_numpy_forward_equals_sb3_predict_to_float32_rounding(shipped):
    assert shipped.network is not None
    x = np.random.default_rng(0).standard_normal((500, _width(shipped))) * 2.0
    ours = shipped.network(x)
    theirs, _ = shipped.model.predict(x.astype(np.float32), deterministic=True)
    assert np.abs(ours - np.clip(theirs, -1.0, 1.0)).max() < 1e-5
    assert np.abs(ours).max() <= 1.0


def test_one_observation_and_a_batch_give_bit_identical_actions(shipped):
    x = np.random.default_rng(1).standard_normal((64, _width(shipped)))
    batch = shipped.network(x)
    for i in range(len(x)):
        assert np.array_equal(shipped.network(x[i : i + 1])[0], batch[i])


def test_batched_ppo_equals_single_controllers_bit_for_bit_in_closed_loop(shipped):
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    n = 3
    env = ResidualQuadVectorEnv(
        n,
        scenarios=[{"payload": p, "wind": "windy"} for p in ("none", "heavy", "extra")],
        **observation_env(shipped),
    )
    obs, _ = env.reset(seed=0)
    batch = batch_from_spec(parse_spec("ppo"), n)
    assert isinstance(batch, LawBatch) and isinstance(batch.law, PPOController)
    singles = [LawController(PPOController()) for _ in range(n)]
    for _ in range(60):
        action = batch.policy_batch(obs)
        for i, c in enumerate(singles):
            assert np.array_equal(action[i], c.policy(obs[i]))
        obs, *_ = env.step(action)
    env.close()


def test_architectures_it_cannot_read_keep_sb3_predict(tmp_path):
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    model = PPO(
        "MlpPolicy",
        gym.make("Pendulum-v1"),
        policy_kwargs={"activation_fn": torch.nn.ELU},
        n_steps=64,
        seed=0,
    )
    assert NumpyPolicy.from_sb3(model.policy) is None
    relu = PPO("MlpPolicy", gym.make("Pendulum-v1"), policy_kwargs={"activation_fn": torch.nn.ReLU})
    net = NumpyPolicy.from_sb3(relu.policy)
    assert net is not None
    x = np.random.default_rng(2).standard_normal((50, 3))
    theirs, _ = relu.predict(x.astype(np.float32), deterministic=True)
    assert np.abs(net(x) - np.clip(theirs, -2.0, 2.0).clip(-1.0, 1.0)).max() < 1e-5


def test_a_controller_without_the_numpy_forward_flies_per_env_in_a_batch(shipped, monkeypatch):
    """Without the numpy forward SB3's ``predict`` runs one row at a time (its float32 batch
    products round with the batch size): every row of the batch is the single flight, bit for
    bit, also around a bad sample and a reset of one env."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    monkeypatch.setattr(NumpyPolicy, "from_sb3", classmethod(lambda cls, policy: None))
    n = 3
    batch = batch_from_spec(parse_spec("ppo"), n)
    assert isinstance(batch, LawBatch) and batch.law.network is None
    singles = [make_controller("ppo") for _ in range(n)]
    assert all(c.network is None for c in singles)
    x = np.random.default_rng(4).standard_normal((n, _width(shipped))).astype(np.float32)
    alone = np.concatenate(
        [shipped.model.predict(x[i : i + 1], deterministic=True)[0] for i in range(n)]
    )
    rows = batch.law.actions(x)
    assert np.array_equal(rows, np.clip(alone, -1.0, 1.0))  # row by row, not the batch's
    env = ResidualQuadVectorEnv(
        n,
        scenarios=[{"payload": p} for p in ("none", "heavy", "extra")],
        **observation_env(shipped),
    )
    obs, _ = env.reset(seed=0)
    for k in range(12):
        fed = obs.copy()
        if k == 5:
            fed[1, 3] = np.nan
        if k == 8:
            batch.reset_env(2)
            singles[2].reset()
        action = batch.policy_batch(fed)
        for i, c in enumerate(singles):
            assert np.array_equal(action[i], c.policy(fed[i]))
        obs, *_ = env.step(action)
    env.close()


def test_gsde_actor_mean_is_read_too():
    """gSDE (the ppo_res policies) changes the noise, not the deterministic action: the numpy
    forward reads it and equals SB3's predict; a squashed gSDE head keeps predict."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", gym.make("Pendulum-v1"), use_sde=True, n_steps=64, seed=0)
    net = NumpyPolicy.from_sb3(model.policy)
    assert net is not None
    x = np.random.default_rng(3).standard_normal((50, 3))
    theirs, _ = model.predict(x.astype(np.float32), deterministic=True)
    assert np.abs(net(x) - np.clip(theirs, -1.0, 1.0)).max() < 1e-5
    squashed = PPO(
        "MlpPolicy",
        gym.make("Pendulum-v1"),
        use_sde=True,
        policy_kwargs={"squash_output": True},
        n_steps=64,
    )
    assert NumpyPolicy.from_sb3(squashed.policy) is None
