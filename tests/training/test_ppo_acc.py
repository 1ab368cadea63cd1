"""``ppo_acc``: the learned outer loop — with a PD as its "policy" it is ``geo``; it trains,
ships through the policy-file machinery, flies one vehicle and a batch alike; bad configs and
files fail clearly."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.batch import make_batch_controller  # noqa: E402
from residual_quad.controllers.driver import LawBatch, LawController  # noqa: E402
from residual_quad.controllers.policy_file import (  # noqa: E402
    MAX_ACCEL_SCALE,
    META_ENTRY,
    PolicyFileError,
    write_entry,
)
from residual_quad.controllers.ppo_acc import AccelerationPPOController  # noqa: E402
from residual_quad.controllers.ppo_res import (  # noqa: E402
    ResidualPilot,
    heading_to_world,
    tracker_gains,
)
from residual_quad.controllers.trackers import DEFAULT_KD, DEFAULT_KP, GeoTracker  # noqa: E402
from residual_quad.envs.observation import ObsLayout as L  # noqa: E402
from residual_quad.envs.residual_quad_env import ResidualQuadEnv  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import (  # noqa: E402
    FeatureConfig,
    PPOHyperparams,
    PPOTrainConfig,
)
from residual_quad.training.precision import PrecisionReward  # noqa: E402

SCALE = 10.0  # m/s², the test policy's acceleration bound


def _config(**kw) -> PPOTrainConfig:
    base = {
        "controller": "ppo_acc",
        "accel_scale": SCALE,
        "seed": 0,
        "total_steps": 2048,
        "n_envs": 8,
        "episode_s": 5.0,
        "action_repeat": 1,
        "trajectory_draw": "randomized",
        "trajectories": ["hover", "lissajous", "spline"],
        "payloads": [0.0, 0.3],
        "reward": "precision",
        "precision": PrecisionReward(anneal_from=0.3),
        "env_kwargs": {"preview": [3, 0.06]},
        "features": FeatureConfig(preview_k=3, action_history=2, error_integral=True),
        "eval_freq": 0,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "checkpoint_freq": 1024,
        "env_threads": 1,
        "ppo": PPOHyperparams(n_steps=64, batch_size=256, n_epochs=2),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


@pytest.fixture(scope="module")
def acc_run(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ppo_acc")
    return out, train(_config(), out, progress=False)


def _observations(n: int = 12) -> np.ndarray:
    """Raw observations of varied vehicles (scenario starts stepped with random rotor actions)."""
    rng = np.random.default_rng(7)
    rows = []
    for k in range(n):
        env = ResidualQuadEnv(
            payload=("none", "heavy")[k % 2],
            wind="windy",
            trajectory=("hover", "helix", "figure8")[k % 3],
        )
        obs, _ = env.reset(seed=k)
        for _ in range(int(rng.integers(1, 15))):
            obs, *_ = env.step(rng.uniform(-0.2, 0.4, 4))
        rows.append(obs)
    return np.array(rows)


def _heading_pd(obs: np.ndarray, scale: float) -> np.ndarray:
    """geo's PD, ``−K_p·e_p − K_d·e_v``, in the heading frame over the bound ``scale`` (n, 3)."""
    out = []
    for o in obs:
        R = o[L.rot].reshape(3, 3)
        psi = np.arctan2(R[1, 0], R[0, 0])
        c, s = np.cos(psi), np.sin(psi)
        Rz_T = np.array(((c, s, 0.0), (-s, c, 0.0), (0.0, 0.0, 1.0)))
        e_p, e_v = o[L.pos] - o[L.ref_pos], o[L.vel] - o[L.ref_vel]
        out.append(Rz_T @ (-DEFAULT_KP * e_p - DEFAULT_KD * e_v) / scale)
    return np.array(out)


def test_feedforward_tracker_has_no_feedback_gain():
    assert tracker_gains("feedforward") == {"kp": 0.0, "kd": 0.0, "ki": 0.0}
    assert tracker_gains("geo") == {"ki": 0.0} and tracker_gains("pid")["ki"] > 0


def test_pilot_with_geos_pd_as_its_action_is_geo():
    """Known answer: the ``feedforward`` pilot handed geo's own PD as its acceleration flies
    exactly as ``geo`` (same attitude loop, same feed-forward) — the action level is the
    trackers'."""
    obs = _observations()
    u = _heading_pd(obs, MAX_ACCEL_SCALE)
    assert np.abs(u).max() <= 1.0  # inside the bound: nothing clipped
    pilot = ResidualPilot(len(obs), accel_scale=MAX_ACCEL_SCALE, tracker="feedforward")
    pilot.decide(u)
    actions = pilot(obs)
    geo = np.stack([LawController(GeoTracker()).policy(o) for o in obs])
    np.testing.assert_allclose(actions, geo, rtol=0, atol=1e-9)
    # no action: the reference's acceleration alone (hover: the thrust of m·g, level)
    pilot.decide(np.zeros_like(u))
    law = pilot.law
    assert law.kp == law.kd == law.ki == 0.0
    for i, o in enumerate(obs):
        ff = LawController(GeoTracker(kp=0.0, kd=0.0))
        np.testing.assert_allclose(pilot(obs)[i], ff.policy(o), rtol=0, atol=1e-12)


def test_smoke_training_ships_a_ppo_acc_policy(acc_run):
    out, summary = acc_run
    assert summary["steps"] == 2048
    for name in ("final.zip", "checkpoints/ppo_1024.zip"):
        ctrl = make_controller("ppo_acc", path=out / name)
        assert isinstance(ctrl.law, AccelerationPPOController)
        assert ctrl.tracker == "feedforward" and ctrl.kp == ctrl.kd == ctrl.ki == 0.0
        assert ctrl.accel_scale == SCALE and ctrl.action_repeat == 1
        assert ctrl.spec.preview_k == 3 and ctrl.spec.error_integral
    with zipfile.ZipFile(out / "final.zip") as archive:
        meta = json.loads(archive.read(META_ENTRY))
    assert meta["controller"] == "ppo_acc" and "tracker" not in meta  # the kind's default
    assert meta["config"]["reward"] == "precision"
    assert meta["config"]["trajectory_draw"] == "randomized"


def test_batched_ppo_acc_equals_the_single_one(acc_run):
    path = acc_run[0] / "final.zip"
    batch = make_batch_controller("ppo_acc", 2, path=path)
    assert isinstance(batch, LawBatch) and isinstance(batch.law, AccelerationPPOController)
    preview = {"preview": [3, 0.06]}  # the policy's env_kwargs
    envs = [
        ResidualQuadEnv(payload=p, wind="windy", trajectory="helix", **preview)
        for p in ("none", "heavy")
    ]
    obs = np.array([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    singles = [make_controller("ppo_acc", path=path) for _ in envs]
    for _ in range(20):
        actions = batch.policy_batch(obs)
        for i, env in enumerate(envs):
            a = singles[i].policy(obs[i])
            np.testing.assert_allclose(actions[i], a, rtol=0, atol=1e-12)
            obs[i] = env.step(a)[0]


def test_the_command_is_the_feedforward_plus_the_heading_frame_acceleration(acc_run):
    """The command is ``a_ref + R_z(ψ)·(accel_scale·u)`` and there is no residual estimate
    (zero, as for pid): what the policy set, in the world, is the whole outer loop."""
    ctrl = make_controller("ppo_acc", path=acc_run[0] / "final.zip")
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix", **ctrl.env_kwargs)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        ctrl.policy(obs)
        R = obs[L.rot].reshape(3, 3)
        held = ctrl.state.policy.held
        assert np.abs(held).max() <= SCALE and np.abs(held).max() > 0
        expected = obs[L.ref_acc] + heading_to_world(R, held)
        np.testing.assert_allclose(ctrl.state.last_a_cmd, expected, rtol=0, atol=1e-12)
        assert not np.any(ctrl.state.last_residual)
        obs = env.step(ctrl.policy(obs))[0]


def test_deployed_ppo_acc_flies_as_the_training_pilot(acc_run):
    """The deployed law (the policy's acceleration in the command) and training's pilot (the
    same acceleration through the residual channel) send the same rotor commands."""
    path = acc_run[0] / "final.zip"
    batch = make_batch_controller("ppo_acc", 4, path=path)
    envs = [
        ResidualQuadEnv(payload="heavy", wind="windy", trajectory=t, **batch.env_kwargs)
        for t in ("hover", "helix", "figure8", "helix")
    ]
    obs = np.array([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    pilot = ResidualPilot(4, accel_scale=SCALE, tracker="feedforward")
    for _ in range(10):
        actions = batch.policy_batch(obs)
        pilot.decide(batch.state.policy.u)
        np.testing.assert_allclose(pilot(obs), actions, rtol=0, atol=1e-12)
        obs = np.array([env.step(a)[0] for env, a in zip(envs, actions, strict=True)])


def _rewrite(src: Path, dest: Path, **changes) -> Path:
    """A copy of the policy file ``src`` whose record has ``changes``, written as it is."""
    shutil.copyfile(src, dest)
    with zipfile.ZipFile(src) as archive:
        record = json.loads(archive.read(META_ENTRY))
    write_entry(dest, {**record, **changes})
    return dest


def test_policy_files_of_the_other_kind_or_tracker_name_the_file(acc_run, tmp_path):
    path = acc_run[0] / "final.zip"
    with pytest.raises(PolicyFileError, match="is a 'ppo_acc' policy"):
        make_controller("ppo_res", path=path)
    pid = _rewrite(path, tmp_path / "pid.zip", tracker="pid")
    with pytest.raises(PolicyFileError, match=r"pid\.zip.*tracker 'pid'; valid choices: feedf"):
        make_controller("ppo_acc", path=pid)
    ctbr = _rewrite(path, tmp_path / "ctbr.zip", action_mode="ctbr")
    with pytest.raises(PolicyFileError, match=r"ctbr\.zip.*action_mode is 'rotor'"):
        make_controller("ppo_acc", path=ctbr)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tracker": "geo"}, r"tracker must be one of \('feedforward',\) for ppo_acc"),
        ({"tracker": "pid"}, r"tracker must be one of \('feedforward',\) for ppo_acc"),
        ({"accel_scale": 0.0}, r"accel_scale must be in \(0, 20"),
        ({"action_mode": "ctbr"}, "ppo_acc acts through the trackers' inner loop"),
        ({"payloads": ["extra"]}, "held out"),
    ],
)
def test_bad_ppo_acc_configs_fail_before_training(changes, message):
    with pytest.raises(ValueError, match=message):
        _config(**changes)


def test_shipped_config_loads_off_the_matrix_on_the_precision_reward():
    from residual_quad import configs

    cfg = configs.load(PPOTrainConfig, "ppo_acc")
    assert cfg.controller == "ppo_acc" and cfg.tracker == "feedforward"
    assert cfg.reward == "precision" and cfg.trajectory_draw == "randomized"
    spec = cfg.features.spec()
    assert spec.preview_k > 0 and spec.action_history > 0 and spec.error_integral
    assert "extra" not in cfg.payloads and max(cfg.payloads) < 0.75
