"""Privileged critic: the env's privileged columns, an actor blind to them, the exported file."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("stable_baselines3")
import stable_baselines3 as sb3  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from residual_quad import configs  # noqa: E402
from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.features import FEATURE_DIM  # noqa: E402
from residual_quad.controllers.policy_file import (  # noqa: E402
    PolicyFileError,
    read_meta,
    save_model,
)
from residual_quad.envs.disturbances import PAYLOAD_LEVELS  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_vec import QuadVecEnv, ScenarioSampler  # noqa: E402
from residual_quad.training.privileged import (  # noqa: E402
    PRIVILEGED_DIM,
    PRIVILEGED_NAMES,
    AsymmetricActorCriticPolicy,
)

WIDTH = FEATURE_DIM + PRIVILEGED_DIM


class _Spaces(gym.Env):
    """Only the spaces of a privileged training env (the model needs an env to be built)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (WIDTH,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(WIDTH, np.float32), {}

    def step(self, action):
        return np.zeros(WIDTH, np.float32), 0.0, False, False, {}


@pytest.fixture(scope="module")
def asym(tmp_path_factory):
    """An untrained seeded asymmetric PPO, its policy file and the ``ppo`` controller of it."""
    model = sb3.PPO(
        AsymmetricActorCriticPolicy,
        DummyVecEnv([_Spaces]),
        n_steps=64,
        batch_size=64,
        seed=0,
        device="cpu",
        policy_kwargs={"actor_dim": FEATURE_DIM, "net_arch": {"pi": [16, 16], "vf": [16, 16]}},
    )
    path = tmp_path_factory.mktemp("asym") / "asym.zip"
    meta = {"controller": "ppo", "algo": "ppo", "action_mode": "rotor", "obs_norm": None}
    save_model(model, path, {**meta, "privileged_columns": list(PRIVILEGED_NAMES)})
    return model, path, make_controller("ppo", path=path)


def _rows(seed: int, n: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, (n, FEATURE_DIM)).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    scale=st.floats(1e2, 1e6),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf]),
)
def test_privileged_inputs_move_the_value_never_the_action(asym, seed, scale, special):
    model, _, ctrl = asym
    x = _rows(seed)
    rng = np.random.default_rng(seed + 1)
    base = np.concatenate([x, np.zeros((len(x), PRIVILEGED_DIM), np.float32)], axis=1)
    hit = base.copy()
    hit[:, FEATURE_DIM:] = rng.uniform(-scale, scale, (len(x), PRIVILEGED_DIM))
    a_base, _ = model.predict(base, deterministic=True)
    a_hit, _ = model.predict(hit, deterministic=True)
    assert np.array_equal(a_base, a_hit)  # SB3's actor: bit for bit
    v_base = model.policy.predict_values(model.policy.obs_to_tensor(base)[0])
    v_hit = model.policy.predict_values(model.policy.obs_to_tensor(hit)[0])
    assert not np.array_equal(v_base.detach().numpy(), v_hit.detach().numpy())
    if special is not None:  # masked, not multiplied: NaN and inf do not leak either
        hit[:, FEATURE_DIM] = special
        assert np.array_equal(model.predict(hit, deterministic=True)[0], a_base)
    # the exported numpy forward reads the actor columns only, and equals SB3's actor
    assert ctrl.network.layers[0][0].shape[0] == FEATURE_DIM
    np.testing.assert_allclose(ctrl.actions(x), np.clip(a_base, -1, 1), atol=2e-6)


def test_the_policy_file_flies_in_the_ppo_controller(asym):
    _, path, ctrl = asym
    env = gym.make("ResidualQuad-v0", episode_s=0.5, action_mode=ctrl.action_mode)
    obs, _ = env.reset(seed=0)
    ctrl.reset(0)
    for _ in range(20):
        action = ctrl.policy(obs)
        assert action.shape == (4,) and np.all(np.abs(action) <= 1)
        obs, *_ = env.step(action)
    assert read_meta(path)["privileged_columns"] == list(PRIVILEGED_NAMES)


def test_a_policy_file_with_the_wrong_privileged_count_is_refused(asym, tmp_path):
    model, _, _ = asym
    path = tmp_path / "short.zip"
    meta = {"controller": "ppo", "algo": "ppo", "action_mode": "rotor", "obs_norm": None}
    save_model(model, path, {**meta, "privileged_columns": ["payload_kg"]})
    with pytest.raises(PolicyFileError, match="inputs"):
        make_controller("ppo", path=path)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"privileged_columns": "payload_kg"}, "privileged_columns must be a list"),
        ({"privileged_columns": [1, 2]}, "privileged_columns must be a list"),
        ({"algo": "sac"}, "algo 'sac'"),
    ],
)
def test_a_bad_privileged_record_is_refused(asym, tmp_path, changes, match):
    model, _, _ = asym
    path = tmp_path / "bad.zip"
    meta = {"controller": "ppo", "algo": "ppo", "action_mode": "rotor", "obs_norm": None}
    save_model(model, path, {**meta, "privileged_columns": list(PRIVILEGED_NAMES), **changes})
    with pytest.raises(PolicyFileError, match=match):
        make_controller("ppo", path=path)


def test_the_env_appends_the_truth_and_leaves_the_features_alone():
    sampler = ScenarioSampler(["none", "heavy"], ["windy"], ["helix"])
    kw = {"episode_s": 0.1, "action_mode": "rotor", "nthread": 1}
    plain = QuadVecEnv(3, sampler, action_repeat=2, scenario_seed=4, **kw)
    priv = QuadVecEnv(3, sampler, action_repeat=2, scenario_seed=4, privileged=True, **kw)
    try:
        assert priv.observation_space.shape == (WIDTH,) and priv.actor_dim == FEATURE_DIM
        plain.seed(2), priv.seed(2)
        a, b = plain.reset(), priv.reset()
        assert np.array_equal(a, b[:, :FEATURE_DIM])
        act = np.full((3, 4), 0.1, np.float32)
        ended = 0
        for _ in range(12):  # 0.1 s episodes of 10 periods, actions held 2: autoresets
            (oa, ra, _, _), (ob, rb, db, ib) = plain.step(act), priv.step(act)
            assert np.array_equal(oa, ob[:, :FEATURE_DIM]) and np.array_equal(ra, rb)
            for i, sc in enumerate(priv._scenario_info):
                assert ob[i, FEATURE_DIM] == np.float32(PAYLOAD_LEVELS[sc[0]])  # payload_kg
            eff = ob[:, FEATURE_DIM + PRIVILEGED_NAMES.index("rotor_efficiency_0")]
            assert np.all(eff == 1.0)  # nominal rotors in these scenarios
            wind = ob[:, FEATURE_DIM + 4 : FEATURE_DIM + 7]
            assert np.all(np.linalg.norm(wind, axis=1) > 0)  # windy
            ended += int(db.sum())
            for i in np.flatnonzero(db):
                assert ib[i]["terminal_observation"].shape == (WIDTH,)
        assert ended > 0
    finally:
        plain.close(), priv.close()


def test_privileged_critic_is_ppo_only():
    with pytest.raises(ValueError, match="PPO only"):
        PPOTrainConfig(algo="sac", privileged_critic=True)
    with pytest.raises(ValueError, match="true or false"):
        PPOTrainConfig(privileged_critic="yes")


@pytest.mark.slow
def test_smoke_training_with_a_privileged_critic(tmp_path):
    """A tiny run: the policy file holds the actor's statistics and flies as ``ppo``."""
    cfg = PPOTrainConfig(
        seed=3,
        total_steps=1024,
        n_envs=2,
        episode_s=3.0,
        eval_freq=0,
        checkpoint_freq=0,
        eval_scenarios=[["light", "breezy", "hover"]],
        privileged_critic=True,
        ppo=PPOHyperparams(n_steps=256, batch_size=128, n_epochs=2, lr_final=None),
    )
    summary = train(cfg, tmp_path, progress=False)
    assert summary["steps"] == 1024
    meta = read_meta(tmp_path / "final.zip")
    assert len(meta["obs_norm"]["mean"]) == FEATURE_DIM
    assert meta["privileged_columns"] == list(PRIVILEGED_NAMES)
    assert configs.load(PPOTrainConfig, tmp_path / "config.yaml").privileged_critic
    ctrl = make_controller("ppo", path=tmp_path / "final.zip")
    model = sb3.PPO.load(tmp_path / "final.zip", device="cpu")
    x = ctrl.normalizer(_rows(0) * 3)
    padded = np.concatenate([x, np.full((len(x), PRIVILEGED_DIM), 5.0, np.float32)], axis=1)
    a, _ = model.predict(padded, deterministic=True)
    np.testing.assert_allclose(ctrl.actions(x), np.clip(a, -1, 1), atol=2e-6)
    env = gym.make("ResidualQuad-v0", episode_s=1.0, action_mode=ctrl.action_mode)
    obs, _ = env.reset(seed=0)
    ctrl.reset(0)
    for _ in range(50):
        obs, *_ = env.step(ctrl.policy(obs))
