"""Off-policy baselines (SAC, TQC): config checks, numpy forward, controllers, smoke training."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.driver import LawBatch
from residual_quad.controllers.features import FEATURE_DIM
from residual_quad.controllers.policy_file import PolicyFileError, algo_module, read_meta
from residual_quad.controllers.ppo import PPOController
from residual_quad.envs.observation import OBS_DIM
from residual_quad.training.ppo_config import ALGOS, OffPolicyHyperparams, PPOTrainConfig

ALGO_PARAMS = [
    pytest.param("sac", id="sac"),
    pytest.param("tqc", id="tqc"),
]


# ----------------------------------------------------------------------------- config
def test_shipped_offpolicy_configs_load():
    for algo in ("sac", "tqc"):
        cfg = configs.load(PPOTrainConfig, algo)
        assert cfg.algo == algo and cfg.deployed_name() == algo
        assert not cfg.normalize_reward and cfg.discount() == cfg.offpolicy.gamma
        assert cfg.offpolicy.resolved_gradient_steps(cfg.resolved_envs()) == 16


def test_gradient_steps_scale_with_the_envs():
    h = OffPolicyHyperparams(replay_ratio=0.25)
    assert [h.resolved_gradient_steps(n) for n in (1, 2, 16, 64)] == [1, 1, 4, 16]
    assert OffPolicyHyperparams(gradient_steps=3).resolved_gradient_steps(64) == 3


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"algo": "dqn"}, r"algo must be one of \('ppo', 'sac', 'tqc'\)"),
        ({"algo": "sac", "controller": "ppo_adapt"}, "ppo_adapt is PPO only"),
        ({"algo": "sac", "privileged_critic": True}, "PPO only"),
        ({"algo": "sac", "offpolicy": {"ent_coef": "x"}}, "ent_coef"),
        ({"algo": "sac", "offpolicy": {"ent_coef": -1.0}}, "ent_coef"),
        ({"algo": "sac", "offpolicy": {"batch_size": 0}}, "batch_size must be >= 1"),
        ({"algo": "sac", "offpolicy": {"buffer_size": 10, "batch_size": 20}}, "larger than"),
        ({"algo": "sac", "offpolicy": {"gradient_steps": 0}}, "gradient_steps"),
        ({"algo": "sac", "offpolicy": {"replay_ratio": 0.0}}, "replay_ratio"),
        ({"algo": "sac", "offpolicy": {"tau": 1.5}}, "tau"),
        ({"algo": "sac", "offpolicy": {"learning_starts": -1}}, "learning_starts"),
        ({"algo": "sac", "offpolicy": {"activation": "gelu"}}, "activation"),
        ({"algo": "tqc", "offpolicy": {"top_quantiles_to_drop_per_net": 25}}, "quantiles"),
        ({"algo": "sac", "offpolicy": {"net_arch": []}}, "net_arch"),
    ],
)
def test_bad_learner_settings_are_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        configs.load(PPOTrainConfig, "ppo", **kw)


def test_an_unknown_offpolicy_key_is_an_error():
    with pytest.raises(ValueError, match="n_steps"):
        configs.load(PPOTrainConfig, "sac", offpolicy={"n_steps": 4})


def test_algos_are_the_three():
    assert ALGOS == ("ppo", "sac", "tqc")


# ----------------------------------------------------------------------------- the policy file
_LOADED: dict = {}


def _loaded(path, algo: str):
    """The controller of ``path``, loaded once (hypothesis calls the test many times)."""
    if path not in _LOADED:
        _LOADED[path] = make_controller(algo, path=path)
    return _LOADED[path]


@pytest.mark.parametrize("algo", ALGO_PARAMS)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.1, 30.0))
def test_numpy_forward_equals_sb3_predict(offpolicy_policy, algo, seed, scale):
    ctrl = _loaded(offpolicy_policy(algo), algo)
    assert ctrl.network is not None and ctrl.network.squash
    x = np.random.default_rng(seed).normal(0.0, scale, (6, FEATURE_DIM)).astype(np.float32)
    expected, _ = ctrl.model.predict(x, deterministic=True)
    got = ctrl.actions(x)
    np.testing.assert_allclose(got, expected, atol=3e-6)
    assert np.array_equal(got[2:3], ctrl.actions(x[2:3]))  # one row = the batch's row


@pytest.mark.parametrize("algo", ALGO_PARAMS)
def test_batched_controller_equals_the_single_one(offpolicy_policy, algo):
    path = offpolicy_policy(algo)
    n = 3
    batch = make_batch_controller(algo, n, path=path)
    assert isinstance(batch, LawBatch) and isinstance(batch.law, PPOController)  # ppo's law
    singles = [make_controller(algo, path=path) for _ in range(n)]
    rng = np.random.default_rng(1)
    batch.reset_batch()
    for c in singles:
        c.reset(0)
    for _ in range(6):
        obs = rng.normal(0.0, 1.0, (n, OBS_DIM))
        obs[1, 0] = np.nan if _ == 3 else obs[1, 0]  # a bad sample holds, in both
        got = batch.policy_batch(obs)
        want = np.stack([c.policy(o) for c, o in zip(singles, obs, strict=True)])
        assert np.array_equal(got, want)


@pytest.mark.parametrize("algo", ALGO_PARAMS)
def test_a_policy_of_another_kind_is_refused(offpolicy_policy, algo):
    path = offpolicy_policy(algo)
    with pytest.raises(PolicyFileError, match=f"fly it with the '{algo}' controller"):
        make_controller("ppo", path=path)
    with pytest.raises(ValueError, match=f"fly it with the '{algo}' controller"):
        make_controller("sb3", path=path)
    other = "tqc" if algo == "sac" else "sac"
    with pytest.raises(PolicyFileError, match=f"fly it with the '{algo}' controller"):
        make_controller(other, path=path)


def test_an_offpolicy_record_with_privileged_columns_is_refused(offpolicy_policy, tmp_path):
    import shutil

    from residual_quad.controllers.policy_file import write_meta

    path = shutil.copy(offpolicy_policy("sac"), tmp_path / "priv.zip")
    meta = {"controller": "sac", "algo": "sac", "action_mode": "rotor", "obs_norm": None}
    write_meta(path, {**meta, "privileged_columns": ["payload_kg"]})
    with pytest.raises(PolicyFileError, match="PPO only"):
        make_controller("sac", path=path)


def test_no_shipped_offpolicy_policy():
    pytest.importorskip("stable_baselines3")
    with pytest.raises(ValueError, match="no 'sac' policy is shipped: give path="):
        make_controller("sac")


def test_tqc_without_sb3_contrib_gives_the_install_hint(monkeypatch):
    pytest.importorskip("stable_baselines3")
    import builtins

    real = builtins.__import__

    def hide(name, *args, **kwargs):
        if name.startswith("sb3_contrib"):
            raise ImportError("sb3_contrib hidden")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", hide)
    monkeypatch.delitem(__import__("sys").modules, "sb3_contrib", raising=False)
    with pytest.raises(ImportError, match=r"residual-quad\[rl\]' \(sb3-contrib\)"):
        algo_module("tqc")
    with pytest.raises(ImportError, match="sb3-contrib"):
        make_controller("tqc", path="policy.zip")


# ----------------------------------------------------------------------------- training
def _tiny(algo: str, **kw) -> PPOTrainConfig:
    base = {
        "seed": 3,
        "total_steps": 512,
        "n_envs": 2,
        "episode_s": 2.0,
        "eval_freq": 0,
        "checkpoint_freq": 256,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "algo": algo,
        "normalize_reward": False,
        "offpolicy": OffPolicyHyperparams(
            buffer_size=2000, batch_size=32, learning_starts=128, net_arch=[16, 16], n_quantiles=5
        ),
    }
    return PPOTrainConfig(**{**base, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGO_PARAMS)
def test_smoke_training_writes_a_loadable_offpolicy_policy(tmp_path, algo):
    from residual_quad.training.ppo import train

    pytest.importorskip("sb3_contrib" if algo == "tqc" else "stable_baselines3")
    summary = train(_tiny(algo), tmp_path, progress=False)
    assert summary["steps"] == 512
    meta = read_meta(tmp_path / "final.zip")
    assert (meta["controller"], meta["algo"]) == (algo, algo)
    assert sorted((tmp_path / "checkpoints").glob("ppo_*.zip"))
    from residual_quad.training.tb_logging import read_scalars

    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    scalars = read_scalars(events[0].parent)
    for tag in ("rollout/pos_err_m", "eval/crashes", "train/actor_loss"):
        assert tag in scalars, f"{tag} missing from {sorted(scalars)}"
    for name in ("final.zip", "best.zip"):
        ctrl = make_controller(algo, path=tmp_path / name)
        assert ctrl.network is not None and ctrl.normalizer is not None
    with pytest.raises(ValueError, match="resume is PPO only"):
        train(_tiny(algo), tmp_path, progress=False, resume=True)


@pytest.mark.slow
def test_seeded_sac_training_is_reproducible(tmp_path):
    from residual_quad.training.ppo import train

    pytest.importorskip("stable_baselines3")
    cfg = _tiny("sac", checkpoint_freq=0, total_steps=384)
    params = []
    for run in ("a", "b"):
        train(cfg, tmp_path / run, progress=False)
        model = algo_module("sac").load(tmp_path / run / "final.zip", device="cpu")
        params.append([p.detach().numpy().copy() for p in model.policy.parameters()])
    assert all(np.array_equal(a, b) for a, b in zip(*params, strict=True))


@pytest.mark.slow
def test_rquad_train_sac_exports_and_refuses_resume(tmp_path, capsys):
    """The CLI target end to end: a tiny config, ``--export``, then ``--resume`` refused."""
    pytest.importorskip("stable_baselines3")
    from residual_quad.cli import main

    tiny = tmp_path / "tiny.yaml"
    configs.dump(_tiny("sac", total_steps=256, checkpoint_freq=0), tiny)
    run, dest = tmp_path / "run", tmp_path / "sac_export.zip"
    args = ["train", "sac", str(tiny), "--out", str(run), "--no-progress", "--export", str(dest)]
    assert main(args) == 0
    budget = read_meta(dest)["budget"]
    assert budget["steps"] == 256 and budget["command"].startswith("rquad train sac")
    assert make_controller("sac", path=dest).action_repeat == 2
    capsys.readouterr()
    (run / "final.zip").unlink()  # an "interrupted" run with its config
    assert main(["train", "sac", "--out", str(run), "--resume", "--no-progress"]) == 2
    assert "resume is PPO only" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGO_PARAMS)
def test_an_acceleration_policy_learned_off_policy_flies_as_its_kind(tmp_path, algo):
    """SAC/TQC at the trackers' action level: the file is a ``ppo_acc`` one that records its
    learner, flies through ``ppo_acc``'s law (its numpy forward is SB3's deterministic action)
    and exports a command that names the run's own config (the kind's default is PPO's)."""
    from residual_quad.episode import run_episode
    from residual_quad.training.ppo import export_policy, train

    pytest.importorskip("sb3_contrib" if algo == "tqc" else "stable_baselines3")
    cfg = _tiny(algo, controller="ppo_acc", checkpoint_freq=0, total_steps=256)
    assert cfg.deployed_name() == "ppo_acc"
    train(cfg, tmp_path / "run", progress=False)
    meta = read_meta(tmp_path / "run" / "final.zip", "ppo_acc")
    assert (meta["controller"], meta["algo"]) == ("ppo_acc", algo)
    ctrl = make_controller("ppo_acc", path=tmp_path / "run" / "final.zip")
    assert ctrl.network is not None and ctrl.network.squash
    x = np.random.default_rng(0).normal(0.0, 2.0, (5, ctrl.normalizer.mean.size))
    x = x.astype(np.float32)
    expected, _ = ctrl.model.predict(x, deterministic=True)
    np.testing.assert_allclose(ctrl.actions(x), expected, atol=3e-6)
    result = run_episode(ctrl, payload="light", wind="breezy", trajectory="hover", episode_s=4.0)
    assert result.steps > 0 and (
        result.diverged or np.isfinite(result.rmse)
    )  # untrained: may crash
    with pytest.raises(PolicyFileError, match="a 'ppo_acc' policy"):
        make_controller(algo, path=tmp_path / "run" / "final.zip")
    budget = export_policy(tmp_path / "run", tmp_path / "acc.zip", which="final")
    assert budget["command"].startswith(f"rquad train ppo_acc {tmp_path / 'run'}/config.yaml")


def test_a_ppo_adapt_record_learned_off_policy_is_refused(offpolicy_policy, tmp_path):
    """Only acceleration kinds may be learned off-policy: a ``ppo_adapt`` record naming SAC is
    a one-line error naming both learners' rule."""
    import shutil

    from residual_quad.controllers.policy_file import write_meta

    path = shutil.copy(offpolicy_policy("sac"), tmp_path / "adapt.zip")
    meta = {"controller": "ppo_adapt", "algo": "sac", "action_mode": "rotor", "obs_norm": None}
    write_meta(path, meta)
    with pytest.raises(PolicyFileError, match="algo 'sac': a 'ppo_adapt' policy is trained with"):
        read_meta(path, "ppo_adapt")
