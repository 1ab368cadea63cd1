"""Batched controllers: bad input names the env index (a non-finite row is held, not refused:
``tests/controllers/test_bad_observations.py``), resets are per env, the entry point
picks the vectorized path or the loop, and PPO batches its forward pass."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from residual_quad.controllers import make_controller, register_controller
from residual_quad.controllers.base import _REGISTRY, resolve_factory
from residual_quad.controllers.batch import (
    BatchedController,
    BatchedLoop,
    batched_twin,
    make_batch_controller,
    vectorized_controllers,
)
from residual_quad.controllers.residual.trackers import BatchedRLSGeoTracker
from residual_quad.controllers.trackers import BatchedGeoTracker, BatchedPIDTracker, GeoTracker
from residual_quad.envs.observation import ObsLayout as L

N = 4


def hover_obs(n=N, seed=0):
    """n hover-like observations with small random errors (m, m/s, rad/s)."""
    rng = np.random.default_rng(seed)
    obs = np.zeros((n, 36))
    obs[:, L.rot] = np.eye(3).ravel()
    obs[:, L.pos] = [0.0, 0.0, 1.5] + 0.1 * rng.normal(size=(n, 3))
    obs[:, L.vel] = 0.2 * rng.normal(size=(n, 3))
    obs[:, L.omega_b] = 0.1 * rng.normal(size=(n, 3))
    obs[:, L.ref_pos] = [0.0, 0.0, 1.5]
    obs[:, L.thrusts] = 0.95 * 9.81 / 4
    obs[:, L.imu] = [0.0, 0.0, 9.81]
    return obs


@pytest.mark.parametrize("name", ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton"])
def test_bad_batches_name_the_env_index(name):
    ctrl = make_batch_controller(name, N)
    obs = hover_obs()
    for shape in ((N - 1, 36), (N, 35), (36,), (N, 36, 1)):
        with pytest.raises(ValueError, match=rf"shape \({N}, 36 \+ 6K\)"):
            ctrl.policy_batch(np.zeros(shape))
    with pytest.raises(ValueError, match="4 seeds"):
        ctrl.reset_batch([0, 1])
    with pytest.raises(ValueError, match="env index 4 is out of range"):
        ctrl.reset_env(4)
    with pytest.raises(ValueError, match="seed of env index 1"):
        ctrl.reset_batch([0, 1.5, 2, 3])
    assert ctrl.policy_batch(obs).shape == (N, 4)  # a refused batch changed nothing usable
    bad = obs.copy()
    bad[2, L.vel.start] = np.nan  # a bad sample of one env is held, not refused
    out = ctrl.policy_batch(bad)
    assert out.shape == (N, 4) and np.isfinite(out).all()


@pytest.mark.parametrize(
    "name", ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton", "hnewton_rls"]
)
def test_a_preview_after_the_base_fields_leaves_the_trackers_actions_alone(name):
    """A batch with a reference preview (36 + 6K entries) gives the actions of its base fields:
    the model-based trackers read no preview, and a width that is no layout is refused."""
    base, wide = make_batch_controller(name, N), make_batch_controller(name, N)
    rng = np.random.default_rng(3)
    for step in range(3):
        obs = hover_obs(seed=step)
        preview = rng.normal(size=(N, 6 * 10))
        np.testing.assert_array_equal(
            wide.policy_batch(np.hstack((obs, preview))), base.policy_batch(obs)
        )
    with pytest.raises(ValueError, match=r"36 \+ 6K"):
        wide.policy_batch(np.zeros((N, 36 + 5)))


def test_bad_names_and_sizes_list_valid_choices():
    with pytest.raises(ValueError, match="valid choices: .*geo_rls"):
        make_batch_controller("lqr", N)
    for n in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="n_envs"):
            make_batch_controller("geo", n)


def test_entry_point_picks_vectorized_or_loop():
    assert isinstance(make_batch_controller("geo", N), BatchedGeoTracker)
    assert isinstance(make_batch_controller("pid", N, ki=3.0), BatchedPIDTracker)
    ctrl = make_batch_controller("geo_rls", N, p0=0.05)
    assert isinstance(ctrl, BatchedRLSGeoTracker) and ctrl.config.rls.p0 == 0.05
    loop = make_batch_controller("hnewton_rls", 2, switch="always")  # not vectorized
    assert isinstance(loop, BatchedLoop) and loop.n_envs == 2
    assert loop.controllers[0] is not loop.controllers[1]
    for c in (ctrl, loop):
        assert isinstance(c, BatchedController)
    assert {"pid", "geo", "geo_res", "geo_rls"} <= set(vectorized_controllers())


def test_each_twin_sits_beside_its_single_class_and_is_named_after_it():
    names = vectorized_controllers()
    assert names == [
        "pid",
        "geo",
        "geo_res",
        "geo_rls",
        "geo_rls_dob",
        "hnewton",
        "hnewton_rls",
        "ppo",
        "ppo_res",
        "ppo_adapt",
        "sac",
        "tqc",
    ]
    for name in names:
        single, twin = resolve_factory(name), batched_twin(name)
        assert twin.__module__ == single.__module__, name
        assert twin.__name__ == f"Batched{single.__name__}", name

    # a subclass that changes the law does not inherit its parent's twin
    class Changed(GeoTracker):
        pass

    register_controller("changed_twin_test", Changed)
    try:
        assert batched_twin("changed_twin_test") is None
    finally:
        _REGISTRY.pop("changed_twin_test")
    assert batched_twin("residual_quad.controllers.trackers:GeoTracker") is None


def test_a_registered_class_naming_a_twin_is_vectorized():
    class Twin(BatchedGeoTracker):
        pass

    class Mine(GeoTracker):
        batched = Twin

    register_controller("mine_twin_test", Mine)
    try:
        assert isinstance(make_batch_controller("mine_twin_test", 3, kp=10.0), Twin)
        assert "mine_twin_test" in vectorized_controllers()
    finally:
        _REGISTRY.pop("mine_twin_test")


def test_a_user_controller_runs_in_the_loop():
    class Constant:
        action_mode = "rotor"

        def __init__(self, context, level=0.1):
            self.level, self.calls = level, 0

        def reset(self, seed=None):
            self.calls = 0

        def policy(self, obs):
            self.calls += 1
            return np.full(4, self.level * self.calls)

    register_controller("const_batch_test", Constant)
    try:
        ctrl = make_batch_controller("const_batch_test", 3, level=0.2)
        obs = hover_obs(3)
        ctrl.policy_batch(obs)
        ctrl.reset_env(1)
        out = ctrl.policy_batch(obs)
        assert np.allclose(out[:, 0], [0.4, 0.2, 0.4])
    finally:
        _REGISTRY.pop("const_batch_test")


@pytest.mark.parametrize("name", ["pid", "geo_rls"])
def test_reset_env_resets_only_that_env(name):
    obs = hover_obs(seed=3)
    a = make_batch_controller(name, N)
    b = make_batch_controller(name, N)
    for k in range(30):
        step = obs + 0.001 * k
        a.policy_batch(step)
        b.policy_batch(step)
    a.reset_env(1, seed=5)
    fresh = make_batch_controller(name, N)
    nxt = obs + 0.5
    out_a, out_b, out_f = a.policy_batch(nxt), b.policy_batch(nxt), fresh.policy_batch(nxt)
    assert np.array_equal(out_a[[0, 2, 3]], out_b[[0, 2, 3]])
    assert np.array_equal(out_a[1], out_f[1])
    assert not np.array_equal(out_a[1], out_b[1])
    a.reset_batch([0, 1, 2, 3])
    assert np.array_equal(a.policy_batch(nxt), out_f)


def test_batch_of_one_equals_the_single_controller_bit_for_bit_for_geo():
    obs = hover_obs(8, seed=4)
    single = make_controller("geo")
    batch = make_batch_controller("geo", 8)
    expected = np.stack([single.policy(o) for o in obs])
    assert np.array_equal(batch.policy_batch(obs), expected)


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="rl extra")
def test_ppo_batches_its_forward_pass():
    obs = hover_obs(3, seed=6)
    batch = make_batch_controller("ppo", 3)
    singles = [make_controller("ppo") for _ in range(3)]
    for k in range(3):
        step = obs + 0.01 * k
        expected = np.stack([c.policy(o) for c, o in zip(singles, step, strict=True)])
        assert np.allclose(batch.policy_batch(step), expected, atol=1e-5)
    batch.reset_env(0)
    singles[0].reset()
    expected = np.stack([c.policy(o) for c, o in zip(singles, obs, strict=True)])
    assert np.allclose(batch.policy_batch(obs), expected, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{"bogus": 1}, {"observer": 2}, {"observer_tau": -1.0}, {"covariance": "nope"}],
)
def test_geo_rls_dob_batch_refuses_what_the_single_controller_refuses(options):
    with pytest.raises(ValueError) as single:
        make_controller("geo_rls_dob", **options)
    with pytest.raises(ValueError) as batch:
        make_batch_controller("geo_rls_dob", 2, **options)
    assert str(batch.value) == str(single.value)
