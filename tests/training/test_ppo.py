"""PPO baseline: smoke training end to end, the adapter, bad files, the missing-SB3 hint."""

from __future__ import annotations

import importlib
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.controllers import make_controller
from residual_quad.controllers import policy_file as policy_file_mod
from residual_quad.controllers.features import FEATURE_DIM, FEATURE_NAMES, ppo_features
from residual_quad.controllers.policy_file import INSTALL_HINT, default_policy_path, read_meta
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import observation_env
from residual_quad.training.ppo import export_policy, train
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig
from residual_quad.training.tb_logging import read_scalars


def load_config(source, **overrides):
    return configs.load(PPOTrainConfig, source, **overrides)


try:
    import stable_baselines3 as sb3
except ImportError:  # the rl extra is optional; the install-hint test still runs
    sb3 = None

needs_sb3 = pytest.mark.skipif(sb3 is None, reason="needs the rl extra (stable-baselines3)")


def _tiny_config(**kw) -> PPOTrainConfig:
    base = {
        "seed": 3,
        "total_steps": 2048,
        "n_envs": 1,
        "episode_s": 5.0,
        "eval_freq": 1024,
        "eval_scenarios": [["light", "breezy", "hover"]],
        "checkpoint_freq": 1024,
        # the first version's defaults, which these tests were written against
        "action_mode": "ctbr",
        "max_position_error": 2.0,
        "reward_weights": {},
        "ppo": PPOHyperparams(
            n_steps=512, batch_size=128, n_epochs=2, lr_final=None, log_std_init=-1.0
        ),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, dict]:
    """A 4096-step run on two envs of the vector backend (its adapter has its own tests in
    test_ppo_vec.py)."""
    out = tmp_path_factory.mktemp("ppo_smoke")
    summary = train(_tiny_config(n_envs=2, total_steps=4096), out, progress=False)
    return out, summary


@needs_sb3
def test_smoke_training_writes_tensorboard_checkpoints_and_loadable_policies(smoke_run):
    out, summary = smoke_run
    assert summary["steps"] >= 4096 and summary["n_envs"] == 2
    assert (out / "config.yaml").is_file() and (out / "summary.json").is_file()
    assert load_config(out / "config.yaml") == _tiny_config(n_envs=2, total_steps=4096)
    events = list((out / "tb").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    scalars = read_scalars(events[0].parent)
    for tag in ("train/value_loss", "rollout/pos_err_m", "eval/crashes"):
        assert tag in scalars, f"{tag} missing from {sorted(scalars)}"
    assert sorted((out / "checkpoints").glob("ppo_*.zip"))
    assert len(summary["evals"]) >= 2  # periodic + final
    for name in ("final.zip", "best.zip"):
        ctrl = make_controller("ppo", path=out / name)
        assert ctrl.action_mode == "ctbr"
        assert ctrl.normalizer is not None  # VecNormalize statistics travel in the file
    meta = read_meta(out / "final.zip")
    assert meta["budget"]["steps"] == summary["steps"]
    assert summary["control_steps"] > summary["steps"]  # action_repeat 2, minus crash endings
    assert np.all(np.asarray(meta["obs_norm"]["var"]) > 0)


@needs_sb3
def test_export_copies_the_best_policy_with_its_budget(smoke_run, tmp_path):
    out, summary = smoke_run
    dest = tmp_path / "weights" / "ppo_test.zip"
    budget = export_policy(out, dest)
    on_disk = json.loads(dest.with_suffix(".json").read_text())
    assert on_disk == read_meta(dest)["budget"] == json.loads(json.dumps(budget))
    assert on_disk["steps"] == summary["steps"] and on_disk["train_wall_s"] > 0
    assert on_disk["policy_saved_at_steps"] == summary["best_steps"]
    assert on_disk["backend"] == "vector"
    assert make_controller("ppo", path=dest).action_repeat == 2


@needs_sb3
def test_seeded_training_is_reproducible(tmp_path):
    cfg = _tiny_config(total_steps=1024, eval_freq=0, checkpoint_freq=0)
    params = []
    for run in ("a", "b"):
        train(cfg, tmp_path / run, progress=False)
        model = sb3.PPO.load(tmp_path / run / "final.zip")
        params.append([p.detach().numpy().copy() for p in model.policy.parameters()])
    assert all(np.array_equal(a, b) for a, b in zip(*params, strict=True))
    meta_a, meta_b = read_meta(tmp_path / "a/final.zip"), read_meta(tmp_path / "b/final.zip")
    assert meta_a["obs_norm"] == meta_b["obs_norm"]


@needs_sb3
@pytest.mark.parametrize("which", ["smoke", "shipped"])
def test_adapter_returns_valid_deterministic_actions(which, smoke_run):
    path = smoke_run[0] / "final.zip" if which == "smoke" else None
    ctrl = make_controller("ppo", path=path)
    scenario = dict(payload="heavy", wind="windy", trajectory="helix", **observation_env(ctrl))
    env = ResidualQuadEnv(action_mode=ctrl.action_mode, **scenario)
    obs, _ = env.reset(seed=0)
    ctrl.reset(0)
    actions = []
    for _ in range(200):
        action = ctrl.policy(obs)
        assert action.shape == (4,) and env.action_space.contains(action.astype(np.float32))
        actions.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    # deterministic: the same observations after a reset give the same actions
    env2 = ResidualQuadEnv(action_mode=ctrl.action_mode, **scenario)
    obs, _ = env2.reset(seed=0)
    ctrl.reset(0)
    for expected in actions:
        assert np.array_equal(ctrl.policy(obs), expected)
        obs, *_ = env2.step(expected)
    # actions are held for action_repeat control periods
    if ctrl.action_repeat > 1:
        assert np.array_equal(actions[0], actions[1])


@needs_sb3
def test_shipped_policy_is_small_documented_and_flies():
    path = default_policy_path()
    assert path.is_file() and path.stat().st_size <= 2 * 1024 * 1024
    meta = read_meta(path)
    budget = meta["budget"]  # travels inside the zip; the .json copy sits next to it in the repo
    assert budget["steps"] > 0 and 0 < budget["train_wall_s"] <= 30 * 60
    assert budget["n_envs"] >= 1 and budget["command"].startswith("rquad train ppo")
    if path.with_suffix(".json").is_file():
        assert json.loads(path.with_suffix(".json").read_text()) == budget
    assert meta["action_mode"] == budget["action_mode"]
    assert "extra" not in meta["config"]["payloads"]
    from residual_quad.episode import run_episode

    r = run_episode("ppo", payload="heavy", wind="windy", trajectory="figure8", seed=0)
    assert not r.diverged and r.rmse < 0.5


@needs_sb3
@pytest.mark.parametrize(
    ("kind", "seeds"),
    [("ppo", 5), ("ppo_res", 5), ("ppo_acc", 5), ("ppo_adapt", 5)],
    ids=["ppo", "res", "acc", "adapt"],
)
def test_shipped_training_seeds_are_the_committed_configs_within_budget(kind, seeds):
    """Five shipped policies of ``ppo``, ``ppo_res``, ``ppo_acc`` and ``ppo_adapt``
    (training seeds 0, 1, …), each trained with the committed config (only the seed differs;
    ``env_threads``, a speed setting, may) within the 30-minute budget on the vector env, and
    each records the command that rebuilds it."""
    from residual_quad.controllers.policy_file import shipped_policy_path

    committed = configs.to_dict(configs.load(PPOTrainConfig, kind))
    committed.pop("env_threads")
    for seed in range(seeds):
        path = shipped_policy_path(kind, seed)
        meta = read_meta(path)
        budget = meta["budget"]
        assert meta.get("controller", "ppo") == kind and budget["seed"] == seed
        assert 0 < budget["train_wall_s"] <= 30 * 60 and budget["backend"] == "vector"
        assert budget["command"].startswith(f"rquad train {kind} ")
        assert f"--seed {seed}" in budget["command"] and path.name in budget["command"]
        assert json.loads(path.with_suffix(".json").read_text()) == budget
        # keys added to the config after a run (e.g. ppo.use_sde) load as their defaults,
        # which is what that run did
        saved = configs.to_dict(configs.load(PPOTrainConfig, meta["config"]))
        saved.pop("env_threads")
        assert saved == {**committed, "seed": seed}
        ctrl = make_controller(kind, training_seed=seed)
        assert ctrl.path == path and ctrl.network is not None
    shipped = ", ".join(map(str, range(seeds)))
    with pytest.raises(FileNotFoundError, match=f"shipped seeds: {shipped}$"):
        make_controller(kind, training_seed=7)
    with pytest.raises(ValueError, match="not both"):
        make_controller(kind, path=shipped_policy_path(kind), training_seed=1)


@needs_sb3
def test_the_policy_shipped_for_the_realistic_plant():
    """``ppo:plant=realistic`` flies the policy trained with configs/ppo_realistic.yaml (the
    realistic preset, ``extra`` held out), which records its budget and the command that rebuilds
    it; it flies the held-out payload on that plant without a crash. A plant no policy was
    shipped for, or a path with a plant, is refused."""
    from residual_quad.controllers.policy_file import shipped_policy_path
    from residual_quad.episode import run_episode

    path = shipped_policy_path("ppo", 0, "realistic")
    meta = read_meta(path)
    budget = meta["budget"]
    assert meta["env_kwargs"] == {"preset": "realistic"} and budget["steps"] >= 6_000_000
    assert budget["command"].startswith("rquad train ppo ppo_realistic ") and budget["seed"] == 0
    committed = configs.to_dict(configs.load(PPOTrainConfig, "ppo_realistic"))
    assert configs.to_dict(configs.load(PPOTrainConfig, meta["config"])) == committed
    assert "extra" not in committed["payloads"]
    ctrl = make_controller("ppo", plant="realistic")
    assert ctrl.path == path and ctrl.env_kwargs == {"preset": "realistic"}
    r = run_episode(
        ctrl,
        payload="extra",
        wind="windy",
        trajectory="hover",
        seed=0,
        episode_s=6.0,
        preset="realistic",
    )
    assert not r.diverged and r.rmse < 0.5  # as the ideal policy's check above
    with pytest.raises(FileNotFoundError, match="'realistic' plant of training seed 4"):
        make_controller("ppo", plant="realistic", training_seed=4)
    with pytest.raises(FileNotFoundError, match="no shipped 'ppo_res' policy for the 'realistic'"):
        make_controller("ppo_res", plant="realistic", training_seed=1)
    with pytest.raises(ValueError, match="not both"):
        make_controller("ppo", path=path, plant="realistic")


@needs_sb3
def test_the_ppo_res_shipped_for_the_realistic_plant():
    """``ppo_res:plant=realistic`` flies the policy trained with configs/ppo_res_realistic.yaml:
    its file records the plant, the core its ``pid`` was trained over (that plant's defaults),
    its budget and the command that rebuilds it, and the controller flies over that core. On
    that plant it flies the held-out payload where the ideal plant's file, on the default gains,
    crashes."""
    from residual_quad.controllers.attitude import AttitudeGains, default_attitude_gains
    from residual_quad.controllers.policy_file import shipped_policy_path
    from residual_quad.episode import run_episode

    path = shipped_policy_path("ppo_res", 0, "realistic")
    meta = read_meta(path)
    committed = configs.load(PPOTrainConfig, "ppo_res_realistic")
    assert meta["env_kwargs"] == committed.env_kwargs and meta["tracker"] == "pid"
    assert meta["core"] == committed.core == "plant"
    # the plant's default gains it trained over, recorded: a later default cannot change them
    assert AttitudeGains(**meta["attitude"]) == default_attitude_gains(0.06, 0.02)
    budget = meta["budget"]
    assert budget["command"].startswith("rquad train ppo_res ppo_res_realistic ")
    assert budget["seed"] == 0 and budget["steps"] >= committed.total_steps
    assert 0 < budget["train_wall_s"] <= 30 * 60 and budget["backend"] == "vector"
    assert path.name in budget["command"]
    assert json.loads(path.with_suffix(".json").read_text()) == budget
    saved = configs.to_dict(configs.load(PPOTrainConfig, meta["config"]))
    assert saved == configs.to_dict(committed)
    ctrl = make_controller("ppo_res", plant="realistic")
    assert ctrl.path == path and ctrl.inner.gains == AttitudeGains(**meta["attitude"])
    assert ctrl.attitude_loop == "indi" and ctrl.rotor_model and ctrl.predictor
    assert ctrl.outer is None  # the core it was trained over: a new plant default retrains it
    scenario = {"payload": "extra", "wind": "windy", "trajectory": "hover", "seed": 0}
    r = run_episode(ctrl, **scenario, episode_s=6.0, preset="realistic")
    assert not r.diverged and r.rmse < 0.2
    ideal = run_episode(make_controller("ppo_res"), **scenario, episode_s=6.0, preset="realistic")
    assert ideal.diverged


@needs_sb3
def test_missing_and_corrupt_files_give_clear_errors(tmp_path, smoke_run):
    missing = tmp_path / "nope.zip"
    with pytest.raises(FileNotFoundError, match="nope.zip"):
        make_controller("ppo", path=missing)
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"definitely not a zip archive" * 10)
    with pytest.raises(ValueError, match="corrupt.*junk.zip"):
        make_controller("ppo", path=junk)
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("data", "{}")
    with pytest.raises(ValueError, match="foreign.zip.*not a residual-quad PPO policy"):
        make_controller("ppo", path=foreign)
    # right record, broken network weights
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(smoke_run[0] / "final.zip") as src, zipfile.ZipFile(broken, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, data[: len(data) // 3] if name == "policy.pth" else data)
    with pytest.raises(ValueError, match="cannot load PPO policy .*broken.zip"):
        make_controller("ppo", path=broken)
    # truncated file
    cut = tmp_path / "cut.zip"
    cut.write_bytes((smoke_run[0] / "final.zip").read_bytes()[:5000])
    with pytest.raises(ValueError, match="cut.zip"):
        make_controller("ppo", path=cut)


@pytest.mark.parametrize("kind", ["ppo", "ppo_res"])
def test_without_sb3_asking_for_ppo_gives_the_install_hint(monkeypatch, tmp_path, capsys, kind):
    real = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name.startswith(("stable_baselines3", "torch")):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(policy_file_mod.importlib, "import_module", fake_import)
    with pytest.raises(ImportError, match=re_escape(INSTALL_HINT)) as info:
        make_controller(kind)
    # the hint names the controller that asked for it, not its sibling
    assert f"the {kind!r} controller and `rquad train {kind}`" in str(info.value)
    from residual_quad.cli import main

    assert main(["train", kind, "--out", str(tmp_path / "x"), "--steps", "16384"]) == 2
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and f"the {kind!r} controller" in err
    assert not (tmp_path / "x" / "final.zip").exists()


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_config_is_strict_and_holds_extra_out():
    with pytest.raises(ValueError, match="unknown key.*learning_rat"):
        load_config({"learning_rat": 1e-3})
    with pytest.raises(ValueError, match="held out"):
        load_config({"payloads": ["none", "extra"]})
    with pytest.raises(ValueError, match="action_mode"):
        load_config({"action_mode": "accel"})
    cfg = load_config("ppo", total_steps=16384, seed=None)
    assert cfg.total_steps == 16384 and cfg.seed == 0 and "extra" not in cfg.payloads


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seed: -3\n", "seed must be an integer in [0, inf], got -3"),
        ("eval_seed: -1\n", "eval_seed must be an integer in [0, inf], got -1"),
        ("env_kwargs: {nope: 1}\n", "env_kwargs: unknown key(s) ['nope']; valid keys: ["),
        ("env_kwargs: {wind: calm}\n", "env_kwargs may not set ['wind']"),
        (
            "env_kwargs: {preview: [10, 1.0e17]}\nfeatures: {preview_k: 10}\n",
            "env_kwargs: preview window K·dt must be",
        ),
        ("env_kwargs: {control_hz: -5}\n", "env_kwargs: control_hz must be"),
    ],
)
def test_a_bad_seed_or_env_kwargs_names_the_file_and_the_key(tmp_path, capsys, text, message):
    """At load, not at the first reset: the message is the file, then the key (as the loader
    names every other key), and `rquad train` prints it as one user error."""
    from residual_quad.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value), err.value
    assert main(["train", "ppo", str(path), "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == f"rquad train ppo: error: {err.value}"
    assert not (tmp_path / "run").exists()


def test_the_residual_training_configs_name_a_negative_seed(tmp_path):
    from residual_quad.training.collect import CollectConfig
    from residual_quad.training.residual_train import TrainConfig

    for cls, text, message in (
        (TrainConfig, "seed: -3\n", "seed must be an integer in [0, inf], got -3"),
        (CollectConfig, "seeds: [1, -3]\n", "seeds[1] must be an integer in [0, inf], got -3"),
        (CollectConfig, "excitation_seed: -1\n", "excitation_seed must be an integer in [0, "),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        with pytest.raises(ValueError) as err:
            configs.load(cls, path)
        assert str(err.value).startswith(f"{path}: ") and message in str(err.value), err.value


def test_training_payloads_may_be_masses_lighter_than_the_held_out_one():
    """A grid of masses randomizes the payload beyond the named levels; a mass at or beyond the
    held-out ``extra`` (0.75 kg) would train on it (or make it an interpolation) and is refused,
    as are masses that are no masses."""
    grid = [round(0.05 * i, 2) for i in range(13)]  # 0 … 0.6 kg
    assert load_config({"payloads": grid}).payloads == grid
    assert load_config({"payloads": ["none", 0.35, "heavy"]}).payloads == ["none", 0.35, "heavy"]
    for bad in ([0.75], [0.3, 0.8], [0.7499999, 1.0]):
        with pytest.raises(ValueError, match=r"reaches the held-out extra \(0.75 kg\)"):
            load_config({"payloads": bad})
    for bad in ([float("nan")], [float("inf")], [-0.1], [True]):
        with pytest.raises(ValueError, match="payload must be one of"):
            load_config({"payloads": bad})
    with pytest.raises(ValueError, match="unknown payloads.*valid: none, light, heavy, extra"):
        load_config({"payloads": ["huge"]})
    with pytest.raises(ValueError, match="must not be empty"):
        load_config({"payloads": []})


_PAYLOAD_ITEMS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from(["none", "light", "heavy", "extra", "huge", ""]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PAYLOAD_ITEMS, max_size=4))
def test_any_payload_list_loads_below_the_held_out_mass_or_is_a_value_error(payloads):
    """Whatever a YAML list holds, the config either trains only on known names and masses in
    [0, 0.75) kg, or says why not with a ValueError — never another exception."""
    try:
        cfg = PPOTrainConfig(payloads=payloads)
    except ValueError:
        return
    for p in cfg.payloads:
        if isinstance(p, str):
            assert p in ("none", "light", "heavy")
        else:
            assert not isinstance(p, bool) and 0.0 <= float(p) < 0.75


def test_features_are_heading_invariant_and_scaled():
    env = ResidualQuadEnv(payload="light", wind="breezy", trajectory="helix")
    obs, _ = env.reset(seed=1)
    for _ in range(150):
        obs, *_ = env.step(np.array([0.1, 0.1, 0.1, 0.1]))
    f = ppo_features(obs)
    assert f.shape == (FEATURE_DIM,) == (len(FEATURE_NAMES),) and f.dtype == np.float32
    assert np.all(np.isfinite(f)) and np.all(np.abs(f) < 10)
    # rotate the whole scene (vehicle and reference) about the vertical axis: same features
    th = 0.7
    Rz = np.array([[math.cos(th), -math.sin(th), 0], [math.sin(th), math.cos(th), 0], [0, 0, 1]])
    rot = obs.copy()
    for sl in (L.pos, L.vel, L.ref_pos, L.ref_vel, L.ref_acc):
        rot[sl] = Rz @ obs[sl]
    rot[L.rot] = (Rz @ L.rotation(obs)).ravel()
    rot[L.ref_yaw] = math.remainder(obs[L.ref_yaw] + th, 2 * math.pi)
    np.testing.assert_allclose(ppo_features(rot), f, atol=1e-5)


@needs_sb3
def test_training_envs_randomize_scenarios_and_honour_given_ones():
    """Every episode of the training envs draws its scenario from the config's grid (the one
    sampler of the vector backend); a scenario given to the adapter is flown as given."""
    from residual_quad.training.ppo_vec import QuadVecEnv, ScenarioSampler

    sampler = ScenarioSampler(["none", "heavy"], ["calm", "windy"], ["hover", "figure8"])
    venv = QuadVecEnv(2, sampler, nthread=1, action_mode="ctbr", episode_s=0.02)
    try:
        venv.seed(0)
        venv.reset()
        seen = set()
        for _ in range(60):  # episodes of 2 control periods: 60 episodes in all
            *_, dones, infos = venv.step(np.zeros((2, 4), dtype=np.float32))
            seen |= {info["scenario"] for info, done in zip(infos, dones, strict=True) if done}
        assert len(seen) >= 6  # of 8
    finally:
        venv.close()
    masses = ScenarioSampler([0.1, 0.35, 0.6], ["calm"], ["hover"])  # a mass grid flies as drawn
    venv = QuadVecEnv(2, masses, nthread=1, action_mode="ctbr", episode_s=0.02)
    try:
        venv.seed(0)
        venv.reset()
        flown = set(venv.get_attr("payload_kg"))
        for _ in range(40):
            venv.step(np.zeros((2, 4), dtype=np.float32))
            flown |= set(venv.get_attr("payload_kg"))
        assert flown == {0.1, 0.35, 0.6}
    finally:
        venv.close()
    given = [{"payload": "heavy", "wind": "windy", "trajectory": "figure8"}]
    venv = QuadVecEnv(1, sampler, nthread=1, scenarios=given, action_mode="ctbr")
    try:
        venv.reset()
        assert venv.get_attr("payload_kg") == [0.5] and venv.get_attr("action_mode") == ["ctbr"]
    finally:
        venv.close()


def test_the_subproc_backend_is_refused_naming_why(tmp_path, capsys):
    """``backend: subproc`` (one worker process per env) is retired: its workers drew their
    scenarios on their own, so one seed trained on other episodes than the vector backend's one
    sampler; the config and the CLI refuse it in one line naming the vector backend."""
    with pytest.raises(ValueError, match="backend 'subproc' is retired.*use backend 'vector'"):
        _tiny_config(n_envs=2, backend="subproc")
    from residual_quad.cli import main

    out = tmp_path / "never"
    assert main(["train", "ppo", "--backend", "subproc", "--out", str(out)]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "backend 'subproc' is retired" in err and "ScenarioSampler" in err
    assert not out.exists()


@needs_sb3
def test_cli_trains_from_a_yaml_and_exports(tmp_path, capsys):
    from residual_quad import configs
    from residual_quad.cli import main

    cfg = _tiny_config(total_steps=512, eval_freq=0, checkpoint_freq=0)
    cfg.ppo = PPOHyperparams(n_steps=256, batch_size=128, n_epochs=1)
    yaml_path = configs.dump(cfg, tmp_path / "tiny.yaml")
    dest = tmp_path / "exported.zip"
    argv = ["train", "ppo", str(yaml_path), "--out", str(tmp_path / "run"), "--seed", "5"]
    assert main([*argv, "--export", str(dest), "--no-progress"]) == 0
    assert "steps (ctbr, 1 envs, seed 5, vector backend)" in capsys.readouterr().out
    assert load_config(tmp_path / "run" / "config.yaml").seed == 5
    assert read_meta(dest)["budget"]["seed"] == 5 and dest.with_suffix(".json").is_file()


@needs_sb3
def test_shipped_policies_unpickle_their_learning_rate_schedule():
    """Saved models pickle the schedule by name (``training.ppo._LinearSchedule`` in every policy
    saved before the training split): that name keeps loading, without a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = sb3.PPO.load(default_policy_path(), device="cpu")
    assert type(model.learning_rate).__name__ == "LinearSchedule"
    assert model.learning_rate(1.0) > model.learning_rate(0.0) > 0
