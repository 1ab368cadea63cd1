"""Reference preview (``preview=(K, dt)``): values, padding, single = vector, off, checks."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.envs.latency import hover_action
from residual_quad.envs.observation import (
    MAX_PREVIEW_POINTS,
    OBS_DIM,
    ObsLayout,
    PreviewSpec,
    check_preview,
    layout_name,
    observation_dim,
)
from residual_quad.envs.preview import MAX_PREVIEW_HORIZON_S, grid_steps
from residual_quad.envs.residual_quad_env import MAX_EPISODE_S, ResidualQuadEnv
from residual_quad.envs.trajectories import Reference, Trajectory, make_trajectory
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

L = ObsLayout


@dataclass(frozen=True)
class Wave(Trajectory):
    """A user trajectory: a straight line along x with a vertical sine."""

    name = "wave"

    def __call__(self, t: float) -> Reference:
        w = 2.0
        pos = np.array([0.5 * t, -0.2, 1.5 + 0.1 * math.sin(w * t)])
        vel = np.array([0.5, 0.0, 0.1 * w * math.cos(w * t)])
        acc = np.array([0.0, 0.0, -0.1 * w * w * math.sin(w * t)])
        return Reference(pos, vel, acc, 0.0)


def _hover(env: ResidualQuadEnv) -> np.ndarray:
    return hover_action(env.action_mapping, env.airframe.hover_thrust)


def _points(obs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return obs[L.preview_pos(k)].reshape(k, 3), obs[L.preview_vel(k)].reshape(k, 3)


# ---------------------------------------------------------------- layout and names
def test_layout_tiles_the_observation_after_the_base_fields():
    spec = PreviewSpec(10, 0.06)
    assert spec.dim == 60 and observation_dim(spec) == 96 and observation_dim(None) == OBS_DIM
    assert L.preview_pos(10) == slice(36, 66) and L.preview_vel(10) == slice(66, 96)
    low, high = L.bounds(spec)
    assert low.shape == high.shape == (96,) and np.all(np.isfinite(high))
    np.testing.assert_array_equal(high[:OBS_DIM], L.bounds()[1])
    assert np.all(high[OBS_DIM:] == 1e4)
    assert layout_name(None) == "base (36)" == layout_name((0, 0.05))
    assert layout_name((10, 0.06)) == "base + preview 10 × 0.06 s (96)"
    assert layout_name(spec) == layout_name((10, 0.06))


def test_check_preview_normalizes_good_input():
    assert check_preview(None) is None
    assert check_preview((0, 0.05)) is None
    assert check_preview([10, 0.06]) == PreviewSpec(10, 0.06)  # YAML gives a list
    assert check_preview((np.int64(3), np.float32(0.5))) == PreviewSpec(3, 0.5)
    assert check_preview(PreviewSpec(2, 0.1)) == PreviewSpec(2, 0.1)
    assert grid_steps(PreviewSpec(10, 0.06), 0.01) == 6
    assert grid_steps(PreviewSpec(10, 0.05), 0.01) == 5
    assert grid_steps(PreviewSpec(3, 0.025), 0.01) == 0
    assert grid_steps(PreviewSpec(3, 0.004), 0.01) == 0


# ---------------------------------------------------------------- values
@pytest.mark.parametrize("preview", [(5, 0.06), (3, 0.025)], ids=["on-grid", "off-grid"])
@pytest.mark.parametrize("trajectory", ["hover", "helix", "figure8", Wave()], ids=str)
def test_preview_is_the_trajectory_at_future_times(trajectory, preview):
    k, dt = preview
    env = ResidualQuadEnv(trajectory=trajectory, preview=preview, episode_s=2.0)
    traj = make_trajectory(trajectory)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_DIM + 6 * k,) and env.observation_space.contains(obs)
    for step in range(4):
        t = step * env.control_dt
        pos, vel = _points(obs, k)
        want = [traj(t + i * dt) for i in range(1, k + 1)]
        np.testing.assert_allclose(pos, [r.pos for r in want], rtol=0, atol=1e-12)
        np.testing.assert_allclose(vel, [r.vel for r in want], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(obs[L.ref_pos], traj(t).pos)  # t: ref_pos's time
        obs, *_ = env.step(_hover(env))


@pytest.mark.parametrize("preview", [(10, 0.06), (4, 0.07)], ids=["on-grid", "off-grid"])
def test_preview_past_the_episode_end_repeats_the_last_point(preview):
    k, dt = preview
    env = ResidualQuadEnv(trajectory="helix", preview=preview, episode_s=0.2)
    traj = make_trajectory("helix")
    end = env.max_steps * env.control_dt  # 0.2 s
    obs, _ = env.reset(seed=0)
    for _ in range(15):
        obs, *_ = env.step(_hover(env))
    t = 15 * env.control_dt
    pos, vel = _points(obs, k)
    for i in range(1, k + 1):
        r = traj(min(t + i * dt, end))
        np.testing.assert_allclose(pos[i - 1], r.pos, rtol=0, atol=1e-12)
        np.testing.assert_allclose(vel[i - 1], r.vel, rtol=0, atol=1e-12)
    beyond = [i for i in range(1, k + 1) if t + i * dt > end + 1e-12]
    assert len(beyond) >= 2  # the padding is exercised: the end point repeats
    assert all(np.array_equal(pos[i - 1], pos[beyond[0] - 1]) for i in beyond)
    np.testing.assert_allclose(pos[beyond[0] - 1], traj(end).pos, rtol=0, atol=1e-12)


def test_under_sensor_latency_the_preview_follows_the_current_reference():
    """The preview is reference, not a sensor: like ``ref_pos`` it is current, so its first
    point is the reference one ``dt`` after the observation's ``ref_pos`` time."""
    k, dt = 2, 0.05
    traj = make_trajectory("figure8")
    env = ResidualQuadEnv(trajectory="figure8", preview=(k, dt), obs_delay_steps=3)
    obs, _ = env.reset(seed=1)
    for step in range(1, 6):
        obs, *_ = env.step(_hover(env))
        t = step * env.control_dt
        np.testing.assert_array_equal(obs[L.ref_pos], traj(t).pos)
        np.testing.assert_allclose(obs[L.preview_pos(k)][0:3], traj(t + dt).pos, atol=1e-12)


# ---------------------------------------------------------------- off = today, base untouched
def _flight(steps: int = 6, **kwargs) -> np.ndarray:
    env = ResidualQuadEnv(trajectory="helix", wind="windy", pos_noise=0.01, **kwargs)
    rows = [env.reset(seed=5)[0]]
    action = np.array([0.3, -0.1, 0.2, 0.0])
    rows += [env.step(action)[0] for _ in range(steps)]
    return np.array(rows)


def test_preview_off_is_todays_observation_bit_for_bit():
    today = _flight()
    assert today.shape[1] == OBS_DIM
    np.testing.assert_array_equal(_flight(preview=None), today)
    np.testing.assert_array_equal(_flight(preview=(0, 0.06)), today)
    # with a preview, the base entries are still today's (noise, wind, latency untouched)
    np.testing.assert_array_equal(_flight(preview=(3, 0.06))[:, :OBS_DIM], today)
    delayed = _flight(obs_delay_steps=2)
    np.testing.assert_array_equal(_flight(obs_delay_steps=2, preview=(3, 0.03))[:, :36], delayed)


def test_vector_env_preview_off_is_todays_observation():
    kw = {"trajectory": "figure8", "episode_s": 0.5, "nthread": 1}
    base, off = ResidualQuadVectorEnv(2, **kw), ResidualQuadVectorEnv(2, preview=(0, 0.1), **kw)
    a, _ = base.reset(seed=2)
    b, _ = off.reset(seed=2)
    assert a.shape == (2, OBS_DIM) and off.single_observation_space.shape == (OBS_DIM,)
    for _ in range(3):
        np.testing.assert_array_equal(a, b)
        a = base.step(np.zeros((2, 4)))[0]
        b = off.step(np.zeros((2, 4)))[0]
    base.close()
    off.close()


# ---------------------------------------------------------------- single = vector
SCENARIOS = [{"trajectory": "helix"}, {"trajectory": Wave()}, {"trajectory": "figure8"}]


@pytest.mark.parametrize("preview", [(4, 0.03), (3, 0.025)], ids=["on-grid", "off-grid"])
def test_vector_env_preview_equals_single_envs_through_autoresets(preview):
    """The preview entries bit for bit (the base entries as without a preview: to 1e-9), over
    two autoresets of every env, a user trajectory among them."""
    kw = {"preview": preview, "episode_s": 0.1, "wind": "breezy"}
    n, seed, steps = len(SCENARIOS), 7, 24
    vec = ResidualQuadVectorEnv(n, scenarios=SCENARIOS, nthread=1, **kw)
    singles = [ResidualQuadEnv(**kw, **sc) for sc in SCENARIOS]
    action = _hover(singles[0]) + 0.01
    vobs, _ = vec.reset(seed=seed)
    sobs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    done = [False] * n
    resets = 0
    for _ in range(steps):
        for i in range(n):
            np.testing.assert_array_equal(vobs[i, OBS_DIM:], sobs[i][OBS_DIM:])
            np.testing.assert_allclose(vobs[i, :OBS_DIM], sobs[i][:OBS_DIM], rtol=0, atol=1e-9)
        vobs = vec.step(np.tile(action, (n, 1)))[0]
        for i, env in enumerate(singles):
            if done[i]:
                sobs[i], done[i] = env.reset()[0], False
                resets += 1
            else:
                sobs[i], _, term, trunc, _ = env.step(action)
                done[i] = term or trunc
    assert resets >= 2 * n
    assert vec.single_observation_space == singles[0].observation_space
    vec.close()


def test_make_vec_takes_the_preview():
    import gymnasium as gym

    vec = gym.make_vec(
        "ResidualQuad-v0", num_envs=2, trajectory="helix", preview=(10, 0.06), nthread=1
    )
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, 96) and vec.observation_space.contains(obs)
    obs = vec.step_subset([1], np.zeros((1, 4)))[0]  # the subset path fills the preview too
    assert obs.shape == (2, 96) and not obs[0].any()
    traj = make_trajectory("helix")
    want = [traj(0.01 + 0.06 * i).pos for i in range(1, 11)]
    np.testing.assert_allclose(obs[1, L.preview_pos(10)].reshape(10, 3), want, atol=1e-12)
    vec.close()


# ---------------------------------------------------------------- checkers
def test_check_env_is_clean_with_a_preview():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(ResidualQuadEnv(trajectory="helix", preview=(10, 0.06)), skip_render_check=True)


# ---------------------------------------------------------------- bad input
_GOOD_K = st.integers(0, MAX_PREVIEW_POINTS)
_GOOD_DT = st.floats(1e-6, 10.0)
_ANY = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=3), st.booleans())
_BAD_PREVIEWS = st.one_of(
    st.tuples(st.integers(max_value=-1), _GOOD_DT),  # K < 0
    st.tuples(st.integers(min_value=MAX_PREVIEW_POINTS + 1), _GOOD_DT),  # K too large
    st.tuples(st.one_of(st.floats(), st.booleans(), st.text(max_size=3)), _GOOD_DT),  # not int
    st.tuples(_GOOD_K, st.floats(max_value=0.0)),  # dt <= 0
    st.tuples(_GOOD_K, st.sampled_from([math.nan, math.inf, -math.inf])),  # dt not finite
    st.tuples(_GOOD_K, st.one_of(st.text(max_size=3), st.booleans(), st.none())),  # dt not real
    st.lists(_ANY, max_size=5).filter(lambda v: len(v) != 2),  # wrong shape
    st.one_of(st.integers(), st.floats(), st.text(max_size=4)),  # not a pair at all
)


@settings(max_examples=60, deadline=None)
@given(_BAD_PREVIEWS)
def test_every_bad_preview_is_a_value_error_naming_it(preview):
    with pytest.raises(ValueError, match=r"preview must be None or \(K, dt\)"):
        check_preview(preview)


@pytest.mark.parametrize("preview", [(-1, 0.06), (2.0, 0.06), (2, 0.0), (2, math.inf), (2,)])
def test_the_envs_refuse_a_bad_preview(preview):
    with pytest.raises(ValueError, match="preview"):
        ResidualQuadEnv(preview=preview)
    with pytest.raises(ValueError, match="preview"):
        ResidualQuadVectorEnv(1, preview=preview, nthread=1)


@pytest.mark.parametrize("k, dt", [(-1, 0.1), (True, 0.1), (1.5, 0.1), (1, 0.0), (1, math.nan)])
def test_preview_spec_checks_its_fields(k, dt):
    with pytest.raises(ValueError, match="preview"):
        PreviewSpec(k, dt)


@pytest.mark.parametrize(
    "preview", [(10, 1e17), (1, 3600.5), (1000, 3.61), (1, 1.7976931348623157e308)]
)
def test_a_window_longer_than_the_longest_episode_is_refused_when_the_env_is_built(preview):
    """K·dt above MAX_PREVIEW_HORIZON_S (the longest episode) could only repeat every episode's
    end, and its step offsets overflow the lookups' integers: a ValueError naming the preview
    when the single or the vector env (or a sweep config's env) is built, not an OverflowError
    at reset."""
    with pytest.raises(ValueError, match="preview window K·dt must be at most 3600 s"):
        ResidualQuadEnv(preview=preview)
    with pytest.raises(ValueError, match="preview window K·dt must be at most 3600 s"):
        ResidualQuadVectorEnv(2, preview=preview, nthread=1)


def test_the_longest_window_is_the_longest_episode_and_flies():
    assert MAX_PREVIEW_HORIZON_S == MAX_EPISODE_S
    for preview in ((1, 3600.0), (1000, 3.6), (2, 5e-324)):
        env = ResidualQuadEnv(preview=preview)
        env.reset(seed=0)
        obs, *_ = env.step(_hover(env))
        venv = ResidualQuadVectorEnv(2, preview=preview, nthread=1)
        venv.reset(seed=0)
        vobs, *_ = venv.step(np.tile(_hover(env), (2, 1)))
        assert np.all(np.isfinite(obs)) and np.array_equal(vobs[0], obs)
        env.close(), venv.close()


def test_a_window_longer_than_the_single_envs_ring_is_still_exact():
    k, dt = 300, 0.05  # 1 500 steps ahead: more than the ring keeps
    env = ResidualQuadEnv(trajectory="figure8", preview=(k, dt))
    traj = make_trajectory("figure8")
    obs, _ = env.reset(seed=0)
    for step in range(1, 3):
        obs, *_ = env.step(_hover(env))
        t = step * env.control_dt
        pos, _ = _points(obs, k)
        want = [traj(min(t + i * dt, 20.0)).pos for i in range(1, k + 1)]
        np.testing.assert_allclose(pos, want, rtol=0, atol=1e-12)


def test_a_sweep_config_takes_the_preview_as_an_env_argument(tmp_path):
    """YAML ``env:`` goes through the env's own keyword arguments: a list is a good preview,
    a bad one is refused at load, naming it."""
    from residual_quad import configs
    from residual_quad.evaluation.sweep import SweepConfig

    good = tmp_path / "good.yaml"
    good.write_text("controllers: [pid]\nepisode_s: 1.0\nenv: {preview: [10, 0.06]}\n")
    assert configs.load(SweepConfig, good).env == {"preview": [10, 0.06]}
    bad = tmp_path / "bad.yaml"
    bad.write_text("controllers: [pid]\nepisode_s: 1.0\nenv: {preview: [10, -0.06]}\n")
    with pytest.raises(ValueError, match="preview"):
        configs.load(SweepConfig, bad)


@pytest.mark.parametrize("name", ["pid", "geo_rls"])
def test_single_env_controllers_fly_the_same_with_a_preview(name):
    """Model-based controllers read the base fields: a preview changes nothing they do."""
    from residual_quad.controllers import make_controller

    errors = []
    for preview in (None, (10, 0.06)):
        env = ResidualQuadEnv(trajectory="helix", payload="heavy", preview=preview)
        ctrl = make_controller(name, env)
        obs, _ = env.reset(seed=0)
        ctrl.reset(0)
        for _ in range(20):
            obs, *_, info = env.step(ctrl.policy(obs))
        errors.append(info["position_error"])
    assert errors[0] == errors[1]


def test_a_shorter_vector_limit_does_not_move_the_preview_end():
    """``max_episode_steps`` cuts the episode like Gymnasium's ``TimeLimit``; the preview is
    clamped at the env's own ``episode_s`` in both envs, so they agree."""
    kw = {"trajectory": "helix", "preview": (5, 0.03), "episode_s": 0.3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vec = ResidualQuadVectorEnv(1, max_episode_steps=10, nthread=1, **kw)
    single = ResidualQuadEnv(**kw)
    vobs, sobs = vec.reset(seed=4)[0][0], single.reset(seed=4)[0]
    for _ in range(10):
        np.testing.assert_array_equal(vobs[OBS_DIM:], sobs[OBS_DIM:])
        vobs = vec.step(_hover(single)[None])[0][0]
        sobs = single.step(_hover(single))[0]
    np.testing.assert_array_equal(vobs[OBS_DIM:], sobs[OBS_DIM:])
    traj = make_trajectory("helix")
    np.testing.assert_allclose(vobs[L.preview_pos(5)][-3:], traj(0.25).pos, atol=1e-12)
    vec.close()


@pytest.mark.parametrize("preview", [(4, 0.03), (3, 0.025)], ids=["on-grid", "off-grid"])
def test_a_step_without_the_preview_leaves_it_nan_until_an_episode_ends(preview):
    """``step_subset(..., preview=False)``: the preview's entries NaN where the episode goes
    on, the usual ones where it ends (the terminal observation); every other output the same
    bits as with the preview, and the next step's preview as if it had been read."""
    kw = {"preview": preview, "episode_s": 0.1, "wind": "breezy"}
    n, seed = len(SCENARIOS), 7
    read, skip = (ResidualQuadVectorEnv(n, scenarios=SCENARIOS, nthread=1, **kw) for _ in "ab")
    action = np.tile(_hover(read.envs[0]) + 0.01, (n, 1))
    read.reset(seed=seed)
    skip.reset(seed=seed)
    ids = np.arange(n)
    unread_ends = 0
    for step in range(24):
        going = np.flatnonzero(~read._autoreset)
        with_preview = step % 2 == 0  # the episodes (10 periods) end at steps without it
        a = read.step_subset(going, action[going])
        b = skip.step_subset(going, action[going], preview=with_preview)
        np.testing.assert_array_equal(a[0][:, :OBS_DIM], b[0][:, :OBS_DIM])
        for x, y in zip(a[1:4], b[1:4], strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a[4]["position_error"], b[4]["position_error"])
        ended = a[2] | a[3]
        shown = ended if not with_preview else np.isin(ids, going)
        np.testing.assert_array_equal(a[0][shown, OBS_DIM:], b[0][shown, OBS_DIM:])
        assert np.isnan(b[0][going[~ended[going]], OBS_DIM:]).all() or with_preview
        unread_ends += 0 if with_preview else int(ended.sum())
        if ended.any():
            idx = np.flatnonzero(ended)
            np.testing.assert_array_equal(read.reset_subset(idx)[0], skip.reset_subset(idx)[0])
    assert unread_ends >= 2 * n  # every env's episode ended twice at a step without it
    read.close()
    skip.close()
