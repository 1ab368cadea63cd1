"""Bad PPO policy files: every one is a ``PolicyFileError`` (a ``ValueError``) naming the file, at
load time — never an ``AttributeError``/``KeyError`` at load or a ``ZeroDivisionError`` or a
broadcasting error at the first ``policy`` call.

Regression cases on the shipped policy's ``residual_quad.json`` record, then property-based
mutations: random JSON for each key, keys removed, a random top-level value, and truncated or
bit-flipped archives. A mutated file either loads and flies (finite actions) or names the file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from residual_quad.controllers import make_controller
from residual_quad.controllers.policy_file import (
    META_ENTRY,
    PolicyFileError,
    default_policy_path,
    read_meta,
)
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import observation_env

pytest.importorskip("stable_baselines3", reason="needs the rl extra (stable-baselines3)")

SHIPPED = default_policy_path()


def _entries() -> dict[str, bytes]:
    with zipfile.ZipFile(SHIPPED) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def _with_record(path: Path, record: bytes) -> Path:
    """A copy of the shipped policy whose ``residual_quad.json`` holds ``record``."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _entries().items():
            archive.writestr(name, record if name == META_ENTRY else data)
    return path


def _meta() -> dict[str, Any]:
    return json.loads(_entries()[META_ENTRY])


def _edited(**changes: Any) -> dict[str, Any]:
    """The shipped record with keys replaced (a value of ``...`` removes the key)."""
    meta = _meta()
    for key, value in changes.items():
        if value is ...:
            meta.pop(key, None)
        else:
            meta[key] = value
    return meta


norm = _meta()["obs_norm"]
DIM = len(norm["mean"])  # the shipped network's input width
CASES = {
    "record-is-a-list": [1, 2],
    "record-is-a-string": "policy",
    "no-action_mode": _edited(action_mode=...),
    "bad-action_mode": _edited(action_mode="thrust"),
    "action_repeat-0": _edited(action_repeat=0),
    "action_repeat-negative": _edited(action_repeat=-2),
    "action_repeat-float": _edited(action_repeat=2.5),
    "action_repeat-string": _edited(action_repeat="2"),
    "action_repeat-bool": _edited(action_repeat=True),
    "env_kwargs-list": _edited(env_kwargs=[1]),
    "env_kwargs-unknown": _edited(env_kwargs={"gravity": 3}),
    "env_kwargs-reserved": _edited(env_kwargs={"payload": "heavy"}),
    "obs_norm-short-mean": _edited(obs_norm={**norm, "mean": norm["mean"][:-1]}),
    "obs_norm-nan-var": _edited(obs_norm={**norm, "var": [float("nan")] * DIM}),
    "obs_norm-negative-var": _edited(obs_norm={**norm, "var": [-1.0] * DIM}),
    "obs_norm-string-mean": _edited(obs_norm={**norm, "mean": ["0"] * DIM}),
    "obs_norm-no-clip": _edited(obs_norm={k: v for k, v in norm.items() if k != "clip"}),
    "obs_norm-zero-clip": _edited(obs_norm={**norm, "clip": 0}),
    "obs_norm-list": _edited(obs_norm=[0.0] * DIM),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_records_name_the_file_at_load_time(tmp_path, case):
    path = _with_record(tmp_path / f"{case}.zip", json.dumps(CASES[case]).encode())
    with pytest.raises(PolicyFileError) as err:
        make_controller("ppo", path=path)
    assert str(path) in str(err.value)
    with pytest.raises(PolicyFileError):
        read_meta(path)


def test_unreadable_records_name_the_file(tmp_path):
    for name, record in (("utf16", json.dumps(_meta()).encode("utf-16")), ("deep", b"[" * 10**5)):
        path = _with_record(tmp_path / f"{name}.zip", record)
        with pytest.raises(PolicyFileError, match=name):
            make_controller("ppo", path=path)
    data = SHIPPED.read_bytes()
    for name, blob in (("cut", data[: len(data) - 100]), ("empty", b"")):
        path = tmp_path / f"{name}.zip"
        path.write_bytes(blob)
        with pytest.raises(PolicyFileError, match=name):
            make_controller("ppo", path=path)


@pytest.mark.parametrize("kind", ["ppo", "ppo_res", "ppo_adapt", "sac", "tqc"])
def test_a_missing_policy_or_a_folder_is_named_with_its_algorithm(tmp_path, kind):
    """``sac:path=nope.zip`` is a missing SAC policy, not a PPO one; a folder is a folder."""
    if kind == "tqc":
        pytest.importorskip("sb3_contrib", reason="tqc needs sb3-contrib")
    algo = {"sac": "SAC", "tqc": "TQC"}.get(kind, "PPO")
    with pytest.raises(FileNotFoundError, match=rf"^{algo} policy file not found: .*nope\.zip$"):
        make_controller(kind, path=tmp_path / "nope.zip")
    with pytest.raises(IsADirectoryError, match=rf"^{algo} policy file .* is a directory, not"):
        make_controller(kind, path=tmp_path)


def test_the_shipped_record_passes_unchanged(tmp_path):
    path = _with_record(tmp_path / "same.zip", json.dumps(_meta()).encode())
    ctrl = make_controller("ppo", path=path)
    assert (ctrl.action_mode, ctrl.action_repeat) == ("rotor", 2)


# ----------------------------------------------------------------------------- properties
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ppo_fuzz")


@pytest.fixture(scope="module")
def envs():
    made: dict[str, ResidualQuadEnv] = {}

    def get(ctrl: Any) -> ResidualQuadEnv:
        """An env of the controller's action mode with the observations it was trained on."""
        shaping = observation_env(ctrl)
        key = json.dumps([ctrl.action_mode, shaping], sort_keys=True)
        if key not in made:
            made[key] = ResidualQuadEnv(trajectory="helix", action_mode=ctrl.action_mode, **shaping)
        return made[key]

    yield get
    for env in made.values():
        env.close()


def _load_and_fly(path: Path, envs: Any) -> None:
    """The promise: loads and flies a few finite actions, or names the file."""
    try:
        ctrl = make_controller("ppo", path=path)
    except PolicyFileError as exc:
        assert str(path) in str(exc)
        event("rejected")
        return
    event("loaded")
    env = envs(ctrl)
    obs, _ = env.reset(seed=0)
    ctrl.reset(0)
    for _ in range(4):
        action = ctrl.policy(obs)
        assert action.shape == (4,) and np.all(np.isfinite(action))
        obs, *_ = env.step(action)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
KEYS = ["format", "feature_version", "action_mode", "action_repeat", "env_kwargs", "obs_norm"]
# plausible values as well as random ones, so that valid records are drawn too
PLAUSIBLE = {
    "action_mode": st.sampled_from(["rotor", "ctbr", "ROTOR"]),
    "action_repeat": st.integers(-1, 3),
    "env_kwargs": st.sampled_from([{}, {"ground_effect": False}, {"k_rate": 15.0}]),
    "obs_norm": st.sampled_from([None, norm, {**norm, "epsilon": 0.0}]),
}


@st.composite
def records(draw) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)  # a random top-level value
    meta = _meta()
    for key in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3)):
        how = draw(st.sampled_from(["remove", "random", "plausible"]))
        if how == "remove":
            meta.pop(key)
        elif how == "plausible" and key in PLAUSIBLE:
            meta[key] = draw(PLAUSIBLE[key])
        else:
            meta[key] = draw(json_values)
    if draw(st.booleans()) and isinstance(meta.get("obs_norm"), dict):  # one odd statistic
        stats = dict(meta["obs_norm"])
        field = draw(st.sampled_from(["mean", "var", "epsilon", "clip"]))
        special = st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e308, "x", None])
        if isinstance(stats.get(field), list):
            values = list(stats[field])
            values[draw(st.integers(0, len(values) - 1))] = draw(special)
            stats[field] = values
        else:
            stats[field] = draw(special)
        meta["obs_norm"] = stats
    return meta


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records())
def test_mutated_records_load_and_fly_or_name_the_file(workdir, envs, record):
    path = _with_record(workdir / "mutated.zip", json.dumps(record).encode())
    _load_and_fly(path, envs)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.one_of(st.none(), st.integers(0, 2**18)),
    flips=st.lists(st.tuples(st.integers(0, 2**18), st.integers(1, 255)), max_size=3),
)
def test_truncated_or_bit_flipped_archives_load_and_fly_or_name_the_file(
    workdir, envs, cut, flips, damage
):
    data = damage(SHIPPED.read_bytes(), cut, flips)
    path = workdir / "damaged.zip"
    path.write_bytes(data)
    _load_and_fly(path, envs)
