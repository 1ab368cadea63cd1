"""The ``sb3`` controller: every supported stable-baselines3 algorithm's zip loads and flies with
the exact actions of ``model.predict``; ``VecNormalize`` statistics are applied exactly as SB3
applies them; policies for other spaces, bad options and missing or corrupt files are refused
naming the file.

Models are fresh (untrained, seeded): saving and loading is what the adapter does, training adds
nothing to test here and costs minutes on 2 cores.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad.controllers import make_controller
from residual_quad.controllers.policy_file import INSTALL_HINT, default_policy_path
from residual_quad.envs.observation import OBS_DIM
from residual_quad.episode import run_episode

sb3 = pytest.importorskip("stable_baselines3", reason="needs the rl extra (stable-baselines3)")
import torch  # noqa: E402 - after the skip: torch comes with the rl extra

from residual_quad.controllers import sb3 as sb3_mod  # noqa: E402
from residual_quad.controllers.sb3 import (  # noqa: E402
    ALGORITHMS,
    SB3Policy,
    SB3PolicyError,
    write_action_mode,
)

BOX36 = gym.spaces.Box(-1, 1, (OBS_DIM,))
ENV_KWARGS = {"payload": "none", "wind": "calm", "trajectory": "hover"}


class Spaces(gym.Env):
    """An env that only has spaces (SB3 builds and saves a model from them without stepping)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space, self.action_space = observation_space, action_space


class Recorder:
    """A controller proxy that records what its inner controller saw and did."""

    def __init__(self, inner: SB3Policy):
        self.inner, self.action_mode = inner, inner.action_mode
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []

    def reset(self, seed: int | None = None) -> None:
        self.inner.reset(seed)

    def policy(self, obs: np.ndarray) -> np.ndarray:
        action = self.inner.policy(obs)
        self.obs.append(obs.copy())
        self.actions.append(action.copy())
        return action


@pytest.fixture(scope="module")
def zips(tmp_path_factory) -> Iterator[dict[str, Path]]:
    """One fresh model per algorithm, built on ``ResidualQuad-v0`` and saved."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("sb3")
    env = gym.make("ResidualQuad-v0", **ENV_KWARGS)
    out = {}
    for algo in ALGORITHMS:
        model = getattr(sb3, algo)("MlpPolicy", env, seed=0, device="cpu")
        out[algo] = folder / f"{algo.lower()}.zip"
        model.save(out[algo])
    env.close()
    yield out
    torch.set_num_threads(threads)  # leave the process as found


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_every_algorithm_flies_with_the_actions_of_model_predict(zips, algo):
    ctrl = make_controller("sb3", path=str(zips[algo]))
    assert isinstance(ctrl, SB3Policy)
    assert ctrl.algo == algo  # detected from the zip
    assert ctrl.action_mode == "rotor"
    rec = Recorder(ctrl)
    result = run_episode(rec, seed=3, episode_s=0.08, **ENV_KWARGS)
    assert result.steps == 8 and len(rec.actions) == 8
    model = getattr(sb3, algo).load(zips[algo], device="cpu")
    for obs, action in zip(rec.obs, rec.actions, strict=True):
        assert action.shape == (4,) and action.dtype == np.float64
        assert np.all(np.isfinite(action)) and np.all(np.abs(action) <= 1.0)
        expected, _ = model.predict(obs, deterministic=True)
        assert np.array_equal(action, expected)
    assert np.unique(np.array(rec.actions), axis=0).shape[0] > 1  # actions follow the state


def test_explicit_algo_and_a_path_without_zip_suffix(zips):
    ctrl = make_controller("sb3", path=str(zips["TD3"].with_suffix("")), algo="td3")
    assert ctrl.algo == "TD3" and ctrl.path == zips["TD3"]
    with pytest.raises(SB3PolicyError, match=re.escape(str(zips["PPO"])) + ".*SAC"):
        make_controller("sb3", path=str(zips["PPO"]), algo="SAC")


def test_vecnormalize_statistics_are_applied_exactly_as_sb3_does(zips, tmp_path):
    venv = sb3.common.vec_env.DummyVecEnv(
        [lambda: gym.make("ResidualQuad-v0", payload="light", trajectory="helix")]
    )
    norm = sb3.common.vec_env.VecNormalize(venv, clip_obs=3.0)
    norm.seed(0)
    norm.reset()
    rng = np.random.default_rng(0)
    for _ in range(50):  # gather statistics from random flight
        norm.step(rng.uniform(-0.2, 0.4, size=(1, 4)).astype(np.float32))
    pkl = tmp_path / "vecnormalize.pkl"
    norm.save(str(pkl))

    ctrl = make_controller("sb3", path=str(zips["SAC"]), vecnormalize=str(pkl))
    rec = Recorder(ctrl)
    run_episode(rec, seed=1, episode_s=0.05, payload="light", trajectory="helix")
    loaded = sb3.common.vec_env.VecNormalize.load(str(pkl), venv)
    model = sb3.SAC.load(zips["SAC"], device="cpu")
    for obs, action in zip(rec.obs, rec.actions, strict=True):
        x = ctrl.observe(obs)
        assert np.array_equal(x, loaded.normalize_obs(obs))
        assert np.all(np.abs(x) <= 3.0) and not np.array_equal(x, obs.astype(np.float32))
        expected, _ = model.predict(loaded.normalize_obs(obs), deterministic=True)
        assert np.array_equal(action, expected)
    before = ctrl.normalizer.obs_rms.mean.copy()
    ctrl.policy(rec.obs[0])
    assert np.array_equal(ctrl.normalizer.obs_rms.mean, before)  # frozen
    venv.close()


def test_action_mode_from_the_zip_hint_or_the_option(zips, tmp_path):
    path = tmp_path / "ctbr.zip"
    path.write_bytes(zips["PPO"].read_bytes())
    assert make_controller("sb3", path=str(path), action_mode="ctbr").action_mode == "ctbr"
    write_action_mode(path, "ctbr")
    ctrl = make_controller("sb3", path=str(path))
    assert ctrl.action_mode == "ctbr"
    result = run_episode(ctrl, episode_s=0.05, **ENV_KWARGS)  # the env follows the policy
    assert result.steps == 5
    with pytest.raises(SB3PolicyError, match=r"action-mode mismatch.*ctbr\.zip.*'ctbr'.*'rotor'"):
        make_controller("sb3", path=str(path), action_mode="rotor")
    with pytest.raises(ValueError, match="controller acts in action_mode 'ctbr'"):
        run_episode(ctrl, episode_s=0.05, action_mode="rotor")
    with pytest.raises(ValueError, match="accel.*rotor, ctbr"):
        write_action_mode(path, "accel")


def _spaces_zip(folder: Path, name: str, algo: str, obs: gym.Space, act: gym.Space) -> Path:
    model = getattr(sb3, algo)("MlpPolicy", Spaces(obs, act), seed=0, device="cpu")
    model.save(folder / name)
    return folder / name


@pytest.mark.parametrize(
    ("algo", "obs", "act", "named"),
    [  # (algorithm, observation space, action space, what the error names)
        ("SAC", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), "observation space Box"),
        ("PPO", BOX36, gym.spaces.Discrete(4), "action space Discrete"),
        ("TD3", BOX36, gym.spaces.Box(-1, 1, (3,)), "action space Box"),
        ("SAC", BOX36, gym.spaces.Box(-2, 2, (4,)), r"Box\(-2\.0"),
        ("A2C", gym.spaces.Box(-1, 1, (35,)), gym.spaces.Box(-1, 1, (4,)), r"ppo_features"),
        (
            "PPO",
            gym.spaces.Dict({"x": BOX36}),
            gym.spaces.Box(-1, 1, (4,)),
            r"observation space Dict",
        ),
    ],
)
def test_a_policy_for_other_spaces_is_refused_naming_file_and_mismatch(
    tmp_path, algo, obs, act, named
):
    policy = "MultiInputPolicy" if isinstance(obs, gym.spaces.Dict) else "MlpPolicy"
    model = getattr(sb3, algo)(policy, Spaces(obs, act), seed=0, device="cpu")
    model.save(tmp_path / "other.zip")
    with pytest.raises(SB3PolicyError, match=re.escape(str(tmp_path / "other.zip")) + ".*" + named):
        make_controller("sb3", path=str(tmp_path / "other.zip"))


def test_pendulum_policy_is_refused(tmp_path):
    env = gym.make("Pendulum-v1")
    sb3.SAC("MlpPolicy", env, seed=0, device="cpu").save(tmp_path / "pendulum.zip")
    with pytest.raises(SB3PolicyError, match=r"pendulum\.zip was trained on observation space"):
        make_controller("sb3", path=str(tmp_path / "pendulum.zip"))


def test_a_policy_on_ppo_features_flies_with_that_option(tmp_path):
    from residual_quad.controllers.features import FEATURE_DIM, ppo_features

    space = gym.spaces.Box(-np.inf, np.inf, (FEATURE_DIM,), dtype=np.float32)
    path = _spaces_zip(tmp_path, "feat.zip", "A2C", space, gym.spaces.Box(-1, 1, (4,)))
    ctrl = make_controller("sb3", path=str(path), observation="ppo_features")
    obs = gym.make("ResidualQuad-v0").reset(seed=0)[0]
    model = sb3.A2C.load(path, device="cpu")
    assert np.array_equal(ctrl.policy(obs), model.predict(ppo_features(obs), deterministic=True)[0])


def test_the_project_ppo_file_is_sent_to_the_ppo_controller():
    with pytest.raises(SB3PolicyError, match=r"ppo_default\.zip.*'ppo' controller"):
        make_controller("sb3", path=str(default_policy_path()), observation="ppo_features")


def test_stochastic_actions_are_reproducible_per_seed(zips):
    ctrl = make_controller("sb3", path=str(zips["SAC"]), deterministic="false")
    obs = gym.make("ResidualQuad-v0").reset(seed=0)[0]
    ctrl.reset(7)
    first = [ctrl.policy(obs) for _ in range(3)]
    ctrl.reset(7)
    again = [ctrl.policy(obs) for _ in range(3)]
    assert np.array_equal(first, again) and not np.array_equal(first[0], first[1])


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, r"needs path="),
        # checked against the sb3 option table when the spec is parsed
        ({"algo": "DQN"}, r"sb3: option algo must be one of PPO, SAC, TD3, A2C, DDPG.*'DQN'"),
        (
            {"observation": "pixels"},
            r"option observation must be one of raw, ppo_features.*'pixels'",
        ),
        ({"action_mode": "accel"}, r"option action_mode must be one of rotor, ctbr.*'accel'"),
        ({"deterministic": "maybe"}, r"option deterministic must be true or false, got 'maybe'"),
    ],
)
def test_bad_options_are_value_errors_listing_the_choices(zips, options, named):
    if options:
        options = {"path": str(zips["PPO"]), **options}
    with pytest.raises(ValueError, match=named):
        make_controller("sb3", **options)


def test_missing_and_foreign_files_are_named(zips, tmp_path):
    missing = tmp_path / "nowhere.zip"
    with pytest.raises(SB3PolicyError, match=r"not found: .*nowhere\.zip"):
        make_controller("sb3", path=str(missing))
    with pytest.raises(SB3PolicyError, match=r"not found: .*stats\.pkl"):
        make_controller("sb3", path=str(zips["PPO"]), vecnormalize=str(tmp_path / "stats.pkl"))
    with pytest.raises(SB3PolicyError, match=r"policy file .* is a directory, not a file"):
        make_controller("sb3", path=str(tmp_path))
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(SB3PolicyError, match=r"plain\.zip is a zip archive but not"):
        make_controller("sb3", path=str(plain))
    other = tmp_path / "other.pkl"
    other.write_bytes(pickle.dumps({"mean": [0.0] * OBS_DIM}))
    with pytest.raises(SB3PolicyError, match=r"other\.pkl holds a dict, not VecNormalize"):
        make_controller("sb3", path=str(zips["PPO"]), vecnormalize=str(other))
    junk = tmp_path / "junk.pkl"
    junk.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(SB3PolicyError, match=r"corrupt or unreadable VecNormalize .*junk\.pkl"):
        make_controller("sb3", path=str(zips["PPO"]), vecnormalize=str(junk))


def test_statistics_for_other_spaces_or_non_finite_are_refused(zips, tmp_path):
    venv = sb3.common.vec_env.DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    norm = sb3.common.vec_env.VecNormalize(venv)
    norm.save(str(tmp_path / "pendulum.pkl"))
    with pytest.raises(SB3PolicyError, match=r"pendulum\.pkl.*shape \(3,\).*\(36,\)"):
        make_controller("sb3", path=str(zips["PPO"]), vecnormalize=str(tmp_path / "pendulum.pkl"))
    venv = sb3.common.vec_env.DummyVecEnv([lambda: gym.make("ResidualQuad-v0")])
    norm = sb3.common.vec_env.VecNormalize(venv)
    norm.obs_rms.var[4] = np.nan
    norm.save(str(tmp_path / "nan.pkl"))
    with pytest.raises(SB3PolicyError, match=r"nan\.pkl: mean and var must be finite"):
        make_controller("sb3", path=str(zips["PPO"]), vecnormalize=str(tmp_path / "nan.pkl"))
    venv.close()


def test_non_finite_network_parameters_are_refused(tmp_path):
    model = sb3.TD3("MlpPolicy", gym.make("ResidualQuad-v0"), seed=0, device="cpu")
    with torch.no_grad():
        next(model.policy.actor.parameters())[0, 0] = float("nan")
    model.save(tmp_path / "nan.zip")
    with pytest.raises(SB3PolicyError, match=r"nan\.zip: the policy network has non-finite"):
        make_controller("sb3", path=str(tmp_path / "nan.zip"))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_truncated_or_bit_flipped_zip_flies_or_is_named(zips, tmp_path_factory, data):
    blob = bytearray(zips["SAC"].read_bytes())
    if data.draw(st.booleans(), label="truncate"):
        blob = blob[: data.draw(st.integers(0, len(blob) - 1), label="keep")]
    else:
        for at in data.draw(st.lists(st.integers(0, len(blob) - 1), min_size=1, max_size=4)):
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
    path = tmp_path_factory.mktemp("bad") / "mutated.zip"
    path.write_bytes(bytes(blob))
    try:
        ctrl = make_controller("sb3", path=str(path))
    except SB3PolicyError as exc:
        assert "mutated.zip" in str(exc)
        return
    action = ctrl.policy(gym.make("ResidualQuad-v0").reset(seed=0)[0])
    assert action.shape == (4,) and np.all(np.isfinite(action))


def test_without_sb3_the_install_hint(monkeypatch, zips):
    real = sb3_mod.importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name.startswith(("stable_baselines3", "torch")):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sb3_mod.importlib, "import_module", fake_import)
    with pytest.raises(ImportError, match=re.escape(INSTALL_HINT)):
        make_controller("sb3", path=str(zips["PPO"]))
