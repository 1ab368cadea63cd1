"""The numpy forward of the PPO actor: SB3's actions to float32 rounding, one observation and a
batch bit for bit, and SB3's own predict for architectures it cannot read."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.controllers.batch import BatchedLoop, batch_from_spec  # noqa: E402
from residual_quad.controllers.numpy_policy import NumpyPolicy  # noqa: E402
from residual_quad.controllers.ppo import BatchedPPOController, PPOController  # noqa: E402
from residual_quad.controllers.specs import parse_spec  # noqa: E402


@pytest.fixture(scope="module")
def shipped():
    return PPOController()


def test_numpy_forward_equals_sb3_predict_to_float32_rounding(shipped):
    assert shipped.network is not None
    x = np.random.default_rng(0).standard_normal((500, 35)) * 2.0
    ours = shipped.network(x)
    theirs, _ = shipped.model.predict(x.astype(np.float32), deterministic=True)
    assert np.abs(ours - np.clip(theirs, -1.0, 1.0)).max() < 1e-5
    assert np.abs(ours).max() <= 1.0


def test_one_observation_and_a_batch_give_bit_identical_actions(shipped):
    x = np.random.default_rng(1).standard_normal((64, 35))
    batch = shipped.network(x)
    for i in range(len(x)):
        assert np.array_equal(shipped.network(x[i : i + 1])[0], batch[i])


def test_batched_ppo_equals_single_controllers_bit_for_bit_in_closed_loop():
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    n = 3
    env = ResidualQuadVectorEnv(
        n, scenarios=[{"payload": p, "wind": "windy"} for p in ("none", "heavy", "extra")]
    )
    obs, _ = env.reset(seed=0)
    batch = batch_from_spec(parse_spec("ppo"), n)
    assert isinstance(batch, BatchedPPOController)
    singles = [PPOController() for _ in range(n)]
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
    monkeypatch.setattr(NumpyPolicy, "from_sb3", classmethod(lambda cls, policy: None))
    batch = batch_from_spec(parse_spec("ppo"), 2)
    assert isinstance(batch, BatchedLoop)
    assert all(c.network is None for c in batch.controllers)


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
