"""The precision reward (``reward: precision``): the kernel's bounds, slope and annealing; the
training env's rewards with it (positive, bounded, the documented formula with action repeat);
the default reward unchanged; the config's checks; the annealing's progress across a resume;
and the policy record naming the reward."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig, recorded_reward
from residual_quad.training.precision import PrecisionReward

DEFAULT = PrecisionReward()  # σ 0.5, 0.1, 0.02 m; w 0.2, 0.3, 0.5; smooth 0.01
ANNEALED = PrecisionReward(anneal_from=0.8, anneal_fraction=0.5)

# ---------------------------------------------------------------------------- the kernel


@settings(max_examples=200, deadline=None)
@given(
    error=st.floats(0.0, 10.0),  # m: beyond any training episode's (they end at 1.5 m)
    a=st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4),
    b=st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4),
    progress=st.floats(0.0, 1.0),
    annealed=st.booleans(),
)
def test_the_reward_is_in_0_1_for_any_error_and_action(error, a, b, progress, annealed):
    reward = ANNEALED if annealed else DEFAULT
    change_sq = float(np.sum((np.array(a) - np.array(b)) ** 2))  # normalized actions in [-1, 1]
    r = reward(error, change_sq, progress)
    assert 0.0 < r <= 1.0
    assert r <= reward.position(error, progress)  # the smoothness factor only lowers it


@pytest.mark.parametrize("progress", [0.0, 0.25, 1.0])
def test_a_perfect_still_step_pays_1(progress):
    for reward in (DEFAULT, ANNEALED, PrecisionReward((0.3, 0.01), (1.0, 3.0), smooth=2.0)):
        assert reward(0.0, 0.0, progress) == pytest.approx(1.0, abs=1e-15)
    assert DEFAULT(0.0, 1.0) == pytest.approx(math.exp(-0.01))  # the change alone: exp(−w‖Δu‖²)


def _slope(e: float) -> float:
    """d r_pos / d e (1/m) of the default kernel, from the formula:
    Σ_i w_i · (−2e/σ_i²) · exp(−(e/σ_i)²)."""
    return sum(
        w * (-2.0 * e / s**2) * math.exp(-((e / s) ** 2))
        for w, s in zip(DEFAULT.weights, DEFAULT.tolerances, strict=True)
    )


def test_the_kernel_is_steeper_near_zero_than_far():
    """At 1 cm the default kernel falls ≈ 20 per metre (the 2 cm tolerance's slope), at 1 m only
    ≈ 0.03 per metre (the 0.5 m one's): the last centimetres pay ≈ 700 times more per metre
    than the last metre, where the env's linear cost pays both alike (1 per metre)."""
    near, far = _slope(0.01), _slope(1.0)
    # known answers: 0.2·0.08·e^−0.0004 + 0.3·2·e^−0.01 + 0.5·50·e^−0.25 and 0.2·8·e^−4 (+ ~0)
    assert near == pytest.approx(
        -(0.016 * math.exp(-0.0004) + 0.6 * math.exp(-0.01) + 25 * math.exp(-0.25))
    )
    assert far == pytest.approx(-1.6 * math.exp(-4.0), rel=1e-9)
    assert near == pytest.approx(-20.08, abs=0.01) and far == pytest.approx(-0.0293, abs=1e-4)
    h = 1e-7  # the implementation's slope is the formula's (central differences)
    for e, want in ((0.01, near), (1.0, far)):
        got = (DEFAULT.position(e + h) - DEFAULT.position(e - h)) / (2 * h)
        assert got == pytest.approx(want, rel=1e-5)
    assert abs(near) / abs(far) > 600


def test_the_finest_tolerance_anneals_geometrically():
    """From ``anneal_from`` at progress 0 to the final tolerance at ``anneal_fraction`` (and
    after): at ``anneal_fraction / 2`` the geometric mean; the coarse tolerances never move."""
    r = PrecisionReward(anneal_from=0.8, anneal_fraction=0.4)  # final 0.02 m
    assert r.tolerances_at(0.0) == (0.5, 0.1, 0.8)
    assert r.tolerances_at(0.2)[:2] == (0.5, 0.1)
    assert r.tolerances_at(0.2)[2] == pytest.approx(math.sqrt(0.8 * 0.02))  # 0.1265 m
    assert r.tolerances_at(0.2)[2] == pytest.approx(0.126491, abs=1e-6)
    assert r.tolerances_at(0.4)[2] == pytest.approx(0.02)
    assert r.tolerances_at(1.0) == (0.5, 0.1, pytest.approx(0.02))
    assert r.tolerances_at(-1.0) == r.tolerances_at(0.0)  # clipped
    assert DEFAULT.tolerances_at(0.0) == DEFAULT.tolerances  # anneal_from 0: none
    # a wider finest tolerance pays more for the same error (a random policy finds it)
    assert r.position(0.3, 0.0) > r.position(0.3, 0.2) > r.position(0.3, 1.0)


# ---------------------------------------------------------------------------- the config


def _load(tmp_path: Path, text: str) -> PPOTrainConfig:
    path = tmp_path / "precision.yaml"
    path.write_text(text)
    return configs.load(PPOTrainConfig, path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "reward: precision\nprecision: {tolerances: [0.5, -0.1], weights: [0.5, 0.5]}",
            r"precision: .*tolerances\[1\] must be a finite real number > 0 \(m\), got -0.1",
        ),
        (
            "precision: {tolerances: [0.5, 0.02], weights: [0.2, 0.3, 0.5]}",
            "precision: .*tolerances and weights need the same number",
        ),
        (
            "precision: {anneal_from: 0.01}",
            "precision: .*anneal_from 0.01 m is finer than the final tolerance 0.02 m",
        ),
        (
            "reward: precision\nposition_log: 1.0",
            "reward 'precision' replaces the env reward and its shaping terms: set position_log",
        ),
        (
            "reward: precision\naction_smooth: 0.5\naction_magnitude: 1.0",
            "set action_smooth, action_magnitude to 0",
        ),
        ("reward: precision\nreward_weights: {pos: 2.0}", "reward_weights .* would do nothing"),
        ("reward: precise", r"reward must be one of \['env', 'precision'\], got 'precise'"),
        ("precision: {tolerance: [0.1]}", r"precision: unknown key\(s\) \['tolerance'\]"),
        ("precision: {anneal_fraction: 0.0}", "anneal_fraction must be"),
    ],
)
def test_bad_precision_configs_name_the_file_and_the_key(tmp_path, text, message):
    with pytest.raises(ValueError, match=message) as err:
        _load(tmp_path, text)
    assert str(err.value).startswith(str(tmp_path / "precision.yaml"))


def test_the_precision_section_loads_and_round_trips(tmp_path):
    text = (
        "reward: precision\nprecision: {tolerances: [0.4, 0.05], weights: [1, 3], anneal_from: 0.5}"
    )
    cfg = _load(tmp_path, text)
    assert cfg.precision == PrecisionReward((0.4, 0.05), (1.0, 3.0), anneal_from=0.5)
    configs.dump(cfg, tmp_path / "again.yaml")
    assert configs.load(PPOTrainConfig, tmp_path / "again.yaml") == cfg
    # the default reward is the env's, and the env reward's shaping stays allowed with it
    assert PPOTrainConfig().reward == "env"
    assert PPOTrainConfig(position_log=1.0, action_smooth=1.0).reward == "env"


def test_a_record_names_its_reward():
    """Files written before ``reward`` existed (the shipped ones) read as the env reward; a
    precision run's record names its tolerances; an unreadable section is a note."""
    assert recorded_reward({}) == recorded_reward({"config": {"seed": 0}}) == "env"
    cfg = PPOTrainConfig(reward="precision", precision=ANNEALED)
    record = {"config": configs.to_dict(cfg)}
    assert recorded_reward(record) == (
        "precision (σ 0.5, 0.1, 0.02 m; the finest from 0.8 m over 50 % of the budget)"
    )
    record["config"]["precision"] = {"tolerances": "wide"}
    assert recorded_reward(record).startswith("precision (unreadable settings")


@pytest.mark.parametrize("kind", ["ppo", "ppo_res", "ppo_acc", "ppo_adapt"])
def test_a_shipped_policy_names_the_reward_of_its_committed_config(kind):
    """Whatever reward a committed config trains with, its shipped file says so (a file
    older than the ``reward`` key reads as the env reward, which is what it was trained on)."""
    pytest.importorskip("stable_baselines3")
    from residual_quad.controllers.policy_file import read_meta, shipped_policy_path

    committed = {"config": configs.to_dict(configs.load(PPOTrainConfig, kind))}
    assert recorded_reward(read_meta(shipped_policy_path(kind))) == recorded_reward(committed)


# ---------------------------------------------------------------------------- the training env

SCENARIOS = [
    {"payload": "heavy", "wind": "windy", "trajectory": "helix"},
    {"payload": "none", "wind": "breezy", "trajectory": "hover"},
    {"payload": "light", "wind": "calm", "trajectory": "figure8"},
]
NEXT = {"payload": "light", "wind": "windy", "trajectory": "figure8"}
# short episodes that end both ways, mid-repeat too (as tests/training/test_ppo_vec.py)
ENV_KW = {"episode_s": 0.25, "max_position_error": 0.25, "action_mode": "rotor"}


def constant_sampler(rng: np.random.Generator) -> dict:
    return dict(NEXT)


def _actions(steps: int, seed: int = 0) -> np.ndarray:
    """Random rotor actions (steps, envs, 4), some drifting the vehicle off."""
    return np.random.default_rng(seed).uniform(-0.6, 0.4, (steps, len(SCENARIOS), 4))


def _expected(reward: PrecisionReward, repeat: int, seed: int, actions: np.ndarray, progress):
    """Each env alone in a 1-env vector env (bit-equal to its row of a batch): per decision
    ``max(floor, (1/R) Σ_k P(e_k, ‖u_t − u_{t−1}‖², progress))`` over the periods flown, and the
    periods flown."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv
    from residual_quad.training.ppo_vec import PRECISION_FLOOR

    rewards = np.zeros(actions.shape[:2])
    flown = np.zeros(actions.shape[:2], dtype=int)
    for i, scenario in enumerate(SCENARIOS):
        env = ResidualQuadVectorEnv(
            1, scenarios=[scenario], sampler=constant_sampler, nthread=1, **ENV_KW
        )
        env.reset(seed=seed + i)
        prev = np.zeros(4)
        for t, u in enumerate(actions[:, i]):
            change_sq = float(np.sum((u - prev) ** 2))
            total = 0.0
            for _ in range(repeat):
                _, _, term, trunc, info = env.step(u[None])
                total += reward(float(info["position_error"][0]), change_sq, progress)
                flown[t, i] += 1
                if term[0] or trunc[0]:
                    break
            rewards[t, i] = max(PRECISION_FLOOR, total / repeat)
            prev = u
            if term[0] or trunc[0]:
                env.step(np.zeros((1, 4)))  # NEXT_STEP: the reset
                prev = np.zeros(4)
        env.close()
    return rewards, flown


@pytest.mark.parametrize("repeat", [1, 2, 3])
def test_the_training_env_pays_the_documented_precision_reward_in_0_1(repeat):
    """With ``precision`` every decision pays the mean over its ``action_repeat`` periods of
    ``P(‖e_p‖, ‖u_t − u_{t−1}‖², progress)`` (periods after a crash or the time limit pay 0),
    every one in (0, 1], whatever the random actions; the progress set is the one used."""
    pytest.importorskip("stable_baselines3")
    from residual_quad.training.ppo_vec import QuadVecEnv

    seed, steps, progress = 3, 30, 0.3
    actions = _actions(steps)
    want, flown = _expected(ANNEALED, repeat, seed, actions, progress)
    venv = QuadVecEnv(
        len(SCENARIOS),
        constant_sampler,
        action_repeat=repeat,
        nthread=1,
        scenarios=SCENARIOS,
        precision=ANNEALED,
        **ENV_KW,
    )
    venv.seed(seed)
    venv.reset()
    venv.set_progress(progress)
    ends = 0
    for t in range(steps):
        _, rewards, dones, infos = venv.step(actions[t].astype(np.float32))
        assert rewards.dtype == np.float32
        assert np.all(rewards > 0) and np.all(rewards <= 1), (t, rewards)
        np.testing.assert_allclose(rewards, want[t], rtol=1e-6, atol=0)
        assert [info["control_steps"] for info in infos] == flown[t].tolist()
        ends += int(dones.sum())
    venv.close()
    assert ends >= 3  # episodes ended (both ways with these actions), mid-repeat too
    assert (flown < repeat).any() == (repeat > 1)


def test_precision_refuses_the_env_rewards_shaping_and_a_bad_progress():
    pytest.importorskip("stable_baselines3")
    from residual_quad.training.ppo_vec import QuadVecEnv

    kw = dict(scenarios=SCENARIOS[:1], nthread=1, precision=DEFAULT, **ENV_KW)
    with pytest.raises(ValueError, match="replaces the action cost and the log position cost"):
        QuadVecEnv(1, constant_sampler, action_cost=(0.5, 0.0), **kw)
    with pytest.raises(ValueError, match="replaces the action cost and the log position cost"):
        QuadVecEnv(1, constant_sampler, position_log=(1.0, 0.01), **kw)
    venv = QuadVecEnv(1, constant_sampler, **kw)
    venv.set_progress(1.7)
    assert venv.progress == 1.0  # the last rollout may overshoot the budget
    with pytest.raises(ValueError, match="progress must be a finite number"):
        venv.set_progress(float("nan"))
    venv.close()


def test_the_default_reward_is_the_env_reward_as_before():
    """``reward: env`` (the default, every shipped config) builds the training env without a
    precision reward, and its rewards are bit for bit those of the env built as before this
    option existed (here with the shipped ``ppo_res`` shaping: the log cost and the action
    costs); a ``precision`` section beside ``reward: env`` changes nothing."""
    pytest.importorskip("stable_baselines3")
    from residual_quad.training.ppo_model import make_training_env
    from residual_quad.training.ppo_vec import QuadVecEnv, ScenarioSampler

    shaping = {"position_log": 1.0, "action_smooth": 1.0, "action_magnitude": 1.0}
    small = PPOHyperparams(n_steps=32, batch_size=32)
    cfg = PPOTrainConfig(n_envs=3, env_threads=1, episode_s=0.25, ppo=small, **shaping)
    other = PPOTrainConfig(**{**vars(cfg), "precision": ANNEALED})
    before = QuadVecEnv(  # make_training_env's call as it was
        3,
        ScenarioSampler(cfg.payloads, cfg.winds, cfg.trajectories, cfg.start_pos_noise),
        action_repeat=cfg.action_repeat,
        nthread=1,
        scenario_seed=cfg.seed,
        features=cfg.features.spec(),
        action_mode=cfg.action_mode,
        episode_s=cfg.episode_s,
        reward_weights=cfg.reward_weights,
        max_position_error=cfg.max_position_error,
        action_cost=(1.0, 1.0),
        position_log=(1.0, 0.01),
    )
    envs = [make_training_env(cfg), make_training_env(other), before]
    assert envs[0].unwrapped.precision is None and envs[1].unwrapped.precision is None
    for venv in envs:
        venv.seed(5)
        venv.reset()
    actions = np.random.default_rng(2).uniform(-0.5, 0.3, (60, 3, 4)).astype(np.float32)
    for u in actions:
        (_, r0, d0, _), (_, r1, _, _), (_, r2, d2, _) = (venv.step(u) for venv in envs)
        assert np.array_equal(r0, r2) and np.array_equal(r1, r2) and np.array_equal(d0, d2)
    for venv in envs:
        venv.close()


# ---------------------------------------------------------------------------- training, resume


#: the finest tolerance annealed from 0.8 m to 0.02 m over the whole budget
OVER_THE_RUN = PrecisionReward(anneal_from=0.8, anneal_fraction=1.0)


def _run_config(**kw) -> PPOTrainConfig:
    """A 512-step run of 2 envs (4 rollouts of 128), a checkpoint at 256, with an annealed
    precision reward."""
    base = {
        "seed": 2,
        "total_steps": 512,
        "n_envs": 2,
        "episode_s": 2.0,
        "eval_freq": 0,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "checkpoint_freq": 256,
        "env_threads": 1,
        "ppo": PPOHyperparams(n_steps=64, batch_size=64, n_epochs=1),
        "reward": "precision",
        "precision": OVER_THE_RUN,
    }
    return PPOTrainConfig(**{**base, **kw})


def test_a_resumed_run_anneals_on_from_where_it_stopped(tmp_path, monkeypatch):
    """The env's progress is the model's step count over the budget: 0 at a fresh start, then
    one step of every env at a time; a run interrupted after its checkpoint at 256 of 512 steps
    resumes at progress 0.5 (the finest tolerance ``sqrt(0.8·0.02)`` m, annealed over the
    whole budget), not at 0. The
    policy files record the reward, and every reward of the run was in (0, 1]."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback

    from residual_quad.controllers.policy_file import read_meta
    from residual_quad.training import callbacks as callbacks_mod
    from residual_quad.training.ppo import train
    from residual_quad.training.ppo_vec import QuadVecEnv

    seen: list[float] = []
    rewards: list[np.ndarray] = []
    set_progress, step_wait = QuadVecEnv.set_progress, QuadVecEnv.step_wait

    def spy_progress(self, progress):
        seen.append(progress)
        set_progress(self, progress)

    def spy_step(self):
        out = step_wait(self)
        rewards.append(out[1])
        return out

    monkeypatch.setattr(QuadVecEnv, "set_progress", spy_progress)
    monkeypatch.setattr(QuadVecEnv, "step_wait", spy_step)

    class Interrupt(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps > 256:
                raise KeyboardInterrupt
            return True

    real = callbacks_mod.training_callbacks

    def interrupted(*args):
        callbacks = real(*args)
        callbacks.extra.append(Interrupt())
        return callbacks

    out, cfg = tmp_path / "run", _run_config()
    monkeypatch.setattr(callbacks_mod, "training_callbacks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, progress=False)
    monkeypatch.setattr(callbacks_mod, "training_callbacks", real)
    first = list(seen)
    assert first[0] == 0.0 and first[1] == 2 / 512  # fresh: from 0, one step of 2 envs at a time
    assert first[-1] == 258 / 512
    seen.clear()
    summary = train(cfg, out, progress=False, resume=True)
    assert summary["resumed_at_steps"] == 256 and summary["steps"] == 512
    assert seen[0] == 0.5 and seen[1] == 258 / 512 and seen[-1] == 1.0
    assert OVER_THE_RUN.tolerances_at(seen[0])[-1] == pytest.approx(math.sqrt(0.8 * 0.02))
    assert OVER_THE_RUN.tolerances_at(seen[-1])[-1] == pytest.approx(0.02)
    all_rewards = np.concatenate(rewards)
    assert len(all_rewards) >= 2 * 512 // 2 and np.all(all_rewards > 0)
    assert np.all(all_rewards <= 1)
    for name in ("final.zip", "checkpoints/ppo_256.zip"):
        meta = read_meta(out / name)
        assert meta["config"]["reward"] == "precision"
        assert configs.load(PPOTrainConfig, meta["config"]).precision == OVER_THE_RUN
        assert recorded_reward(meta) == (
            "precision (σ 0.5, 0.1, 0.02 m; the finest from 0.8 m over 100 % of the budget)"
        )
