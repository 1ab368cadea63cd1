"""An anchored ``ppo_acc`` (``ppo.anchored: true``): it trains and ships; on the reference, its
accelerometer undisturbed, its action is zero where an unanchored policy's is not; the numpy
forward that flies it is SB3's anchored actor; its anchor uses the statistics its file
normalizes with; CAPS smooths the anchored mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402

from residual_quad.controllers.base import ControlContext  # noqa: E402
from residual_quad.controllers.batch import make_batch_controller  # noqa: E402
from residual_quad.envs.observation import ObsLayout as L  # noqa: E402
from residual_quad.envs.residual_quad_env import ResidualQuadEnv  # noqa: E402
from residual_quad.training.anchored import AnchoredActorCriticPolicy  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams  # noqa: E402
from tests.training.test_ppo_acc import _config  # noqa: E402

TRAJECTORIES = ("hover", "helix", "figure8", "lissajous")
MASS = ControlContext().airframe.mass  # kg, the nominal mass the anchor knows


@pytest.fixture(scope="module")
def anchored_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("anchored")
    cfg = _config(ppo=PPOHyperparams(n_steps=64, batch_size=256, n_epochs=2, anchored=True))
    train(cfg, out, progress=False)
    return out / "final.zip"


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plain")
    train(_config(), out, progress=False)
    return out / "final.zip"


def _envs(batch) -> list[ResidualQuadEnv]:
    return [
        ResidualQuadEnv(payload="light", wind="windy", trajectory=t, **batch.env_kwargs)
        for t in TRAJECTORIES
    ]


def _first_decisions(path: Path, on_reference: bool) -> np.ndarray:
    """The policy's first decisions (n, 3) of fresh vehicles mid-flight (a light payload in
    gusts), moved onto their reference (position and velocity) with an undisturbed vehicle's
    accelerometer, or left as they are."""
    batch = make_batch_controller("ppo_acc", len(TRAJECTORIES), path=path)
    obs = []
    for i, env in enumerate(_envs(batch)):
        o, _ = env.reset(seed=i)
        for _ in range(30):
            o, *_ = env.step(np.full(4, 0.1))
        if on_reference:  # undisturbed: the accelerometer reads what the thrusts give
            o = o.copy()
            o[L.pos], o[L.vel] = o[L.ref_pos], o[L.ref_vel]
            o[L.imu] = (0.0, 0.0, o[L.thrusts].sum() / MASS)
        obs.append(o)
    batch.policy_batch(np.array(obs))
    return batch.state.policy.u.copy()


def test_on_the_reference_an_anchored_policy_asks_for_nothing(anchored_run, plain_run):
    assert np.abs(_first_decisions(anchored_run, on_reference=True)).max() < 1e-6
    # the same vehicles off their reference: it acts
    assert np.abs(_first_decisions(anchored_run, on_reference=False)).max() > 1e-3
    # an unanchored policy rests wherever its mean crosses zero: not on the reference
    assert np.abs(_first_decisions(plain_run, on_reference=True)).max() > 1e-3


def test_the_numpy_forward_is_sb3s_anchored_actor(anchored_run):
    batch = make_batch_controller("ppo_acc", 1, path=anchored_run)
    law = batch.law
    policy = law.model.policy
    assert isinstance(policy, AnchoredActorCriticPolicy)
    assert law.network is not None and law.network.anchor is not None
    rng = np.random.default_rng(3)
    d = policy.obs_mean.shape[0]
    x = np.clip(rng.normal(size=(16, d)), -3, 3).astype(np.float32)
    with torch.no_grad():
        dist = policy.get_distribution(torch.as_tensor(x))
        sb3 = np.clip(dist.get_actions(deterministic=True).numpy(), -1.0, 1.0)
    np.testing.assert_allclose(law.network(x), sb3, rtol=0, atol=2e-6)
    # one row and the batch give the same bits (the policy file's batch invariance)
    np.testing.assert_array_equal(law.network(x[:1]), law.network(x)[:1])


def test_the_anchor_uses_the_statistics_the_file_normalizes_with(anchored_run):
    law = make_batch_controller("ppo_acc", 1, path=anchored_run).law
    _, mean, std, clip = law.network.anchor
    np.testing.assert_allclose(mean, law.normalizer.mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(std, law.normalizer.std, rtol=1e-6, atol=1e-7)
    assert clip == law.normalizer.clip
    assert not np.allclose(std, 1.0)  # the statistics were copied, not left at the identity


def test_a_rotor_policy_cannot_be_anchored():
    with pytest.raises(ValueError, match="hover thrust"):
        _config(
            controller="ppo",
            ppo=PPOHyperparams(n_steps=64, batch_size=256, n_epochs=2, anchored=True),
        )


def test_caps_smooths_the_anchored_mean(anchored_run):
    from residual_quad.training.smoothness import mean_action

    policy = make_batch_controller("ppo_acc", 1, path=anchored_run).law.model.policy
    x = torch.as_tensor(np.random.default_rng(5).normal(size=(8, policy.obs_mean.shape[0])))
    x = x.float()
    with torch.no_grad():
        expected = policy.get_distribution(x).get_actions(deterministic=True)
        np.testing.assert_array_equal(mean_action(policy, x).numpy(), expected.numpy())
