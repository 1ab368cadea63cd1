"""One ResidualEstimator behind geo_res, geo_rls and hnewton_rls: the same estimates everywhere."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from residual_quad.controllers import ControlContext, make_controller
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
    for k in range(300):  # 3 s: well past the 1 s warm-up
        action = geo_rls.policy(obs)
        hn_rls.policy(obs)
        np.testing.assert_array_equal(hn_rls.last_residual, geo_rls.last_residual)
        delta = est.estimate(obs, L.rotation(obs), geo_rls.last_a_cmd)
        np.testing.assert_array_equal(delta, geo_rls.last_residual)
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated), k
    env.close()
    assert not np.array_equal(geo_rls.rls.theta, geo_rls.net.theta0)  # it did adapt
    np.testing.assert_array_equal(hn_rls.estimator.rls.theta, geo_rls.rls.theta)
    np.testing.assert_array_equal(est.rls.theta, geo_rls.rls.theta)
    assert est.warmup_end_step == geo_rls.warmup_end_step == 100


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
    assert c_res.rls is None and c_rls.rls.steps > 0 and c_rls.warmup_end_step is None


def test_estimator_reset_restores_the_initial_state():
    ctx = ControlContext()
    est = ResidualEstimator(ctx, residual_config(rls={"warmup_steps": 0}))
    assert est.warmup_end_step == 0  # nothing to wait for
    rng = np.random.default_rng(0)
    obs = np.zeros((20, OBS_DIM))
    obs[:, L.rot] = np.eye(3).ravel()
    obs[:, L.vel] = 0.1 * rng.standard_normal((20, 3))
    obs[:, L.thrusts] = 2.5 + 0.1 * rng.standard_normal((20, 4))  # N
    obs[:, L.imu] = (0.0, 0.0, 9.81)
    R = np.eye(3)
    first = [est.estimate(o, R, np.zeros(3)) for o in obs]
    assert est.steps == 20 and est.rls.steps == 19
    est.reset()
    assert est.steps == 0 and est.rls.steps == 0
    assert np.array_equal(est.last_estimate, np.zeros(3))
    second = [est.estimate(o, R, np.zeros(3)) for o in obs]
    np.testing.assert_array_equal(first, second)
    assert ResidualEstimator(ctx, residual_config(), learn=False).rls is None
