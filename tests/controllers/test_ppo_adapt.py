"""Policies with inputs beyond the base features, and ``ppo_adapt``: batched = single in closed
loop, ``ppo_adapt``'s estimate is ``geo_rls``'s estimator fed the same observations and commands,
the shipped files read as the empty spec, and a layout mismatch names both layouts."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.spatial.transform import Rotation

from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import batch_from_spec
from residual_quad.controllers.policy_file import (
    ACTION_DIMS,
    PolicyFileError,
    read_meta,
    save_model,
)
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.controllers.ppo import observation_actions
from residual_quad.controllers.ppo_adapt import applied_actions, commanded_acceleration
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.controllers.specs import parse_spec
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import observation_env

pytest.importorskip("stable_baselines3", reason="needs the rl extra (stable-baselines3)")

SPEC = FeatureSpec(action_history=3, error_integral=True)
ADAPT = FeatureSpec(action_history=2, error_integral=True, estimate=True)


class _Spaces(gym.Env):
    """Only the spaces of a policy (the tiny policies here are never trained)."""

    def __init__(self, dim: int, action_dim: int):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)


def tiny_policy(path: Path, kind: str, spec: FeatureSpec, dim: int | None = None, **record) -> Path:
    """An untrained 16×16 policy file of ``kind`` for ``spec`` (its network takes ``dim``
    inputs: the spec's size unless given), action repeat 2, no normalization."""
    from stable_baselines3 import PPO

    a = ACTION_DIMS[kind]
    env = _Spaces(spec.dim(a) if dim is None else dim, a)
    model = PPO("MlpPolicy", env, seed=0, n_steps=64, policy_kwargs={"net_arch": [16, 16]})
    meta = {"controller": kind, "action_mode": "rotor", "action_repeat": 2, "obs_norm": None}
    if not spec.empty:
        meta["features"] = spec.to_record()
        meta["observation_layout"] = spec.layout_name(a)
    if kind == "ppo_res":
        meta["accel_scale"] = 4.0
    return save_model(model, path, {**meta, **record})


def _closed_loop(spec_text: str, single_factory, steps: int = 40) -> tuple[list, list]:
    """Fly a batch of 3 and 3 single controllers on the same observations; their actions."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    n = 3
    env = ResidualQuadVectorEnv(
        n, scenarios=[{"payload": p, "wind": "windy"} for p in ("none", "heavy", "light")]
    )
    obs, _ = env.reset(seed=0)
    batch = batch_from_spec(parse_spec(spec_text), n)
    singles = [single_factory() for _ in range(n)]
    for c in singles:
        c.reset()
    got, want = [], []
    for _ in range(steps):
        action = batch.policy_batch(obs)
        got.append(action)
        want.append(np.stack([c.policy(obs[i]) for i, c in enumerate(singles)]))
        obs, *_ = env.step(action)
    env.close()
    return got, want


def test_ppo_with_a_history_and_integral_batched_equals_single_bit_for_bit(tmp_path):
    path = tiny_policy(tmp_path / "p.zip", "ppo", SPEC)
    ctrl = make_controller("ppo", path=path)
    assert ctrl.spec == SPEC and ctrl.inputs.dim == SPEC.dim(4)
    got, want = _closed_loop(f"ppo:path={path}", lambda: make_controller("ppo", path=path))
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "record", [{}, {"estimate_feedforward": True}], ids=["input", "feedforward"]
)
def test_ppo_adapt_batched_equals_single(tmp_path, record):
    path = tiny_policy(tmp_path / "a.zip", "ppo_adapt", ADAPT, **record)
    assert make_controller("ppo_adapt", path=path).law.feedforward == bool(record)
    got, want = _closed_loop(
        f"ppo_adapt:path={path}", lambda: make_controller("ppo_adapt", path=path)
    )
    for a, b in zip(got, want, strict=True):  # the estimator twins agree to rounding
        assert np.allclose(a, b, rtol=0.0, atol=1e-9)


class _Reference:
    """A standalone estimator flying one vehicle over its own state (its float kernel)."""

    def __init__(self, estimator: ResidualEstimator):
        self.estimator = estimator
        self.state = estimator.init_one()

    def estimate(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        self.state, est = self.estimator.estimate_one(self.state, obs, R, a_cmd)
        return est

    def set_command(self, a_eff: np.ndarray) -> None:
        self.state = self.estimator.set_command_one(self.state, a_eff)


def _beside_a_geo_rls_estimator(kind: str, path: Path, make_env) -> tuple:
    """The controller of ``path``, ``geo_rls``, a fresh estimator with its settings, and a
    heavy windy helix env with its first observation (the controller reset)."""
    ctrl = make_controller(kind, path=path)
    geo_rls = make_controller("geo_rls")
    ref = _Reference(ResidualEstimator(geo_rls.context, RLSGeoTracker.settings(), learn=True))
    env = make_env(payload="heavy", wind="windy", trajectory="helix")
    obs, _ = env.reset(seed=1)
    ctrl.reset()
    return ctrl, geo_rls, ref, env, obs


@pytest.mark.parametrize("feedforward", [False, True], ids=["input", "feedforward"])
def test_ppo_adapt_estimate_is_geo_rls_estimator_fed_the_same_stream(
    tmp_path, make_env, feedforward
):
    """The estimator sees geo_rls's stream; with the feed-forward the rotors get the policy's
    action plus ``−m·(b3·Δâ)/(2·f_max)`` each (by hand), and that is the command it records."""
    record = {"estimate_feedforward": True} if feedforward else {}
    path = tiny_policy(tmp_path / "a.zip", "ppo_adapt", ADAPT, **record)
    ctrl, geo_rls, ref, env, obs = _beside_a_geo_rls_estimator("ppo_adapt", path, make_env)
    frame = Airframe()
    estimates, moved = [], 0.0
    for _ in range(120):
        action = ctrl.policy(obs)
        R = L.rotation(obs)
        est = ref.estimate(obs, R, np.zeros(3))
        assert np.array_equal(ctrl.state.estimator.last_estimate, est)
        estimates.append(est)
        du = -frame.mass * float(R[:, 2] @ est) / (2.0 * frame.max_rotor_thrust) * feedforward
        want = np.clip(ctrl.state.held + du, -1.0, 1.0)
        assert np.allclose(action, want, rtol=0.0, atol=1e-12)
        moved = max(moved, float(np.abs(action - ctrl.state.held).max()))
        # the command it records: the nominal acceleration of the rotor thrusts, by hand
        f0, f1, f2, f3 = (action + 1.0) * (0.5 * frame.max_rotor_thrust)  # N
        a = R[:, 2] * ((f0 + f1 + f2 + f3) / frame.mass)
        a[2] -= frame.gravity
        ref.set_command(a)
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
    assert len(estimates) > 50 and np.abs(np.array(estimates)[-1]).max() > 0.1
    assert ctrl.estimator.config == geo_rls.config  # geo_rls's network and RLS settings
    assert (moved > 0.01) == feedforward  # the heavy payload's feed-forward is felt


@settings(max_examples=60, deadline=None)
@given(
    q=hnp.arrays(np.float64, (5, 4), elements=st.floats(-1.0, 1.0)),
    est=hnp.arrays(np.float64, (5, 3), elements=st.floats(-20.0, 20.0)),
    held=hnp.arrays(np.float64, (5, 4), elements=st.floats(-0.5, 0.5)),
)
def test_thrust_feedforward_cancels_the_thrust_axis_part_of_the_estimate(q, est, held):
    """Known answer: unclipped, the feed-forward moves the commanded nominal acceleration by
    ``−(b3·Δâ)·b3`` — the thrust axis' part of the estimate, cancelled — and a batch equals its
    rows bit for bit."""
    norm = np.linalg.norm(q, axis=1)
    assume(np.all(norm > 0.1))
    R = Rotation.from_quat(q / norm[:, None]).as_matrix()
    frame = Airframe()
    applied = applied_actions(held, est, R, frame)
    b3 = R[:, :, 2]
    along = np.sum(b3 * est, axis=1)
    free = np.all(np.abs(applied) < 1.0, axis=1)  # the rows the clip left alone
    moved = commanded_acceleration(applied, R, frame) - commanded_acceleration(held, R, frame)
    assert np.allclose(moved[free], -along[free, None] * b3[free], rtol=0.0, atol=1e-9)
    for i in range(len(q)):
        one = applied_actions(held[i : i + 1], est[i : i + 1], R[i : i + 1], frame)
        assert np.array_equal(one[0], applied[i])
    assert np.all(np.abs(applied) <= 1.0)


def test_a_file_without_a_features_record_reads_as_the_empty_spec_and_acts_as_before(tmp_path):
    """Files written before the inputs existed carry no ``features`` key: they read as the
    empty spec and act through the path without inputs."""
    path = tiny_policy(tmp_path / "old.zip", "ppo", FeatureSpec())
    assert "features" not in read_meta(path)
    ctrl = make_controller("ppo", path=path)
    assert ctrl.spec == FeatureSpec()
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs = np.zeros(36)
        obs[L.rot] = np.eye(3).ravel()
        obs[L.pos] = rng.normal(0, 0.3, 3)
        obs[L.thrusts] = 1.2
        ctrl.reset()
        before = observation_actions(ctrl, obs[None, :])[0]  # the path without inputs
        assert np.array_equal(ctrl.policy(obs), before)


def test_a_network_of_another_layout_names_both(tmp_path):
    path = tiny_policy(tmp_path / "p.zip", "ppo", SPEC, dim=FeatureSpec().dim())
    with pytest.raises(PolicyFileError) as info:
        make_controller("ppo", path=path)
    msg = str(info.value)
    assert SPEC.layout_name() in msg and f"({FeatureSpec().dim()},)" in msg and str(path) in msg
    path = tiny_policy(tmp_path / "q.zip", "ppo", SPEC, observation_layout="base (35)")
    with pytest.raises(PolicyFileError, match=r"'base \(35\)' disagrees .*base \+ history 3"):
        make_controller("ppo", path=path)


@pytest.mark.parametrize(
    ("kind", "spec", "record", "message"),
    [
        (
            "ppo",
            ADAPT,
            {},
            "the estimate feature is ppo_adapt's, ppo_res's and ppo_acc's, not 'ppo'",
        ),
        ("ppo_adapt", SPEC, {}, "ppo_adapt policy acts in action_mode 'rotor' and sees the est"),
        ("ppo", SPEC, {"features": {"history": 1}}, r"features keys \['history'\] unknown"),
        (
            "ppo_adapt",
            ADAPT,
            {"estimate_feedforward": "yes"},
            "estimate_feedforward must be true or false, got 'yes'",
        ),
        ("ppo", SPEC, {"features": {"action_history": -1}}, "action_history must be an integer"),
    ],
)
def test_bad_feature_records_are_policy_file_errors(tmp_path, kind, spec, record, message):
    path = tiny_policy(tmp_path / "p.zip", kind, spec, **record)
    with pytest.raises(PolicyFileError, match=message):
        make_controller(kind, path=path)


def test_the_shipped_ppo_adapt_flies_with_its_preview_and_estimate():
    """The default policy needs the env's preview: run_episode makes it from the file."""
    from residual_quad.episode import run_episode

    ctrl = make_controller("ppo_adapt")
    assert ctrl.spec.estimate and ctrl.spec.preview_k == 10
    assert observation_env(ctrl) == {"preview": [10, 0.06]}  # the env run_episode makes
    r = run_episode(ctrl, payload="heavy", wind="windy", trajectory="hover", seed=0, episode_s=8)
    assert not r.diverged and r.rmse < 0.3
    last = ctrl.state.estimator.last_estimate
    assert np.isfinite(last).all() and np.abs(last).max() > 0.5


def test_ppo_res_with_a_history_batched_equals_single(tmp_path):
    path = tiny_policy(tmp_path / "r.zip", "ppo_res", SPEC)
    got, want = _closed_loop(
        f"ppo_res:path={path}", lambda: make_controller("ppo_res", path=path), steps=30
    )
    for a, b in zip(got, want, strict=True):
        assert np.allclose(a, b, rtol=0.0, atol=1e-12)
    assert math.isfinite(float(np.abs(np.array(got)).max()))


RES_ADAPT = FeatureSpec(action_history=2, estimate=True)


def test_ppo_res_with_the_estimate_batched_equals_single(tmp_path):
    path = tiny_policy(tmp_path / "r.zip", "ppo_res", RES_ADAPT, tracker="pid")
    got, want = _closed_loop(
        f"ppo_res:path={path}", lambda: make_controller("ppo_res", path=path), steps=40
    )
    for a, b in zip(got, want, strict=True):  # the estimator twins agree to rounding
        assert np.allclose(a, b, rtol=0.0, atol=1e-9)


def test_ppo_res_estimate_is_geo_rls_estimator_told_the_inner_loops_command(tmp_path, make_env):
    """Every control period: Δâ of the observation with the tracker's a_cmd, then the command
    recorded is what the inner loop got, a_cmd + R_z(ψ)·δa_h = a_cmd − last_residual."""
    path = tiny_policy(tmp_path / "r.zip", "ppo_res", RES_ADAPT, tracker="pid")
    ctrl, geo_rls, ref, env, obs = _beside_a_geo_rls_estimator("ppo_res", path, make_env)
    estimates = []
    for _ in range(120):
        action = ctrl.policy(obs)
        state = ctrl.state
        est = ref.estimate(obs, L.rotation(obs), state.last_a_cmd)
        assert np.array_equal(state.estimator.last_estimate, est)
        ref.set_command(state.last_a_cmd - state.last_residual)
        assert np.array_equal(state.estimator.last_a_eff, ref.state.last_a_eff)
        estimates.append(est)
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
    assert len(estimates) > 50 and np.abs(np.array(estimates)[-1]).max() > 0.1
    assert np.abs(ctrl.last_residual).max() > 0.0  # the policy's correction is in the command
    assert ctrl.estimator.config == geo_rls.config  # geo_rls's network and RLS settings


def _samples_and_a_bad_one(make_env) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two successive observations and a NaN one."""
    env = make_env(payload="light", wind="breezy")
    o0, _ = env.reset(seed=2)
    o1, *_ = env.step(np.zeros(4))
    return o0, o1, np.full_like(o0, np.nan)


def _batch_through_a_bad_sample(spec_text: str, o0, o1, bad) -> tuple:
    """A batch of 2 flown (o0, o0) then (bad, o1): the batch and its two actions."""
    batch = batch_from_spec(parse_spec(spec_text), 2)
    batch.reset_batch()
    first = batch.policy_batch(np.stack((o0, o0)))
    return batch, first, batch.policy_batch(np.stack((bad, o1)))


def test_a_bad_observation_leaves_ppo_res_with_the_estimate_as_it_was(tmp_path, make_env):
    path = tiny_policy(tmp_path / "r.zip", "ppo_res", RES_ADAPT, tracker="pid")
    o0, o1, bad = _samples_and_a_bad_one(make_env)
    single, clean = make_controller("ppo_res", path=path), make_controller("ppo_res", path=path)
    single.reset(), clean.reset()
    a0 = single.policy(o0)
    clean.policy(o0)
    assert np.array_equal(single.policy(bad), a0) and single.state.estimator.steps == 1
    c1 = clean.policy(o1)
    assert np.array_equal(single.policy(o1), c1)
    batch, first, second = _batch_through_a_bad_sample(f"ppo_res:path={path}", o0, o1, bad)
    estimator = batch.state.estimator
    assert np.array_equal(second[0], first[0]) and estimator.steps.tolist() == [1, 2]
    last = clean.state.estimator.last_estimate
    assert np.allclose(estimator.last_estimate[1], last, rtol=0.0, atol=1e-12)
    assert np.allclose(second[1], c1, rtol=0.0, atol=1e-9)


def test_a_bad_observation_leaves_ppo_adapt_as_it_was(tmp_path, make_env):
    path = tiny_policy(tmp_path / "a.zip", "ppo_adapt", ADAPT)
    o0, o1, bad = _samples_and_a_bad_one(make_env)
    single, clean = make_controller("ppo_adapt", path=path), make_controller("ppo_adapt", path=path)
    single.reset(), clean.reset()
    a0 = single.policy(o0)
    clean.policy(o0)
    steps = single.state.estimator.steps
    assert np.array_equal(single.policy(bad), a0) and single.state.estimator.steps == steps
    single.policy(o1), clean.policy(o1)
    batch, first, second = _batch_through_a_bad_sample(f"ppo_adapt:path={path}", o0, o1, bad)
    estimator = batch.state.estimator
    assert np.array_equal(second[0], first[0]) and estimator.steps.tolist() == [1, 2]
    last = clean.state.estimator.last_estimate
    assert np.allclose(estimator.last_estimate[1], last, rtol=0.0, atol=1e-12)
    assert np.isfinite(estimator.last_estimate).all()


PREVIEW = FeatureSpec(preview_k=2, action_history=2, estimate=True)


def test_a_preview_policy_flies_in_the_env_of_its_file_alone_and_in_sweeps(tmp_path):
    """run_episode and both sweep backends make the env with the policy's preview (as with its
    action mode); the other controllers of the batch fly the plain env, the numbers agree."""
    from residual_quad.episode import run_episode
    from residual_quad.evaluation.sweep import SweepConfig, run_sweep

    path = tiny_policy(tmp_path / "p.zip", "ppo_adapt", PREVIEW, env_kwargs={"preview": [2, 0.1]})
    alone = run_episode(f"ppo_adapt:path={path}", payload="heavy", trajectory="helix", episode_s=2)
    assert alone.steps > 50  # an untrained policy: it flies (and may crash), no layout error
    label = f"ppo_adapt:path={path}"
    cfg = {
        "controllers": [label, "pid"],
        "payloads": ["heavy"],
        "winds": ["windy"],
        "trajectories": ["helix"],
        "seeds": [0, 1],
        "episode_s": 2.0,
        "series": [],
    }
    rows = {}
    for backend in ("vector", "local"):
        got = run_sweep(SweepConfig(**cfg), tmp_path / backend, backend=backend, progress=False)
        assert not [r for r in got if r.get("failed")]
        rows[backend] = {r["run_id"]: (r["diverged"], r["control_cost"]) for r in got}
    assert rows["vector"].keys() == rows["local"].keys() and len(rows["vector"]) == 4
    for run_id, (diverged, cost) in rows["vector"].items():
        assert diverged == rows["local"][run_id][0]
        assert cost == pytest.approx(rows["local"][run_id][1], rel=1e-9)
    # a sweep whose env sets another preview keeps it: the policy refuses that layout at step 0
    other = SweepConfig(**{**cfg, "controllers": [label], "env": {"preview": [3, 0.1]}})
    failed = run_sweep(other, tmp_path / "other", backend="local", progress=False)
    assert all(r.get("failed") for r in failed)
    assert "preview 2" in failed[0]["error"] and "preview 3" in failed[0]["error"]


def test_a_preview_policy_refuses_an_env_of_another_spacing_alone_batched_and_in_a_sweep(tmp_path):
    """The preview's spacing is part of the layout, as its K is: trained on 2 × 0.1 s, an env of
    2 × 0.05 s (the same observation width) is refused before the first step by run_episode
    (given env=, or the preview as an argument), by fly_batch, and a sweep's runs become failure
    rows — each naming both spacings."""
    from residual_quad.controllers.policy_inputs import LayoutError
    from residual_quad.episode import RunSpec, fly_batch, run_episode
    from residual_quad.evaluation.sweep import SweepConfig, run_sweep

    path = tiny_policy(tmp_path / "p.zip", "ppo_adapt", PREVIEW, env_kwargs={"preview": [2, 0.1]})
    both = r"preview 2 × 0\.1 s .* preview 2 × 0\.05 s"
    ctrl = make_controller("ppo_adapt", path=path)
    env = gym.make("ResidualQuad-v0", preview=(2, 0.05), episode_s=0.5)
    with pytest.raises(LayoutError, match=both):
        run_episode(ctrl, env=env)
    env.close()
    with pytest.raises(LayoutError, match=both):
        run_episode(ctrl, preview=(2, 0.05), episode_s=0.5)
    assert run_episode(ctrl, preview=(2, 3 * (0.1 / 3)), episode_s=0.5).steps > 0  # rounding
    batch = batch_from_spec(parse_spec(f"ppo_adapt:path={path}"), 2)
    runs = [RunSpec("ppo_adapt", seed=s, episode_s=0.5) for s in (0, 1)]
    with pytest.raises(LayoutError, match=both):
        fly_batch(runs, batch, {"preview": [2, 0.05]})
    cfg = SweepConfig(
        controllers=[f"ppo_adapt:path={path}"],
        payloads=["none"],
        winds=["calm"],
        trajectories=["hover"],
        seeds=[0],
        episode_s=0.5,
        series=[],
        env={"preview": [2, 0.05]},
    )
    rows = run_sweep(cfg, tmp_path / "sweep", backend="vector", progress=False)
    assert rows and all(r.get("failed") for r in rows)
    assert "preview 2 × 0.1 s" in rows[0]["error"] and "preview 2 × 0.05 s" in rows[0]["error"]


def test_the_shipped_ppo_adapt_refuses_another_preview_spacing():
    """The shipped files record their preview in env_kwargs ([10, 0.06], no spacing in the
    features record): that pair is what an env is checked against."""
    from residual_quad.controllers.policy_inputs import LayoutError
    from residual_quad.episode import run_episode

    ctrl = make_controller("ppo_adapt")
    env = gym.make("ResidualQuad-v0", preview=(10, 0.05), episode_s=0.5)
    with pytest.raises(LayoutError, match=r"preview 10 × 0\.06 s .* preview 10 × 0\.05 s"):
        run_episode(ctrl, env=env)
    env.close()
    with pytest.raises(LayoutError, match=r"10 × 0\.06 s .* base \(36\)"):
        run_episode(ctrl, env=gym.make("ResidualQuad-v0", episode_s=0.5))


@pytest.mark.parametrize(
    ("env_kwargs", "config", "found"),
    [
        ({"preview": [2]}, {"env_kwargs": {"preview": [2, 0.1]}}, [2, 0.1]),
        ({"preview": [2, 0.1]}, None, [2, 0.1]),
        ({"preview": [2]}, None, "env_kwargs.preview"),
        ({"preview": [2]}, {"env_kwargs": {"preview": [3, 0.1]}}, "env_kwargs.preview"),
        ({"preview": [2, -0.1]}, None, "env_kwargs.preview"),
        ({"preview": [2, 1e17]}, None, "window K·dt must be at most 3600 s"),
    ],
)
def test_a_records_preview_spacing_is_read_or_refused(tmp_path, env_kwargs, config, found):
    """A record whose env_kwargs.preview lacks the spacing takes it from the training config
    recorded with it (same K); without one, or with a spacing that is no valid dt, the file is
    a PolicyFileError naming the key."""
    record = {"env_kwargs": env_kwargs} | ({"config": config} if config else {})
    path = tiny_policy(tmp_path / "p.zip", "ppo_adapt", PREVIEW, **record)
    if isinstance(found, list):
        assert make_controller("ppo_adapt", path=path).env_kwargs == {"preview": found}
    else:
        with pytest.raises(PolicyFileError, match=found):
            make_controller("ppo_adapt", path=path)
