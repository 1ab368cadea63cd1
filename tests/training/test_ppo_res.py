"""``ppo_res``: residual RL on ``geo`` — the training pilot, the deployed controller and its batch
agree; training, files and configs fail clearly."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("stable_baselines3")

from residual_quad.cli import main  # noqa: E402
from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.attitude import AttitudeGains  # noqa: E402
from residual_quad.controllers.batch import make_batch_controller  # noqa: E402
from residual_quad.controllers.driver import LawBatch, LawController  # noqa: E402
from residual_quad.controllers.policy_file import META_ENTRY, PolicyFileError  # noqa: E402
from residual_quad.controllers.ppo_res import (  # noqa: E402
    ResidualPilot,
    ResidualPPOController,
    advance_correction,
    correction_step,
    heading_to_world,
    heading_to_world_batch,
)
from residual_quad.controllers.trackers import GeoTracker, PIDTracker  # noqa: E402
from residual_quad.envs.observation import ObsLayout as L  # noqa: E402
from residual_quad.envs.residual_quad_env import ResidualQuadEnv  # noqa: E402
from residual_quad.episode import RunSpec, fly  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import (  # noqa: E402
    FeatureConfig,
    PPOHyperparams,
    PPOTrainConfig,
)
from residual_quad.training.tb_logging import read_scalars  # noqa: E402


def _config(**kw) -> PPOTrainConfig:
    base = {
        "controller": "ppo_res",
        "accel_scale": 6.0,
        "seed": 0,
        "total_steps": 2048,
        "n_envs": 8,
        "episode_s": 5.0,
        "eval_freq": 1024,
        "eval_scenarios": [["heavy", "breezy", "hover"]],
        "checkpoint_freq": 1024,
        "env_threads": 1,
        "ppo": PPOHyperparams(
            n_steps=64,
            batch_size=256,
            n_epochs=2,
            log_std_init=-3.0,
            use_sde=True,  # the shipped ppo_res settings: gSDE, a fixed exploration scale
            learn_std=False,
        ),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


@pytest.fixture(scope="module")
def res_run(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ppo_res")
    return out, train(_config(), out, progress=False)


RATE = 30.0  # m/s³, the rate-mode test policy's correction rate


@pytest.fixture(scope="module")
def rate_run(tmp_path_factory) -> tuple[Path, dict]:
    """A tiny rate-mode policy: the action steers the correction's rate, the history holds it."""
    out = tmp_path_factory.mktemp("ppo_res_rate")
    cfg = _config(correction_rate=RATE, features=FeatureConfig(action_history=1))
    return out, train(cfg, out, progress=False)


#: lag-tuned inner-loop gains (rad/s, rad): what the realistic plant's ppo_res is trained with
LAG = {"wn_rp": 10.0, "zeta_rp": 1.2, "wn_yaw": 2.0, "zeta_yaw": 1.0, "max_tilt": 0.44}


@pytest.fixture(scope="module")
def pid_run(tmp_path_factory) -> tuple[Path, dict]:
    """A tiny rate-mode policy whose correction adds to ``pid`` (geo + the error integral),
    whose inner loop has other gains than the defaults (:data:`LAG`)."""
    out = tmp_path_factory.mktemp("ppo_res_pid")
    cfg = _config(
        correction_rate=RATE,
        features=FeatureConfig(action_history=1),
        tracker="pid",
        attitude=LAG,
    )
    return out, train(cfg, out, progress=False)


def _observations(n: int = 24) -> np.ndarray:
    """Raw observations of varied vehicles: scenario starts stepped with random rotor actions
    (tilted, turning, any heading)."""
    rng = np.random.default_rng(5)
    rows = []
    for k in range(n):
        env = ResidualQuadEnv(
            payload=("none", "heavy")[k % 2],
            wind="windy",
            trajectory=("hover", "helix", "figure8")[k % 3],
        )
        obs, _ = env.reset(seed=k, options={"yaw_offset": float(rng.uniform(-math.pi, math.pi))})
        for _ in range(int(rng.integers(1, 40))):
            obs, *_ = env.step(rng.uniform(-0.2, 0.4, 4))
        rows.append(obs)
    return np.array(rows)


def test_heading_rotation_batch_equals_scalar_and_turns_with_yaw():
    obs = _observations(12)
    R = obs[:, L.rot].reshape(-1, 3, 3)
    v = np.random.default_rng(1).normal(size=(12, 3))
    batch = heading_to_world_batch(R, v)
    for i in range(12):
        np.testing.assert_allclose(batch[i], heading_to_world(R[i], v[i]), atol=1e-14)
        assert np.isclose(np.linalg.norm(batch[i]), np.linalg.norm(v[i]))
    yawed = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # ψ = 90°
    np.testing.assert_allclose(
        heading_to_world(yawed, np.array([1.0, 0, 0])), [0, 1, 0], atol=1e-15
    )


def _with_correction(law, correction: np.ndarray) -> LawController:
    """One vehicle of the tracker ``law`` whose command gets ``correction`` (world, m/s²): the
    state's ``excitation`` input, added to ``a_cmd`` as ``ppo_res``'s ``−Δâ`` is."""
    ctrl = LawController(law)
    ctrl.state = ctrl.state._replace(excitation=correction)
    return ctrl


def test_training_pilot_equals_geo_with_the_correction():
    """The pilot the policy acts through in training = the single geo with
    ``a_eff = a_cmd + R_z(ψ)·(scale·u)`` (what the deployed controller applies): the pilot is
    the ``ppo_res`` law without a policy, driven by the batch driver."""
    obs = _observations()
    u = np.random.default_rng(2).uniform(-1.0, 1.0, (len(obs), 3))
    pilot = ResidualPilot(len(obs), accel_scale=6.0)
    assert isinstance(pilot.batch, LawBatch) and isinstance(pilot.law, ResidualPPOController)
    np.testing.assert_array_equal(pilot.decide(u), u)  # absolute mode: the correction is u
    actions = pilot(obs)
    for i, o in enumerate(obs):
        R = o[L.rot].reshape(3, 3)
        geo = _with_correction(GeoTracker(), heading_to_world(R, 6.0 * u[i]))
        np.testing.assert_allclose(actions[i], geo.policy(o), rtol=0, atol=1e-12)
    # no correction: geo itself
    pilot.decide(np.zeros_like(u))
    np.testing.assert_allclose(
        pilot(obs), np.stack([LawController(GeoTracker()).policy(o) for o in obs]), atol=1e-12
    )


@pytest.mark.parametrize("attitude", [None, AttitudeGains(**LAG)], ids=["default", "lag"])
def test_training_pilot_on_pid_equals_pid_with_the_correction(attitude):
    """With ``tracker: pid`` the pilot is the single ``pid`` (its integral and anti-windup
    carried over control periods, its inner-loop gains) plus the correction; a new episode
    clears the integral."""
    obs = _observations(12)
    u = np.random.default_rng(3).uniform(-1.0, 1.0, (len(obs), 3))
    pilot = ResidualPilot(len(obs), accel_scale=6.0, tracker="pid", attitude=attitude)
    pilot.decide(u)
    pids = [
        _with_correction(
            PIDTracker(attitude=attitude), heading_to_world(o[L.rot].reshape(3, 3), 6.0 * u[i])
        )
        for i, o in enumerate(obs)
    ]
    for _ in range(5):  # the same observations: the integrals grow every period
        actions = pilot(obs)
        for i, o in enumerate(obs):
            np.testing.assert_allclose(actions[i], pids[i].policy(o), rtol=0, atol=1e-12)
    integral = pilot.batch.state.integral
    assert integral.any()
    np.testing.assert_allclose(integral, [p.state.integral for p in pids], atol=1e-15)
    pilot.reset_rows(np.array([2, 5]))
    integral = pilot.batch.state.integral
    assert not integral[[2, 5]].any() and integral[0].any()
    assert not pilot.held[[2, 5]].any() and pilot.held[0].any()


class _ZeroPolicy:
    """A forward whose actions are zero (a rate-mode correction then stays at zero)."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.zeros((len(x), 3))


def test_pid_tracker_file_flies_pid_plus_its_correction(pid_run, res_run):
    """A file trained on ``pid`` with other inner-loop gains records both and deploys on
    ``pid``'s gains and those attitude gains; with its correction held at zero it flies that
    ``pid`` exactly. Files without the entries stay on geo with the default gains."""
    path = pid_run[0] / "final.zip"
    with zipfile.ZipFile(path) as archive:
        meta = json.loads(archive.read(META_ENTRY))
    assert meta["tracker"] == "pid" and AttitudeGains(**meta["attitude"]) == AttitudeGains(**LAG)
    ctrl = make_controller("ppo_res", path=path)
    assert ctrl.tracker == "pid" and ctrl.ki == PIDTracker().ki > 0
    assert ctrl.attitude == AttitudeGains(**LAG)
    geo_file = make_controller("ppo_res", path=res_run[0] / "final.zip")
    assert geo_file.tracker == "geo" and geo_file.ki == 0.0 and geo_file.attitude is None
    ctrl.law.network = _ZeroPolicy()  # the correction held at zero
    spec = RunSpec("ppo_res", "heavy", "breezy", "helix", 0, episode_s=3.0)
    flown = fly(spec, {}, controller=ctrl)
    pid = LawController(PIDTracker(attitude=AttitudeGains(**LAG)))
    reference = fly(spec, {}, controller=pid)
    np.testing.assert_array_equal(flown.thrusts, reference.thrusts)
    default_gains = fly(spec, {}, controller=LawController(PIDTracker()))
    assert not np.array_equal(flown.thrusts, default_gains.thrusts)


def test_smoke_training_writes_a_ppo_res_policy(res_run):
    out, summary = res_run
    assert summary["steps"] == 2048 and summary["backend"] == "vector"
    scalars = read_scalars(next((out / "tb").rglob("events.out.tfevents.*")).parent)
    assert {"train/value_loss", "rollout/pos_err_m", "eval/rmse_mean_m"} <= set(scalars)
    for name in ("final.zip", "best.zip", "checkpoints/ppo_1024.zip"):
        ctrl = make_controller("ppo_res", path=out / name)
        assert isinstance(ctrl.law, ResidualPPOController)
        assert ctrl.accel_scale == 6.0 and ctrl.action_repeat == 2 and ctrl.network is not None
        assert ctrl.model.action_space.shape == (3,)
        assert type(ctrl.model.policy.action_dist).__name__ == "StateDependentNoiseDistribution"
        log_std = ctrl.model.policy.log_std.detach().numpy()
        assert np.all(log_std == -3.0)  # learn_std false: the scale never moved


def test_a_resumed_run_keeps_the_exploration_scale_fixed(res_run):
    from residual_quad.training.checkpoints import load_checkpoint
    from residual_quad.training.ppo_model import make_training_env

    cfg = _config()
    model, venv, state = load_checkpoint(
        res_run[0] / "checkpoints" / "ppo_1024.zip", make_training_env(cfg), cfg
    )
    try:
        assert state.steps == 1024 and not model.policy.log_std.requires_grad
        assert model.action_space.shape == (3,)
    finally:
        venv.close()


def test_deployed_correction_is_bounded_and_held(res_run):
    ctrl = make_controller("ppo_res", path=res_run[0] / "final.zip")
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix")
    obs, _ = env.reset(seed=0)
    ctrl.reset()
    held = []
    for _ in range(6):
        action = ctrl.policy(obs)
        assert np.all(np.isfinite(action)) and np.all(np.abs(action) <= 1.0)
        correction = ctrl.state.policy.held
        assert np.all(np.abs(correction) <= 6.0)  # m/s², heading frame: the bound
        held.append(correction.copy())
        obs, *_ = env.step(action)
    assert all(np.array_equal(held[k], held[k + 1]) for k in (0, 2, 4))  # held 2 periods
    assert not np.array_equal(held[0], held[2])


@pytest.mark.parametrize("run", ["res_run", "rate_run", "pid_run"])
def test_batched_controller_equals_the_single_one(run, request):
    """Corrections bit for bit, rotor actions as batched geo equals geo (≤ 1e-12), on a flight
    where the single controller's observations drive both (absolute and rate mode, on geo and
    on pid)."""
    path = request.getfixturevalue(run)[0] / "final.zip"
    single = make_controller("ppo_res", path=path)
    batch = make_batch_controller("ppo_res", 3, path=path)
    assert isinstance(batch, LawBatch) and isinstance(batch.law, ResidualPPOController)
    envs = [
        ResidualQuadEnv(payload=p, wind="windy", trajectory=t)
        for p, t in (("none", "helix"), ("heavy", "figure8"), ("light", "hover"))
    ]
    obs = np.array([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    singles = [make_controller("ppo_res", path=path) for _ in envs]
    for _ in range(30):
        actions = batch.policy_batch(obs)
        for i, env in enumerate(envs):
            a = singles[i].policy(obs[i])
            assert np.array_equal(batch.state.policy.held[i], singles[i].state.policy.held)
            np.testing.assert_allclose(actions[i], a, rtol=0, atol=1e-12)
            obs[i] = env.step(a)[0]
    batch.reset_env(1)
    policy = batch.state.policy
    assert policy.k[1] == 0 and not policy.held[1].any() and policy.k[0] == 30
    assert not policy.u[1].any() and not policy.inputs.history[1].any()
    assert policy.u[0].any() and policy.held[2].any()
    assert single.kp == batch.kp and single.kd == batch.kd and single.ki == batch.ki
    assert batch.inner.gains == single.inner.gains


def test_fly_and_sweep_row_carry_the_correction_as_residual(res_run):
    ctrl = make_controller("ppo_res", path=res_run[0] / "final.zip")
    r = fly(RunSpec("ppo_res", "heavy", "breezy", "hover", 0, episode_s=3.0), {}, controller=ctrl)
    assert not r.diverged and math.isfinite(r.rmse)
    assert np.any(ctrl.last_residual != 0.0)


def test_correction_rule_absolute_and_rate():
    """Absolute mode: the correction is the action. Rate mode: it moves by step·u per decision
    and stays within its bound; the step is r·T/accel_scale."""
    held = np.array([[0.5, -0.99, 0.0]])
    u = np.array([[1.0, -1.0, 0.25]])
    out = advance_correction(held, u, None)
    np.testing.assert_array_equal(out, u)
    assert out is not u
    np.testing.assert_array_equal(advance_correction(held, u, 0.1), [[0.6, -1.0, 0.025]])
    assert correction_step(None, 8.0, 0.02) is None
    assert correction_step(20.0, 8.0, 0.02) == pytest.approx(0.05)  # 0.4 m/s² of 8 per decision
    pilot = ResidualPilot(2, accel_scale=8.0, correction_rate=20.0, action_repeat=2)
    assert pilot.step == pytest.approx(20.0 * 0.02 / 8.0)
    for _ in range(30):  # full rate for 30 decisions: the bound, not beyond
        c = pilot.decide(np.array([[1.0, -1.0, 0.5], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(c, [[1.0, -1.0, 0.75], [0.0, 0.0, 0.0]], atol=1e-12)
    pilot.reset_rows([0])
    assert not pilot.held.any()


def test_rate_mode_policy_moves_its_correction_by_at_most_one_step(rate_run):
    """A rate-mode file flies in rate mode: the held correction changes by at most r·T per
    decision, stays within the bound, is held between decisions, and is what the history
    shows the policy at the next decision."""
    ctrl = make_controller("ppo_res", path=rate_run[0] / "final.zip")
    assert ctrl.correction_rate == RATE and ctrl.spec.action_history == 1
    step = RATE * ctrl.context.control_dt * ctrl.action_repeat / ctrl.accel_scale
    assert ctrl.step == pytest.approx(step)
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix")
    obs, _ = env.reset(seed=0)
    ctrl.reset()
    held = [ctrl.state.policy.u.copy()]
    for k in range(40):
        before = ctrl.state.policy.u.copy()
        obs, *_ = env.step(ctrl.policy(obs))
        if k % 2 == 0:  # a decision: the history's newest entry is the correction held before
            np.testing.assert_array_equal(ctrl.state.policy.inputs.history[0, 0], before)
        held.append(ctrl.state.policy.u.copy())
    held = np.array(held)
    assert np.all(np.abs(held) <= 1.0)
    assert np.max(np.abs(np.diff(held, axis=0))) <= step + 1e-12
    assert np.any(held != 0.0)
    np.testing.assert_allclose(
        ctrl.state.policy.held, ctrl.accel_scale * held[-1], rtol=0, atol=1e-12
    )


def test_rate_mode_training_env_shows_the_policy_its_held_correction():
    """In training the history column is the pilot's held correction, not the raw action,
    and an episode's start zeroes both."""
    from residual_quad.controllers.features import FEATURE_DIM
    from residual_quad.controllers.policy_inputs import FeatureSpec
    from residual_quad.training.ppo_vec import QuadVecEnv

    scenarios = [{"payload": "heavy", "wind": "calm", "trajectory": "hover"}] * 2
    pilot = ResidualPilot(2, 6.0, correction_rate=RATE, action_repeat=2)
    venv = QuadVecEnv(
        2,
        lambda rng: dict(scenarios[0]),
        action_repeat=2,
        nthread=1,
        scenarios=scenarios,
        pilot=pilot,
        features=FeatureSpec(action_history=1),
        action_mode="rotor",
        episode_s=0.2,
    )
    venv.seed(0)
    venv.reset()
    u = np.array([[1.0, -0.5, 0.2], [0.0, 0.3, -1.0]], dtype=np.float32)
    expected = np.zeros((2, 3))
    for _ in range(5):
        obs, _, dones, _ = venv.step(u)
        assert not dones.any()
        expected = np.clip(expected + pilot.step * u, -1.0, 1.0)
        np.testing.assert_allclose(obs[:, FEATURE_DIM : FEATURE_DIM + 3], expected, atol=1e-6)
    for _ in range(10):  # to the end of the 0.2 s episode: the next one starts from zero
        obs, _, dones, _ = venv.step(u)
        if dones.any():
            break
    assert dones.all()
    assert not obs[:, FEATURE_DIM : FEATURE_DIM + 3].any() and not pilot.held.any()
    venv.close()


def _rewrite(src: Path, dest: Path, **changes) -> Path:
    with zipfile.ZipFile(src) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    meta = json.loads(entries[META_ENTRY])
    meta.update(changes)
    with zipfile.ZipFile(dest, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, json.dumps(meta) if name == META_ENTRY else data)
    return dest


def test_policy_files_of_the_other_kind_or_damaged_name_the_file(res_run, tmp_path):
    path = res_run[0] / "final.zip"
    with pytest.raises(PolicyFileError, match="is a 'ppo_res' policy.*'ppo_res' controller"):
        make_controller("ppo", path=path)
    with pytest.raises(PolicyFileError, match="is a 'ppo' policy"):
        ResidualPPOController(path=_ppo_file())
    for bad in (0.0, -1.0, 25.0, float("nan"), "8", None):
        damaged = _rewrite(path, tmp_path / "bad.zip", accel_scale=bad)
        with pytest.raises(PolicyFileError, match=r"bad\.zip.*accel_scale"):
            ResidualPPOController(path=damaged)
    ctbr = _rewrite(path, tmp_path / "ctbr.zip", action_mode="ctbr")
    with pytest.raises(PolicyFileError, match="ctbr.zip.*action_mode"):
        ResidualPPOController(path=ctbr)
    kind = _rewrite(path, tmp_path / "kind.zip", controller="td3")
    with pytest.raises(PolicyFileError, match="kind.zip.*controller 'td3'"):
        ResidualPPOController(path=kind)
    algo = _rewrite(path, tmp_path / "algo.zip", algo="td3")  # no learner of ppo_res files
    with pytest.raises(PolicyFileError, match="algo.zip.*algo 'td3'.*'ppo' or 'sac' or 'tqc'"):
        ResidualPPOController(path=algo)
    algo = _rewrite(path, tmp_path / "algo.zip", algo="sac")  # PPO's network, SAC's record
    with pytest.raises(PolicyFileError, match=r"cannot load SAC policy .*algo\.zip"):
        ResidualPPOController(path=algo)
    # a ppo_res record on a 4-action network: refused by the action shape or, where the file's
    # inputs hold its 4-wide action history, already by the input layout it no longer matches
    four = _rewrite(_ppo_file(), tmp_path / "four.zip", controller="ppo_res", accel_scale=5.0)
    with pytest.raises(PolicyFileError, match=r"four\.zip.*(shape \(4,\)|observation_layout)"):
        ResidualPPOController(path=four)
    with pytest.raises(FileNotFoundError, match="nope.zip"):
        ResidualPPOController(path=tmp_path / "nope.zip")
    # a correction rate is ppo_res's entry only
    ppo_rate = _rewrite(_ppo_file(), tmp_path / "ppo_rate.zip", correction_rate=20.0)
    with pytest.raises(PolicyFileError, match=r"ppo_rate\.zip.*ppo_res/ppo_acc entry"):
        make_controller("ppo", path=ppo_rate)
    # so is the tracker it corrects, one of geo and pid
    ppo_tracker = _rewrite(_ppo_file(), tmp_path / "ppo_tracker.zip", tracker="pid")
    with pytest.raises(
        PolicyFileError, match=r"ppo_tracker\.zip.*tracker is a ppo_res/ppo_acc entry"
    ):
        make_controller("ppo", path=ppo_tracker)
    for bad in ("lqr", "PID", None, 1, ["pid"]):
        damaged = _rewrite(path, tmp_path / "tracker.zip", tracker=bad)
        with pytest.raises(PolicyFileError, match=r"tracker\.zip.*valid choices: geo, pid"):
            ResidualPPOController(path=damaged)
    # and its tracker's inner-loop gains: AttitudeGains fields, each finite and > 0
    ppo_gains = _rewrite(_ppo_file(), tmp_path / "ppo_gains.zip", attitude={"wn_rp": 10.0})
    with pytest.raises(
        PolicyFileError, match=r"ppo_gains\.zip.*attitude is a ppo_res/ppo_acc entry"
    ):
        make_controller("ppo", path=ppo_gains)
    for bad, says in [
        ({"wn_rp": -1.0}, "attitude.wn_rp must be a finite number > 0"),
        ({"wn_rp": float("nan")}, "attitude.wn_rp must be"),
        ({"max_tilt": 2.0}, "max_tilt must be below"),
        ({"kp": 20.0}, r"unknown field\(s\) \['kp'\]; valid: wn_rp"),
        ([10.0], "attitude gains must be a mapping"),
    ]:
        damaged = _rewrite(path, tmp_path / "gains.zip", attitude=bad)
        with pytest.raises(PolicyFileError, match=rf"gains\.zip.*{says}"):
            ResidualPPOController(path=damaged)


@pytest.mark.parametrize("bad", [0.0, -5.0, 1e4, float("nan"), float("inf"), "20", True])
def test_rate_files_with_a_bad_rate_name_the_file(rate_run, tmp_path, bad):
    damaged = _rewrite(rate_run[0] / "final.zip", tmp_path / "rate.zip", correction_rate=bad)
    with pytest.raises(PolicyFileError, match=r"rate\.zip.*correction_rate must be"):
        ResidualPPOController(path=damaged)


def _ppo_file() -> Path:
    from residual_quad.controllers.policy_file import default_policy_path

    return default_policy_path()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"backend": "subproc", "n_envs": 2}, "needs action_mode 'rotor' and backend 'vector'"),
        ({"action_mode": "ctbr"}, "needs action_mode 'rotor'"),
        ({"accel_scale": 0.0}, r"accel_scale must be in \(0, 20"),
        ({"accel_scale": 21.0}, r"accel_scale must be in \(0, 20"),
        ({"accel_scale": float("nan")}, "accel_scale"),
        (
            {"controller": "sac"},
            r"controller must be one of \('ppo', 'ppo_res', 'ppo_acc', 'ppo_adapt'\)",
        ),
        ({"correction_rate": 0.0}, r"correction_rate must be null or a number in \(0, 1000"),
        ({"correction_rate": float("nan")}, "correction_rate must be null"),
        ({"correction_rate": True}, "correction_rate must be null"),
        ({"correction_rate": 2000.0}, "correction_rate must be null"),
        ({"controller": "ppo", "correction_rate": 20.0}, "correction_rate is ppo_res's"),
        ({"tracker": "lqr"}, r"tracker must be one of \('geo', 'pid'\)"),
        ({"tracker": "feedforward"}, r"tracker must be one of \('geo', 'pid'\) for ppo_res"),
        ({"controller": "ppo_acc", "tracker": "pid"}, r"one of \('feedforward',\) for ppo_acc"),
        ({"controller": "ppo", "tracker": "pid"}, "tracker is ppo_res's"),
        ({"attitude": {"wn_rp": 0.0}}, "attitude.wn_rp must be a finite number > 0"),
        ({"attitude": {"zeta": 1.0}}, r"attitude: unknown field\(s\) \['zeta'\]"),
        ({"controller": "ppo", "attitude": LAG}, "attitude is ppo_res's"),
    ],
)
def test_bad_configs_fail_before_training(changes, message):
    with pytest.raises(ValueError, match=message):
        _config(**changes)


@settings(max_examples=80, deadline=None)
@given(
    gains=st.dictionaries(
        st.sampled_from([*LAG, "kp", "zeta"]),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-5, 50),
            st.booleans(),
            st.text(max_size=4),
            st.none(),
        ),
        max_size=6,
    )
)
def test_any_attitude_loads_as_gains_or_is_refused_naming_the_field(gains):
    """A config's ``attitude``: every field a known ``AttitudeGains`` field, each a finite
    number > 0 (``max_tilt`` below π/2), gives exactly those gains; anything else is a
    ``ValueError`` that names the field."""
    fields = AttitudeGains.__dataclass_fields__
    good = all(
        k in fields
        and not isinstance(v, bool)
        and isinstance(v, int | float)
        and 0 < v < math.inf
        and (k != "max_tilt" or v < math.pi / 2)
        for k, v in gains.items()
    )
    if good:
        cfg = _config(attitude=gains)
        assert cfg.attitude == gains
        return
    with pytest.raises(ValueError, match=r"attitude(\.\w+|: unknown field)"):
        _config(attitude=gains)


@settings(max_examples=60, deadline=None)
@given(tracker=st.one_of(st.text(max_size=12), st.integers(), st.none(), st.booleans()))
def test_any_tracker_but_geo_pid_or_null_is_refused_naming_the_choices(tracker):
    if tracker in ("geo", "pid", None):
        assert _config(tracker=tracker).tracker == (tracker or "geo")  # null: ppo_res's first
        return
    with pytest.raises(ValueError, match=r"tracker must be one of \('geo', 'pid'\)"):
        _config(tracker=tracker)


def test_cli_target_uses_the_shipped_ppo_res_config(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["train", "ppo_res", "--out", str(out), "--steps", "1000"]) == 2
    assert "total_steps 1000 is less than one rollout" in capsys.readouterr().err
    assert not out.exists()
    cfg_path = tmp_path / "res.yaml"
    cfg_path.write_text("controller: ppo_res\nbackend: subproc\n")
    assert main(["train", "ppo_res", str(cfg_path), "--out", str(out)]) == 2
    assert "backend 'vector'" in capsys.readouterr().err.replace("\n", " ")


def test_adapter_with_the_pilot_equals_geo_stepping_the_vector_env():
    """QuadVecEnv(pilot=ResidualPilot) = each env alone in a vector env, flown by geo with the
    held correction recomputed every control period, NEXT_STEP autoreset by hand."""
    from residual_quad.controllers.features import ppo_features_batch
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv
    from residual_quad.training.ppo_vec import QuadVecEnv

    scenarios = [
        {"payload": "none", "wind": "windy", "trajectory": "helix"},
        {"payload": "heavy", "wind": "breezy", "trajectory": "figure8"},
        {"payload": "light", "wind": "calm", "trajectory": "hover"},
    ]
    kw = {"episode_s": 0.3, "max_position_error": 0.05, "action_mode": "rotor"}

    def same(rng):
        return dict(scenarios[2])

    def actions(features: np.ndarray) -> np.ndarray:
        w = np.random.default_rng(3).normal(0.0, 0.3, (3, features.shape[-1]))
        return np.tanh(features @ w.T).astype(np.float32)

    seed, steps, repeat = 4, 30, 2
    expected = []
    for i, sc in enumerate(scenarios):
        env = ResidualQuadVectorEnv(1, scenarios=[sc], sampler=same, nthread=1, **kw)
        pilot = ResidualPilot(1, 6.0)
        obs, _ = env.reset(seed=seed + i)
        records = []
        for _ in range(steps):
            pilot.decide(actions(ppo_features_batch(obs)))
            total, done = 0.0, False
            for _ in range(repeat):
                obs, rew, term, trunc, _ = env.step(pilot(obs))
                total += rew[0]
                if term[0] or trunc[0]:
                    done = True
                    break
            if done:
                obs, *_ = env.step(np.zeros((1, 4)))  # NEXT_STEP: the reset
            records.append((ppo_features_batch(obs)[0], np.float32(total), done))
        env.close()
        expected.append(records)
    venv = QuadVecEnv(
        3,
        same,
        action_repeat=repeat,
        nthread=1,
        scenarios=scenarios,
        pilot=ResidualPilot(3, 6.0),
        **kw,
    )
    assert venv.action_space.shape == (3,)
    venv.seed(seed)
    obs = venv.reset()
    ends, diff = 0, 0.0
    for t in range(steps):
        obs, rewards, dones, _ = venv.step(actions(obs))
        for i in range(3):
            want = expected[i][t]
            diff = max(diff, float(np.max(np.abs(obs[i] - want[0]))))
            assert abs(rewards[i] - want[1]) <= 1e-5 and dones[i] == want[2], (t, i)
            ends += bool(dones[i])
    # a batch's numpy loops round some last bits differently from a 1-env batch's (SIMD vs
    # scalar remainder loops of arctan2/cos): float32 features agree to a few ulps
    assert diff <= 1e-6  # measured 6e-8
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        venv.step(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="env 1 must be finite"):
        venv.step(np.array([[0, 0, 0], [np.nan, 0, 0], [0, 0, 0]]))
    venv.close()
    assert ends >= 3


def _first_update(seed: int) -> list[np.ndarray]:
    from residual_quad.training.ppo_model import make_training_env, new_model, normalized

    cfg = _config(seed=seed, total_steps=512)
    venv = make_training_env(cfg)
    venv.seed(seed)
    venv = normalized(venv, cfg)
    model = new_model(cfg, venv)
    model.learn(512)  # one rollout of 8 envs x 64 steps (gSDE noise drawn once), one update
    params = [p.detach().numpy().copy() for p in model.policy.parameters()]
    venv.close()
    return params


def test_same_seed_same_ppo_res_parameters():
    a, b, c = _first_update(3), _first_update(3), _first_update(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_training_ppo_res_into_a_finished_run_is_refused(tmp_path, capsys):
    from residual_quad import configs
    from residual_quad.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "final.zip").write_bytes(b"the first run's policy")
    tiny = configs.dump(
        _config(total_steps=512, eval_freq=0, checkpoint_freq=0), tmp_path / "t.yaml"
    )
    assert main(["train", "ppo_res", str(tiny), "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already holds a finished training run" in err and "new --out" in err
    assert (run / "final.zip").read_bytes() == b"the first run's policy"
