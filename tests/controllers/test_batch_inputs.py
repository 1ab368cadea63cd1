"""Batched controllers: bad input names the env index (a non-finite row is held, not refused:
``tests/controllers/test_bad_observations.py``), resets are per env, the entry point flies a law
as the driver's vectorized batch and anything else in the loop, and PPO batches its forward
pass."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np
import pytest

from residual_quad.controllers import ControlContext, make_controller, register_controller
from residual_quad.controllers.base import _REGISTRY, available_controllers, resolve_factory
from residual_quad.controllers.batch import (
    BatchedController,
    BatchedLoop,
    batch_from_spec,
    make_batch_controller,
    vectorized_controllers,
)
from residual_quad.controllers.driver import LawBatch, LawController
from residual_quad.controllers.extras import UNSHIPPED_POLICY_CONTROLLERS
from residual_quad.controllers.law import Law
from residual_quad.controllers.policy_inputs import PREVIEW_WIDTH
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.controllers.specs import parse_spec
from residual_quad.controllers.trackers import GeoTracker, PIDTracker
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


def test_entry_point_flies_a_law_as_the_drivers_batch():
    geo = make_batch_controller("geo", N)
    assert isinstance(geo, LawBatch) and type(geo.law) is GeoTracker and geo.n_envs == N
    pid = make_batch_controller("pid", N, ki=3.0)
    assert isinstance(pid, LawBatch) and type(pid.law) is PIDTracker and pid.law.ki == 3.0
    ctrl = make_batch_controller("geo_rls", N, p0=0.05)
    assert isinstance(ctrl, LawBatch) and type(ctrl.law) is RLSGeoTracker
    assert ctrl.config.rls.p0 == 0.05
    assert isinstance(ctrl, BatchedController)
    assert {"pid", "geo", "geo_res", "geo_rls", "geo_rls_dob"} <= set(vectorized_controllers())


def test_hnewton_rls_switching_always_is_the_laws_batch():
    """``switch="always"`` (every level augmented: the single cycle on every row) is no longer
    a loop of instances: the law's batch runs it row by row, one state row per env."""
    batch = make_batch_controller("hnewton_rls", 2, switch="always")
    assert isinstance(batch, LawBatch) and batch.n_envs == 2
    assert type(batch.law).__name__ == "HNewtonRLSTracker" and batch.params.switch == "always"
    assert batch.state.prioritized.q.shape == (2, 3)  # one row of the thrust vector per env
    assert isinstance(batch, BatchedController)


#: every registered controller with a vectorized batch, in registry order
VECTORIZED = [
    "pid",
    "geo",
    "geo_res",
    "geo_rls",
    "geo_rls_dob",
    "pid_tuned",
    "geo_rls_tuned",
    "geo_rls_dob_tuned",
    "hnewton",
    "hnewton_rls",
    "ppo",
    "ppo_res",
    "ppo_acc",
    "ppo_adapt",
    "sac",
    "tqc",
]


def test_the_vectorized_controllers_are_the_registered_laws():
    assert vectorized_controllers() == VECTORIZED
    laws = [
        n
        for n in available_controllers()
        if isinstance(resolve_factory(n), type) and issubclass(resolve_factory(n), Law)
    ]
    assert laws == VECTORIZED


@pytest.mark.parametrize("name", VECTORIZED)
def test_a_vectorized_controller_is_its_law_in_the_driver(name):
    """The registered name is a Law class; its batch (where it ships what it needs to build)
    is the driver's :class:`LawBatch` of that class and its single controller the driver's
    :class:`LawController` — no second copy of the law."""
    law = resolve_factory(name)
    assert isinstance(law, type) and issubclass(law, Law), name
    if name in UNSHIPPED_POLICY_CONTROLLERS:  # no policy file ships: nothing to build
        return
    if name.startswith("ppo") and importlib.util.find_spec("stable_baselines3") is None:
        pytest.skip("needs the rl extra")
    batch = make_batch_controller(name, 2)
    assert isinstance(batch, LawBatch) and type(batch.law) is law
    single = make_controller(name)
    assert isinstance(single, LawController) and type(single.law) is law


class Pulled(GeoTracker):
    """geo whose command is pulled 1 m/s² along +x: a subclass that changes the law."""

    def command(self, state, obs, e_p, e_v):
        state, a_cmd = super().command(state, obs, e_p, e_v)
        return state, a_cmd + np.array([1.0, 0.0, 0.0])

    def command_one(self, state, obs, e_p, e_v):
        state, a_cmd = super().command_one(state, obs, e_p, e_v)
        return state, a_cmd + np.array([1.0, 0.0, 0.0])


def test_a_registered_subclass_that_changes_the_law_flies_its_own_law_in_a_batch():
    """A batch runs the law's own ``act``: a subclass of ``geo`` that changes the command is
    vectorized with its change (a twin of the parent could not be inherited by mistake)."""
    register_controller("changed_law_test", Pulled)
    try:
        assert "changed_law_test" in vectorized_controllers()
        batch = make_batch_controller("changed_law_test", N, kp=10.0)
        assert isinstance(batch, LawBatch) and type(batch.law) is Pulled and batch.kp == 10.0
        obs = hover_obs()
        single = make_controller("changed_law_test", None, kp=10.0)
        expected = np.stack([single.policy(o) for o in obs])
        actions = batch.policy_batch(obs)
        np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-12)
        geo = make_batch_controller("geo", N, kp=10.0).policy_batch(obs)
        assert not np.allclose(actions, geo)  # the change is flown
    finally:
        _REGISTRY.pop("changed_law_test")


@dataclass(frozen=True, slots=True)
class CountState:
    calls: np.ndarray  # (n,) int: actions since reset


class Counting(Law):
    """A minimal user law: the action is ``0.1·calls`` on every rotor."""

    action_mode = "rotor"
    name = "counting"

    def __init__(self, context: ControlContext | None = None, *, step: float = 0.1):
        self.context = context or ControlContext()
        self.step = step

    def init_state(self, n: int) -> CountState:
        return CountState(calls=np.zeros(n, dtype=np.int64))

    def act(self, state: CountState, obs: np.ndarray) -> tuple[CountState, np.ndarray]:
        calls = state.calls + 1
        return CountState(calls), np.repeat((self.step * calls)[:, None], 4, axis=1)


def test_a_registered_user_law_is_vectorized():
    """A user's :class:`Law` class registered by name is listed as vectorized and flies as one
    :class:`LawBatch`: per-env state, per-env resets, the bad row held and its state kept."""
    register_controller("counting_law_test", Counting)
    try:
        assert "counting_law_test" in vectorized_controllers()
        batch = make_batch_controller("counting_law_test", 3, step=0.2)
        assert isinstance(batch, LawBatch) and type(batch.law) is Counting
        obs = hover_obs(3)
        batch.policy_batch(obs)
        batch.reset_env(1)
        bad = obs.copy()
        bad[2, L.pos.start] = np.nan
        out = batch.policy_batch(bad)
        np.testing.assert_allclose(out[:, 0], [0.4, 0.2, 0.2])  # env 2 holds its action
        assert batch.state.calls.tolist() == [2, 1, 1]
    finally:
        _REGISTRY.pop("counting_law_test")


USER_MODULE = """
import numpy as np

from residual_quad.controllers.trackers import GeoTracker


def make_geo(context, *, kp=20.0):
    return GeoTracker(context, kp=kp)


class Steady:
    action_mode = "rotor"

    def __init__(self, context, level=0.1):
        self.level = level

    def reset(self, seed=None):
        pass

    def policy(self, obs):
        return np.full(4, self.level)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module ``rq_batch_user`` importable from this process."""
    (tmp_path / "rq_batch_user.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rq_batch_user"
    import sys

    sys.modules.pop("rq_batch_user", None)


def test_an_import_path_factory_making_a_law_flies_as_the_drivers_batch(user_module):
    """``module:factory`` that returns a law is flown by :func:`batch_from_spec` as a
    :class:`LawBatch`, with the registered name's actions."""
    batch = batch_from_spec(parse_spec(f"{user_module}:make_geo:kp=12"), N)
    assert isinstance(batch, LawBatch) and type(batch.law) is GeoTracker and batch.kp == 12.0
    obs = hover_obs()
    expected = make_batch_controller("geo", N, kp=12.0).policy_batch(obs)
    np.testing.assert_array_equal(batch.policy_batch(obs), expected)
    by_class = batch_from_spec(parse_spec("residual_quad.controllers.trackers:GeoTracker"), 2)
    assert isinstance(by_class, LawBatch) and type(by_class.law) is GeoTracker


def test_the_sweeps_batch_an_import_path_law_class_and_loop_the_rest(user_module):
    """:func:`has_batch_path` (the sweep engines' choice between one vector batch and one job
    per run): a law class by import path is batched; a factory function (its product is known
    only once built) and a plain controller fly one job per run."""
    from residual_quad.controllers.batch import has_batch_path

    assert has_batch_path(parse_spec("residual_quad.controllers.trackers:GeoTracker"))
    assert has_batch_path(parse_spec("geo"))
    assert not has_batch_path(parse_spec(f"{user_module}:make_geo"))
    assert not has_batch_path(parse_spec(f"{user_module}:Steady"))
    assert not has_batch_path(parse_spec("no_such_module_xyz:Thing"))


def test_an_import_path_to_anything_else_runs_in_the_loop(user_module):
    loop = batch_from_spec(parse_spec(f"{user_module}:Steady:level=0.3"), 2)
    assert isinstance(loop, BatchedLoop) and loop.n_envs == 2
    assert loop.controllers[0] is not loop.controllers[1]
    np.testing.assert_allclose(loop.policy_batch(hover_obs(2)), np.full((2, 4), 0.3))


class Constant:
    """A plain user controller (not a law): the action is ``level·calls`` on every rotor."""

    action_mode = "rotor"

    def __init__(self, context, level=0.1):
        self.level, self.calls = level, 0

    def reset(self, seed=None):
        self.calls = 0

    def policy(self, obs):
        self.calls += 1
        return np.full(4, self.level * self.calls)


def test_a_user_controller_runs_in_the_loop():
    register_controller("const_batch_test", Constant)
    try:
        assert "const_batch_test" not in vectorized_controllers()
        ctrl = make_batch_controller("const_batch_test", 3, level=0.2)
        assert isinstance(ctrl, BatchedLoop)
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
    singles = [make_controller("ppo") for _ in range(3)]
    width = PREVIEW_WIDTH * singles[0].spec.preview_k  # the shipped file's preview, if any
    preview = 0.1 * np.random.default_rng(7).normal(size=(3, width))
    obs = np.hstack((hover_obs(3, seed=6), preview))
    batch = make_batch_controller("ppo", 3)
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
