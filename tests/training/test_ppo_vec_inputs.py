"""Training inputs beyond the base features: the vector env's ``ppo_adapt`` and ``ppo_res``
inputs (history, integral, the estimator run every control period) are what the deployed
controllers compute on the same episodes, across autoresets and episodes that end mid-repeat; and
smoke trainings of ``ppo_adapt`` and of ``ppo_res`` with the estimate write policy files the
controllers fly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("stable_baselines3", reason="needs the rl extra (stable-baselines3)")

from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.policy_file import read_meta  # noqa: E402
from residual_quad.controllers.policy_inputs import FeatureSpec, PolicyFeatures  # noqa: E402
from residual_quad.controllers.ppo_adapt import AdaptEstimator, PPOAdaptController  # noqa: E402
from residual_quad.controllers.ppo_res import ResidualPilot, ResidualPPOController  # noqa: E402
from residual_quad.envs.vector_env import ResidualQuadVectorEnv  # noqa: E402
from residual_quad.episode import run_episode  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import (  # noqa: E402
    FeatureConfig,
    PPOHyperparams,
    PPOTrainConfig,
)
from residual_quad.training.ppo_vec import QuadVecEnv  # noqa: E402

SPEC = FeatureSpec(action_history=2, error_integral=True, estimate=True)
SCENARIOS = [
    {"payload": "heavy", "wind": "windy", "trajectory": "helix"},
    {"payload": "none", "wind": "breezy", "trajectory": "hover"},
]
NEXT = {"payload": "light", "wind": "windy", "trajectory": "figure8"}
ENV_KW = {"episode_s": 0.25, "max_position_error": 0.25, "action_mode": "rotor"}


def constant_sampler(rng: np.random.Generator) -> dict:
    return dict(NEXT)


def policy(features: np.ndarray) -> np.ndarray:
    """A fixed deterministic map from inputs to rotor actions."""
    w = np.random.default_rng(7).normal(0.0, 0.05, (4, features.shape[-1]))
    return np.clip(-0.2 + np.tanh(features @ w.T), -1.0, 1.0).astype(np.float32)


def correction_policy(features: np.ndarray) -> np.ndarray:
    """A fixed deterministic map from inputs to ``ppo_res`` corrections in [-1, 1]³."""
    w = np.random.default_rng(3).normal(0.0, 0.3, (3, features.shape[-1]))
    return np.tanh(features @ w.T).astype(np.float32)


class _Model:
    """An SB3-like model whose deterministic action is ``act`` (default :func:`policy`);
    remembers its inputs."""

    def __init__(self, act: Any = policy) -> None:
        self.seen: list[np.ndarray] = []
        self.act = act

    def predict(self, x: np.ndarray, deterministic: bool = True) -> tuple[Any, None]:
        self.seen.append(np.array(x[0]))
        return self.act(x), None


def _controller_inputs(
    i: int,
    seed: int,
    decisions: int,
    spec: FeatureSpec = SPEC,
    env_kw: dict = ENV_KW,
    feedforward: bool = False,
) -> list[np.ndarray]:
    """The inputs the deployed ``ppo_adapt`` computes, env ``i`` alone, per decision."""
    model = _Model()
    record = {"estimate_feedforward": True} if feedforward else None
    ctrl = PPOAdaptController.from_model(model, "rotor", None, 2, spec, record)
    ctrl.law.inputs = PolicyFeatures(spec, 4, 0.02)  # training's batched base features
    return _deployed_inputs(ctrl, model, i, seed, decisions, env_kw)


def _deployed_inputs(
    ctrl: Any, model: _Model, i: int, seed: int, decisions: int, env_kw: dict
) -> list[np.ndarray]:
    """The inputs ``ctrl`` (around ``model``) computes flying env ``i`` alone, per decision."""
    env = ResidualQuadVectorEnv(
        1, scenarios=[SCENARIOS[i]], sampler=constant_sampler, nthread=1, **env_kw
    )
    obs, _ = env.reset(seed=seed + i)
    ctrl.reset()
    while len(model.seen) < decisions:
        action = ctrl.policy(obs[0])
        obs, _, term, trunc, _ = env.step(action[None, :])
        if term[0] or trunc[0]:
            obs, *_ = env.step(np.zeros((1, 4)))  # NEXT_STEP: the reset
            ctrl.reset()
    env.close()
    return model.seen[:decisions]


PREVIEW_SPEC = FeatureSpec(preview_k=5, action_history=2, estimate=True)
PREVIEW_KW = {**ENV_KW, "preview": (5, 0.04)}


@pytest.mark.parametrize(
    ("spec", "env_kw", "feedforward"),
    [(SPEC, ENV_KW, False), (PREVIEW_SPEC, PREVIEW_KW, False), (SPEC, ENV_KW, True)],
    ids=["memory", "preview", "feedforward"],
)
def test_training_inputs_are_the_deployed_controllers(spec, env_kw, feedforward):
    """With the feed-forward the inputs (estimate, integral) depend on the thrust it adds: equal
    inputs mean training flew the deployed law's rotor actions."""
    seed, steps = 5, 30
    venv = _estimating_env(spec, feedforward=feedforward, **env_kw)
    assert venv.observation_space.shape == (spec.dim(),)
    feats = _training_inputs(venv, policy, seed, steps)
    for i in range(len(SCENARIOS)):
        deployed = _controller_inputs(i, seed, steps, spec, env_kw, feedforward)
        _assert_same_inputs(feats, i, deployed)
    if feedforward:  # the thrust it adds moves the flights: the inputs are not the plain ones
        plain = _training_inputs(_estimating_env(spec, **env_kw), policy, seed, steps)
        assert not all(np.array_equal(a, b) for a, b in zip(feats, plain, strict=True))


def _estimating_env(spec: FeatureSpec, feedforward: bool = False, **kw: Any) -> QuadVecEnv:
    """One env per scenario, 50 Hz decisions, with the batched estimator (its feed-forward on or
    off) and ``spec``'s inputs."""
    n = len(SCENARIOS)
    return QuadVecEnv(
        n,
        constant_sampler,
        action_repeat=2,
        nthread=1,
        scenarios=SCENARIOS,
        features=spec,
        estimator=AdaptEstimator(n, feedforward=feedforward),
        **kw,
    )


def _training_inputs(venv: QuadVecEnv, act: Any, seed: int, steps: int) -> list[np.ndarray]:
    """The inputs ``venv`` gives over ``steps`` decisions of ``act`` after ``seed(seed)``
    (closed afterwards); autoresets must have happened."""
    venv.seed(seed)
    feats = [venv.reset()]
    ended = 0
    for _ in range(steps - 1):
        f, _, done, _ = venv.step(act(feats[-1]))
        ended += int(done.sum())
        feats.append(f)
    venv.close()
    assert ended >= 2  # autoresets happened
    return feats


def _assert_same_inputs(feats: list[np.ndarray], i: int, want: list[np.ndarray]) -> None:
    """Env ``i``'s training inputs equal the deployed controller's ``want``."""
    for k, (a, b) in enumerate(zip([f[i] for f in feats], want, strict=True)):
        # the estimator twins agree to rounding; everything else is the same code
        assert np.allclose(a, b, rtol=0.0, atol=1e-5), (i, k, np.abs(a - b).max())


RES_SPEC = FeatureSpec(action_history=2, estimate=True)


def test_ppo_res_training_estimate_is_the_deployed_controllers():
    """``ppo_res`` with the estimate: the vector env, its pilot (``pid`` plus the correction) and
    the estimator told the pilot's command give the inputs the deployed controller computes."""
    seed, steps, scale = 3, 30, 4.0
    pilot = ResidualPilot(len(SCENARIOS), scale, action_repeat=2, tracker="pid")
    venv = _estimating_env(RES_SPEC, pilot=pilot, **ENV_KW)
    assert venv.observation_space.shape == (RES_SPEC.dim(3),)
    feats = _training_inputs(venv, correction_policy, seed, steps)
    est = slice(RES_SPEC.dim(3) - 3, None)
    assert max(np.abs(f[:, est]).max() for f in feats) > 0.01  # the estimate is not all zeros
    for i in range(len(SCENARIOS)):
        model = _Model(correction_policy)
        ctrl = ResidualPPOController.from_model(model, scale, None, 2, RES_SPEC, tracker="pid")
        ctrl.law.inputs = PolicyFeatures(RES_SPEC, 3, 0.02)  # training's batched base features
        _assert_same_inputs(feats, i, _deployed_inputs(ctrl, model, i, seed, steps, ENV_KW))


def _smoke_config(**kw: Any) -> PPOTrainConfig:
    """A 1 024-step training of 4 envs, one update, no evaluation or checkpoint."""
    return PPOTrainConfig(
        seed=1,
        total_steps=1024,
        n_envs=4,
        episode_s=2.0,
        eval_freq=0,
        eval_scenarios=[["light", "breezy", "hover"]],
        checkpoint_freq=0,
        env_threads=1,
        ppo=PPOHyperparams(n_steps=256, batch_size=256, n_epochs=1),
        **kw,
    )


@pytest.mark.slow
def test_smoke_training_of_ppo_res_with_the_estimate(tmp_path):
    features = FeatureConfig(action_history=2, estimate=True)
    cfg = _smoke_config(controller="ppo_res", tracker="pid", features=features)
    train(cfg, tmp_path / "run", progress=False)
    meta = read_meta(tmp_path / "run" / "final.zip")
    assert meta["controller"] == "ppo_res"
    assert meta["observation_layout"] == "base + history 2 + estimate (44)"
    ctrl = make_controller("ppo_res", path=tmp_path / "run" / "final.zip")
    assert ctrl.estimator is not None
    r = run_episode(ctrl, payload="heavy", wind="windy", trajectory="hover", seed=0, episode_s=2)
    assert not r.diverged and np.abs(ctrl.state.estimator.last_estimate).max() > 0.1


@pytest.mark.slow
@pytest.mark.parametrize("feedforward", [False, True], ids=["input", "feedforward"])
def test_smoke_training_of_ppo_adapt(tmp_path, feedforward):
    features = FeatureConfig(action_history=2, error_integral=True, estimate=True)
    cfg = _smoke_config(controller="ppo_adapt", features=features, estimate_feedforward=feedforward)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["steps"] == 1024
    meta = read_meta(tmp_path / "run" / "final.zip")
    assert meta["controller"] == "ppo_adapt"
    assert meta.get("estimate_feedforward", False) is feedforward
    assert FeatureSpec.from_record(meta["features"]) == cfg.features.spec()
    assert meta["observation_layout"] == "base + history 2 + integral + estimate (49)"
    ctrl = make_controller("ppo_adapt", path=tmp_path / "run" / "final.zip")
    assert ctrl.law.feedforward is feedforward
    obs = np.zeros(36)
    obs[6:15] = np.eye(3).ravel()
    obs[29:33] = 1.2
    ctrl.reset()
    assert np.all(np.isfinite(ctrl.policy(obs)))


def _reset_pair(action_repeat: int, seed: int, **shaping: Any) -> tuple[QuadVecEnv, QuadVecEnv]:
    """The same training envs without and with a reward ``shaping`` option, seeded and reset
    alike."""
    kw = dict(action_repeat=action_repeat, nthread=1, scenarios=SCENARIOS, **ENV_KW)
    pair = (
        QuadVecEnv(len(SCENARIOS), constant_sampler, **kw),
        QuadVecEnv(len(SCENARIOS), constant_sampler, **shaping, **kw),
    )
    for venv in pair:
        venv.seed(seed)
        venv.reset()
    return pair


def test_the_policy_action_cost_is_its_smoothness_and_magnitude():
    """``action_cost=(w_s, w_m)`` lowers each decision's reward by exactly
    ``w_s·‖u − u_prev‖² + w_m·‖u‖²`` (``u_prev`` zero at an episode's start) and changes
    nothing else; negative or non-finite weights are config errors."""
    plain, costly = _reset_pair(2, 3, action_cost=(0.5, 0.25))
    rng = np.random.default_rng(0)
    prev = np.zeros((len(SCENARIOS), 4))
    for _ in range(6):
        u = rng.uniform(-0.3, 0.1, (len(SCENARIOS), 4)).astype(np.float32)
        f0, r0, d0, _ = plain.step(u)
        f1, r1, d1, _ = costly.step(u)
        want = 0.5 * ((u - prev) ** 2).sum(1) + 0.25 * (u.astype(np.float64) ** 2).sum(1)
        np.testing.assert_allclose(r0 - r1, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(f0, f1)
        prev = np.where(d0[:, None], 0.0, u)
    plain.close(), costly.close()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="action_smooth must be a finite number >= 0"):
            PPOTrainConfig(action_smooth=bad)


def test_the_log_position_cost_lowers_each_period_by_its_log_error():
    """``position_log=(w, s)`` lowers each control period's reward by exactly
    ``w·ln(1 + ‖e_p‖/s)`` of that period's error and changes nothing else (one period per
    decision here, so a decision's reward is its period's); a negative or non-finite weight and a
    scale that is not > 0 are config errors naming the key."""
    plain, shaped = _reset_pair(1, 5, position_log=(0.3, 0.02))
    rng = np.random.default_rng(1)
    for _ in range(8):  # the 0.25 s episodes end and restart within these decisions
        u = rng.uniform(-0.4, 0.2, (len(SCENARIOS), 4)).astype(np.float32)
        f0, r0, d0, i0 = plain.step(u)
        f1, r1, d1, i1 = shaped.step(u)
        err = np.array([info["position_error"] for info in i0])
        assert err.min() > 0.0
        np.testing.assert_allclose(r0 - r1, 0.3 * np.log1p(err / 0.02), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(f0, f1)
        np.testing.assert_array_equal(d0, d1)
    plain.close(), shaped.close()
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="position_log must be a finite number >= 0"):
            PPOTrainConfig(position_log=bad)
    for bad in (0.0, -0.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="position_log_scale must be a finite number > 0"):
            PPOTrainConfig(position_log_scale=bad)


@pytest.mark.parametrize("pilot", [False, True], ids=["rotor", "pilot"])
def test_the_preview_read_at_decisions_only_moves_no_bit(pilot, monkeypatch):
    """The adapter asks the vector env for the preview at a decision's last period only (and at
    an episode's end): inputs, rewards, ends and terminal observations are the bits of reading it
    every period, episodes ending mid-hold among them, a pilot's included."""

    def rollout() -> tuple[list[Any], int]:
        n = len(SCENARIOS)
        kw: dict[str, Any] = {}
        act = policy
        if pilot:
            kw["pilot"] = ResidualPilot(n, 4.0, action_repeat=2, tracker="pid")
            act = correction_policy
        venv = _estimating_env(PREVIEW_SPEC, **kw, **PREVIEW_KW)
        venv.seed(5)
        f = venv.reset()
        out: list[Any] = [f]
        mid_hold = 0
        for _ in range(40):
            f, r, d, infos = venv.step(act(f))
            out += [f, r, d]
            for info in infos:
                if "terminal_observation" in info:
                    out.append(info["terminal_observation"])
                    mid_hold += info["control_steps"] == 1
        venv.close()
        return out, mid_hold

    skipped, mid_hold = rollout()
    original = ResidualQuadVectorEnv.step_subset
    monkeypatch.setattr(
        ResidualQuadVectorEnv,
        "step_subset",
        lambda self, ids, actions, preview=True: original(self, ids, actions, True),
    )
    every, _ = rollout()
    assert mid_hold >= 2  # episodes ended mid-hold (the preview read for them at their end)
    assert len(skipped) == len(every)
    for a, b in zip(skipped, every, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.isfinite(a).all()
