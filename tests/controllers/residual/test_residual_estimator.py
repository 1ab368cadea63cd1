"""One ResidualEstimator behind geo_res, geo_rls and hnewton_rls: the same estimates everywhere."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from residual_quad.controllers import ControlContext, make_controller
from residual_quad.controllers.law import tree_leaves
from residual_quad.controllers.residual.config import residual_config
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.trackers import ResidualGeoTracker
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import run_episode


@pytest.mark.parametrize(
    "overrides",
    [{}, {"measurement": {"source": "velocity", "lowpass_tau": 0.05}, "rls": {"leak": 1e-3}}],
)
def test_geo_rls_and_hnewton_rls_estimate_the_same_residual(overrides):
    """Fed the same observation stream, geo_rls, hnewton_rls and a bare estimator agree bit for
    bit (same outer-loop gains, hence the same a_cmd, hence the same features and RLS updates)."""
    env = gym.make("ResidualQuad-v0", payload="extra", wind="windy", trajectory="helix").unwrapped
    obs, _ = env.reset(seed=1)
    geo_rls = make_controller("geo_rls", env, **overrides)
    hn_rls = make_controller("hnewton_rls", env, **overrides)
    est = ResidualEstimator(ControlContext.from_env(env), residual_config(**overrides))
    state = est.init_one()
    for k in range(300):  # 3 s: well past the 1 s warm-up
        action = geo_rls.policy(obs)
        hn_rls.policy(obs)
        np.testing.assert_array_equal(hn_rls.state.last_residual, geo_rls.state.last_residual)
        state, delta = est.estimate_one(state, obs, L.rotation(obs), geo_rls.state.last_a_cmd)
        np.testing.assert_array_equal(delta, geo_rls.state.last_residual)
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated), k
    env.close()
    theta = geo_rls.state.estimator.rls.theta
    assert not np.array_equal(theta, geo_rls.estimator.net.theta0)  # it did adapt
    np.testing.assert_array_equal(hn_rls.state.estimator.rls.theta, theta)
    np.testing.assert_array_equal(state.rls.theta, theta)
    assert state.warmup_end_step == geo_rls.state.estimator.warmup_end_step == 100


def test_geo_res_is_geo_rls_whose_rls_layer_is_never_applied():
    """With a warm-up longer than the flight (and geo_res's output filter) geo_rls identifies but
    always predicts with the offline layer: exactly geo_res."""
    scenario = dict(payload="heavy", wind="windy", trajectory="helix", seed=1, episode_s=4.0)

    def fly(ctrl) -> tuple[np.ndarray, object]:
        acts: list[np.ndarray] = []
        res = run_episode(ctrl, callback=lambda k, o, a, i: acts.append(a.copy()), **scenario)
        return np.array(acts), res

    c_res = make_controller("geo_res")
    # geo_res's own default settings (its output filter) on top of the shipped config
    c_rls = make_controller(
        "geo_rls", rls={"warmup_steps": 10**9}, **ResidualGeoTracker.default_settings
    )
    (a_res, r_res), (a_rls, r_rls) = fly(c_res), fly(c_rls)
    assert np.array_equal(a_res, a_rls)
    assert r_res.rmse == r_rls.rmse
    assert c_res.estimator.rls is None and c_res.state.estimator.rls is None
    est = c_rls.state.estimator
    assert est.rls.steps > 0 and est.warmup_end_step == -1  # -1: the layer was never applied


def _fly(est: ResidualEstimator, state, obs: np.ndarray, batch: bool) -> tuple[object, list]:
    """The estimates of ``obs`` (k, 36) from ``state``: one vehicle, or every step as a batch
    of two identical rows."""
    R, out = np.eye(3), []
    for o in obs:
        if batch:
            state, d = est.estimate(state, np.stack([o, o]), np.stack([R, R]), np.zeros((2, 3)))
        else:
            state, d = est.estimate_one(state, o, R, np.zeros(3))
        out.append(d)
    return state, out


@pytest.mark.parametrize("batch", [False, True], ids=["one", "batch"])
def test_estimator_initial_state_is_restored_after_a_flight(batch):
    """A new initial state after a flight starts from the offline layer and the prior again
    (the flight updated its own state in place, never the estimator's private copy): the same
    estimates, bit for bit."""
    ctx = ControlContext()
    est = ResidualEstimator(ctx, residual_config(rls={"warmup_steps": 0}))
    init = est.init_state(2) if batch else est.init_one()
    assert np.all(np.asarray(init.warmup_end_step) == 0)  # nothing to wait for
    pristine = [np.array(x, copy=True) for x in tree_leaves(init)]
    rng = np.random.default_rng(0)
    obs = np.zeros((20, OBS_DIM))
    obs[:, L.rot] = np.eye(3).ravel()
    obs[:, L.vel] = 0.1 * rng.standard_normal((20, 3))
    obs[:, L.thrusts] = 2.5 + 0.1 * rng.standard_normal((20, 4))  # N
    obs[:, L.imu] = (0.0, 0.0, 9.81)
    state, first = _fly(est, init, obs, batch)
    assert np.all(np.asarray(state.steps) == 20) and np.all(np.asarray(state.rls.steps) == 19)
    again = est.init_state(2) if batch else est.init_one()
    assert all(np.array_equal(x, y) for x, y in zip(pristine, tree_leaves(again), strict=True))
    assert np.all(np.asarray(again.steps) == 0) and np.all(np.asarray(again.rls.steps) == 0)
    assert not np.any(again.last_estimate)
    _, second = _fly(est, again, obs, batch)
    np.testing.assert_array_equal(first, second)
    assert ResidualEstimator(ctx, residual_config(), learn=False).rls is None
