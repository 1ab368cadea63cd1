"""PPO on the vector env: the SB3 VecEnv adapter vs the vector env, training, resume, bad input."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

from residual_quad import configs  # noqa: E402
from residual_quad.cli import main  # noqa: E402
from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.features import (  # noqa: E402
    FEATURE_NAMES,
    ppo_features,
    ppo_features_batch,
)
from residual_quad.controllers.policy_file import read_meta  # noqa: E402
from residual_quad.envs.observation import ObsLayout as L  # noqa: E402
from residual_quad.envs.vector_env import ResidualQuadVectorEnv  # noqa: E402
from residual_quad.training import callbacks as callbacks_mod  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_model import make_training_env, new_model  # noqa: E402
from residual_quad.training.ppo_vec import (  # noqa: E402
    QuadVecEnv,
    ScenarioSampler,
    _MaskedVectorEnv,
)
from residual_quad.training.tb_logging import read_scalars  # noqa: E402

SCENARIOS = [
    {"payload": "none", "wind": "windy", "trajectory": "helix"},
    {"payload": "heavy", "wind": "breezy", "trajectory": "figure8"},
    {"payload": "light", "wind": "calm", "trajectory": "hover"},
    {"payload": "heavy", "wind": "windy", "trajectory": "hover"},
]
NEXT = {"payload": "light", "wind": "windy", "trajectory": "figure8"}  # every later episode
# short episodes that end both ways: the time limit (0.25 s, mid-repeat when holding actions
# for 2 periods) and the position bound (0.25 m)
ENV_KW = {"episode_s": 0.25, "max_position_error": 0.25, "action_mode": "rotor"}


def constant_sampler(rng: np.random.Generator) -> dict:
    return dict(NEXT)


def policy(features: np.ndarray) -> np.ndarray:
    """A fixed deterministic map from features to rotor actions (some envs drift out)."""
    w = np.random.default_rng(7).normal(0.0, 0.05, (4, features.shape[-1]))
    return np.clip(-0.2 + np.tanh(features @ w.T), -1.0, 1.0).astype(np.float32)


def test_batched_features_equal_the_per_row_features():
    env = ResidualQuadVectorEnv(len(SCENARIOS), scenarios=SCENARIOS, nthread=1)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    rows = [obs]
    for _ in range(150):
        obs, *_ = env.step(rng.uniform(-0.35, 0.1, (len(SCENARIOS), 4)))
        rows.append(obs)
    env.close()
    o = np.concatenate(rows)
    o[::7, L.ref_yaw] += 2.5  # large heading errors too
    batch = ppo_features_batch(o)
    single = np.stack([ppo_features(x) for x in o])
    assert batch.shape == single.shape == (len(o), len(FEATURE_NAMES))
    assert batch.dtype == np.float32
    differ = batch != single
    # only R_h[1, 0] (analytically 0: the heading frame removes the yaw) differs, by rounding
    # noise (matrix product vs the explicit sums); every other entry is bit for bit equal
    assert set(np.nonzero(differ)[1].tolist()) <= {FEATURE_NAMES.index("R_h_10")}
    assert np.all(np.abs(batch[differ]) < 1e-14) and np.all(np.abs(single[differ]) < 1e-14)
    with pytest.raises(ValueError, match=r"shape \(n, 36\)"):
        ppo_features_batch(o[0])


def _reference_streams(seed: int, action_repeat: int, steps: int) -> list[list[dict]]:
    """What the adapter must return, per env: each env alone in a 1-env vector env (bit-equal to
    its row of a batch), held actions and NEXT_STEP autoreset done by hand."""
    streams = []
    for i, scenario in enumerate(SCENARIOS):
        env = ResidualQuadVectorEnv(
            1, scenarios=[scenario], sampler=constant_sampler, nthread=1, **ENV_KW
        )
        obs, _ = env.reset(seed=seed + i)
        feat = ppo_features_batch(obs)
        records = []
        for _ in range(steps):
            action = policy(feat)
            total, done = 0.0, False
            for _ in range(action_repeat):
                obs, rew, term, trunc, _ = env.step(action)
                total += rew[0]
                if term[0] or trunc[0]:
                    done = True
                    break
            record = {"reward": np.float32(total), "done": done}
            feat = ppo_features_batch(obs)
            if done:
                record["terminal"] = feat[0]
                record["truncated"] = bool(trunc[0] and not term[0])
                obs, rew, term, trunc, _ = env.step(np.zeros((1, 4)))  # NEXT_STEP: the reset
                assert rew[0] == 0 and not term[0] and not trunc[0]
                feat = ppo_features_batch(obs)
            record["obs"] = feat[0]
            records.append(record)
        env.close()
        streams.append(records)
    return streams


@pytest.mark.parametrize("action_repeat", [1, 2])
def test_adapter_equals_stepping_the_vector_env(action_repeat):
    seed, steps = 11, 40
    expected = _reference_streams(seed, action_repeat, steps)
    venv = QuadVecEnv(
        len(SCENARIOS),
        constant_sampler,
        action_repeat=action_repeat,
        nthread=1,
        scenarios=SCENARIOS,
        **ENV_KW,
    )
    venv.seed(seed)
    obs = venv.reset()
    ends = {"terminated": 0, "truncated": 0}
    ended = [0] * len(SCENARIOS)
    for t in range(steps):
        obs, rewards, dones, infos = venv.step(policy(obs))
        assert obs.dtype == np.float32 and rewards.dtype == np.float32
        for i, stream in enumerate(expected):
            want = stream[t]
            assert np.array_equal(obs[i], want["obs"]), (t, i)
            assert rewards[i] == want["reward"], (t, i)
            assert dones[i] == want["done"], (t, i)
            if want["done"]:
                assert np.array_equal(infos[i]["terminal_observation"], want["terminal"])
                assert infos[i]["TimeLimit.truncated"] == want["truncated"]
                ends["truncated" if want["truncated"] else "terminated"] += 1
                assert infos[i]["diverged"] == (not want["truncated"])
                # the scenario of the episode that ended: the first one, then NEXT
                was = SCENARIOS[i] if ended[i] == 0 else NEXT
                assert infos[i]["scenario"] == tuple(was.values())
                ended[i] += 1
            else:
                assert "terminal_observation" not in infos[i]
                assert "TimeLimit.truncated" not in infos[i]
            assert 1 <= infos[i]["control_steps"] <= action_repeat
    venv.close()
    assert ends["terminated"] >= 2 and ends["truncated"] >= 2, ends  # both ways exercised


def test_pooled_autoreset_equals_the_vector_envs_own():
    """The adapter's env reuse at autoreset changes no number: the same sampler draws and
    actions give the vector env's own observations and scenarios."""
    sampler = ScenarioSampler(["none", "heavy"], ["calm", "windy"], ["hover", "helix"], 0.1)
    noise = {"pos_noise": 0.01, "gyro_noise": 0.02}  # sensor streams reseeded per episode too
    kw = {"scenarios": SCENARIOS, "sampler": sampler, "nthread": 1, **ENV_KW, **noise}
    mine, theirs = _MaskedVectorEnv(4, **kw), ResidualQuadVectorEnv(4, **kw)
    a, _ = mine.reset(seed=3)
    b, _ = theirs.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(120):
        actions = rng.uniform(-0.3, 0.0, (4, 4))
        a, ra, *_ = mine.step(actions)
        b, rb, *_ = theirs.step(actions)
        assert np.array_equal(a, b) and np.array_equal(ra, rb)
    assert [str(s) for s in mine.scenarios] == [str(s) for s in theirs.scenarios]
    assert sum(len(v) for v in mine._spare.values()) > 0  # reuse happened
    mine.close(), theirs.close()


def test_sampler_draws_the_grid_and_start_offsets():
    sampler = ScenarioSampler(["none", "light"], ["calm"], ["hover", "helix", "figure8"], 0.2)
    rng = np.random.default_rng(0)
    draws = [sampler(rng) for _ in range(200)]
    assert {(d["payload"], d["trajectory"]) for d in draws} == {
        (p, t) for p in ("none", "light") for t in ("hover", "helix", "figure8")
    }
    offsets = np.array([d["options"]["position_offset"] for d in draws])
    assert np.all(np.abs(offsets) <= 0.2) and np.all(offsets[:, 2] >= -0.1)
    assert "options" not in ScenarioSampler(["none"], ["calm"], ["hover"])(rng)


def test_a_payload_listed_k_times_is_drawn_k_times_as_often():
    """Repetition is the sampler's weighting: ``[0.0, 0.0, 0.0, 0.3]`` draws the unloaded airframe
    three times as often as 0.3 kg (40 000 seeded draws: 3/4 ± 5 standard errors)."""
    sampler = ScenarioSampler([0.0, 0.0, 0.0, 0.3], ["calm", "windy"], ["hover"])
    rng = np.random.default_rng(0)
    n = 40_000
    share = sum(sampler(rng)["payload"] == 0.0 for _ in range(n)) / n
    assert abs(share - 0.75) < 5 * (0.75 * 0.25 / n) ** 0.5, share
    winds = [sampler(rng)["wind"] for _ in range(4000)]  # the other lists stay uniform
    assert abs(winds.count("calm") / 4000 - 0.5) < 5 * (0.25 / 4000) ** 0.5


def _vec_config(**kw) -> PPOTrainConfig:
    base = {
        "seed": 4,
        "total_steps": 4096,
        "n_envs": 8,
        "episode_s": 5.0,
        "eval_freq": 2048,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "checkpoint_freq": 2048,
        "env_threads": 1,
        "ppo": PPOHyperparams(n_steps=128, batch_size=256, n_epochs=2),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


@pytest.fixture(scope="module")
def vec_run(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ppo_vec")
    return out, train(_vec_config(), out, progress=False)


def test_smoke_training_on_the_vector_env(vec_run):
    out, summary = vec_run
    assert summary["backend"] == "vector" and summary["n_envs"] == 8
    assert summary["steps"] == 4096 and summary["control_steps"] > summary["steps"]
    assert configs.load(PPOTrainConfig, out / "config.yaml") == _vec_config()
    scalars = read_scalars(next((out / "tb").rglob("events.out.tfevents.*")).parent)
    for tag in ("train/value_loss", "rollout/ep_rew_mean", "rollout/pos_err_m", "eval/crashes"):
        assert tag in scalars, f"{tag} missing from {sorted(scalars)}"
    for steps in (2048, 4096):
        assert (out / "checkpoints" / f"ppo_{steps}.zip").is_file()
        assert (out / "checkpoints" / f"ppo_{steps}.vecnormalize.pkl").is_file()
    assert not list((out / "checkpoints").glob(".*"))  # no temporary files left
    for name in ("final.zip", "best.zip", "checkpoints/ppo_2048.zip"):
        ctrl = make_controller("ppo", path=out / name)  # the policy format is unchanged
        assert ctrl.action_mode == "rotor" and ctrl.normalizer is not None
    assert read_meta(out / "final.zip")["budget"]["backend"] == "vector"


def _first_rollout(seed: int) -> tuple[dict, list[np.ndarray]]:
    cfg = _vec_config(seed=seed, total_steps=1024)
    venv = VecNormalize(make_training_env(cfg), gamma=cfg.ppo.gamma)
    venv.seed(seed)
    model = new_model(cfg, venv)
    model.learn(1024)  # one rollout of 8 envs x 128 steps, one update
    buf = model.rollout_buffer
    rollout = {k: getattr(buf, k).copy() for k in ("observations", "actions", "rewards")}
    params = [p.detach().numpy().copy() for p in model.policy.parameters()]
    venv.close()
    return rollout, params


def test_same_seed_same_first_rollout_and_parameters():
    (ra, pa), (rb, pb), (rc, _) = _first_rollout(2), _first_rollout(2), _first_rollout(3)
    for key in ra:
        assert np.array_equal(ra[key], rb[key]), key
    assert all(np.array_equal(a, b) for a, b in zip(pa, pb, strict=True))
    assert not np.array_equal(ra["observations"], rc["observations"])  # the seed matters


class _Interrupt(BaseCallback):
    def _on_step(self) -> bool:
        if self.num_timesteps > 2048:
            raise KeyboardInterrupt
        return True


def test_an_interrupted_run_resumes_from_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real = callbacks_mod.training_callbacks

    def interrupted(*args):
        callbacks = real(*args)
        callbacks.extra.append(_Interrupt())
        return callbacks

    monkeypatch.setattr(callbacks_mod, "training_callbacks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(_vec_config(), out, progress=False)
    monkeypatch.setattr(callbacks_mod, "training_callbacks", real)
    assert sorted(p.name for p in (out / "checkpoints").glob("*.zip")) == ["ppo_2048.zip"]
    assert not (out / "final.zip").exists()
    before = read_meta(out / "checkpoints" / "ppo_2048.zip")["resume"]
    argv = ["train", "ppo", "--out", str(out), "--resume", "--steps", "6144", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    summary = configs_summary(out)
    assert summary["steps"] == 6144 and summary["resumed_at_steps"] == 2048
    assert summary["control_steps"] > before["control_steps"] + 4096
    assert [e["steps"] for e in summary["evals"]][:1] == [2048]  # history carried over
    assert {4096, 6144} <= {e["steps"] for e in summary["evals"]}
    assert (out / "checkpoints" / "ppo_6144.zip").is_file()
    assert configs.load(PPOTrainConfig, out / "config.yaml").total_steps == 6144
    assert make_controller("ppo", path=out / "final.zip").normalizer is not None
    # finished: nothing more to resume
    assert main(argv) == 2
    assert "finished run" in capsys.readouterr().err


def configs_summary(out: Path) -> dict:
    import json

    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n-envs", "5000"], "n_envs 5000 is more than the vector backend's 4096"),
        (["--n-envs", "65", "--backend", "subproc"], "backend 'subproc' is retired"),
        (["--n-envs", "64", "--steps", "1000"], r"total_steps 1000 is less than one rollout"),
        (["--n-envs", "0"], "must be"),
        (["--backend", "ray"], "invalid choice"),
    ],
)
def test_bad_n_envs_and_budgets_fail_before_training(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    try:
        rc = main(["train", "ppo", "--out", str(out), *args])
    except SystemExit as exc:  # argparse refuses it at parse time
        rc = exc.code
    assert rc == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not out.exists()


def test_batch_larger_than_a_rollout_is_refused():
    with pytest.raises(ValueError, match=r"batch_size 512 is larger than one rollout .* = 256"):
        _vec_config(n_envs=2, ppo=PPOHyperparams(n_steps=128, batch_size=512))
    with pytest.raises(ValueError, match="backend must be one of"):
        _vec_config(backend="threads")


def test_resume_errors_name_the_missing_or_corrupt_file(tmp_path, capsys, vec_run):
    def resume(out: Path) -> str:
        assert main(["train", "ppo", "--out", str(out), "--resume", "--no-progress"]) == 2
        return capsys.readouterr().err

    assert "no " + str(tmp_path / "none" / "config.yaml") in resume(tmp_path / "none")
    run = tmp_path / "run"
    run.mkdir()
    cfg = _vec_config(total_steps=8192)
    configs.dump(cfg, run / "config.yaml")
    assert f"no checkpoint (ppo_<steps>.zip) in {run / 'checkpoints'}" in resume(run)
    ckpt = run / "checkpoints"
    ckpt.mkdir()
    (ckpt / "ppo_4096.zip").write_bytes(b"not a zip at all" * 20)
    err = resume(run)
    assert "ppo_4096.zip" in err and "corrupt" in err
    # a real checkpoint with its normalization state missing, then corrupt
    shutil.copy(vec_run[0] / "checkpoints" / "ppo_4096.zip", ckpt / "ppo_4096.zip")
    assert "ppo_4096.vecnormalize.pkl" in resume(run)
    (ckpt / "ppo_4096.vecnormalize.pkl").write_bytes(b"\x80\x04garbage")
    err = resume(run)
    assert "cannot load the normalization state" in err and "ppo_4096.vecnormalize.pkl" in err
    # a checkpoint of another config
    shutil.copy(vec_run[0] / "checkpoints" / "ppo_4096.vecnormalize.pkl", ckpt)
    configs.dump(_vec_config(total_steps=8192, seed=9), run / "config.yaml")
    err = resume(run)
    assert "another training config (differs in ['seed'])" in err and "ppo_4096.zip" in err
    # flags that would change the run are refused with --resume
    argv = ["train", "ppo", "--out", str(run), "--resume", "--seed", "1"]
    assert main(argv) == 2 and "drop --seed" in capsys.readouterr().err
    assert math.isfinite(cfg.total_steps)


def test_sb3_eval_and_checkpoint_callbacks_run_on_the_adapter(tmp_path):
    """SB3's own EvalCallback (normalization synced into a VecNormalize eval env) and
    CheckpointCallback (with the VecNormalize state) work on the adapter."""
    from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
    from stable_baselines3.common.vec_env import VecMonitor

    cfg = _vec_config(n_envs=4, total_steps=1024, ppo=PPOHyperparams(n_steps=128, batch_size=256))
    train_env = VecNormalize(make_training_env(cfg), gamma=cfg.ppo.gamma)
    sampler = ScenarioSampler(["light"], ["breezy"], ["hover"])
    eval_env = VecNormalize(
        VecMonitor(QuadVecEnv(2, sampler, action_repeat=2, nthread=1, episode_s=0.5)),
        training=False,
        norm_reward=False,
    )
    model = new_model(cfg, train_env)
    evaluator = EvalCallback(
        eval_env, n_eval_episodes=2, eval_freq=128, log_path=str(tmp_path), verbose=0
    )  # eval_freq and save_freq count calls: 4 envs each → every 512 policy steps
    saver = CheckpointCallback(128, str(tmp_path), save_vecnormalize=True)
    model.learn(1024, callback=[evaluator, saver])
    assert evaluator.evaluations_timesteps == [512, 1024]
    assert np.all(np.isfinite(evaluator.evaluations_results))
    assert [len(x) for x in evaluator.evaluations_length] == [2, 2]
    assert np.array_equal(eval_env.obs_rms.mean, train_env.obs_rms.mean)  # synced
    assert sorted(p.name for p in tmp_path.glob("rl_model_*")) == [
        "rl_model_1024_steps.zip",
        "rl_model_512_steps.zip",
        "rl_model_vecnormalize_1024_steps.pkl",
        "rl_model_vecnormalize_512_steps.pkl",
    ]
    train_env.close(), eval_env.close()


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "interrupted"])
def test_training_into_a_folder_with_a_run_is_refused(tmp_path, capsys, finished):
    """A fresh ``rquad train ppo`` never writes over another run's policies."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ppo_2048.zip").write_bytes(b"checkpoint of the first run")
    if finished:
        for name in ("final.zip", "best.zip", "summary.json"):
            (run / name).write_bytes(f"{name} of the first run".encode())
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    tiny = configs.dump(
        _vec_config(total_steps=1024, eval_freq=0, checkpoint_freq=0), tmp_path / "t.yaml"
    )
    assert main(["train", "ppo", str(tiny), "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run) in err
    assert ("choose a new --out" in err) if finished else ("--resume continues it" in err)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_falls_back_past_a_corrupt_newest_checkpoint(tmp_path, capsys, vec_run):
    run = tmp_path / "run"
    ckpt = run / "checkpoints"
    ckpt.mkdir(parents=True)
    configs.dump(_vec_config(), run / "config.yaml")
    for name in ("ppo_2048.zip", "ppo_2048.vecnormalize.pkl", "ppo_4096.vecnormalize.pkl"):
        shutil.copy(vec_run[0] / "checkpoints" / name, ckpt / name)
    (ckpt / "ppo_4096.zip").write_bytes(b"truncated" * 10)  # the newest: corrupt
    argv = ["train", "ppo", "--out", str(run), "--resume", "--no-progress"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"skipped the checkpoint {ckpt / 'ppo_4096.zip'}" in err
    assert "resuming from ppo_2048.zip" in err
    assert configs_summary(run)["resumed_at_steps"] == 2048
    assert configs_summary(run)["steps"] == 4096


def test_resume_with_no_loadable_checkpoint_names_every_file(tmp_path, capsys):
    run = tmp_path / "run"
    ckpt = run / "checkpoints"
    ckpt.mkdir(parents=True)
    configs.dump(_vec_config(), run / "config.yaml")
    for steps in (2048, 4096):
        (ckpt / f"ppo_{steps}.zip").write_bytes(b"not a zip" * 10)
    assert main(["train", "ppo", "--out", str(run), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing to resume from" in err
    assert err.index("ppo_4096.zip") < err.index("ppo_2048.zip")  # newest first, both named
