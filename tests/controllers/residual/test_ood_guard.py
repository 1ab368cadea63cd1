"""The out-of-distribution guard of the learned residual (``ood`` settings): known blends, the
hold fallback, the slow recovery, no learning outside the envelope, and off by default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.controllers import ControlContext, make_controller
from residual_quad.controllers.residual.config import residual_config
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.features import FEATURE_NAMES
from residual_quad.controllers.residual.network import load_network
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import run_episode

NET = load_network("default")
OMEGA_Z = FEATURE_NAMES.index("omega_z")


def _hover_obs(omega_z_score: float = 0.0, yaw: float = 0.0) -> np.ndarray:
    """A level hover observation whose yaw-rate feature sits ``omega_z_score`` standard
    deviations from the training mean, heading ``yaw`` rad with the reference heading 0."""
    obs = np.zeros(OBS_DIM)
    c, s = math.cos(yaw), math.sin(yaw)
    obs[L.rot] = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]).ravel()
    obs[L.pos] = obs[L.ref_pos] = (0.0, 0.0, 1.5)
    obs[L.omega_b] = (0.0, 0.0, NET.x_mean[OMEGA_Z] + omega_z_score * NET.x_std[OMEGA_Z])
    obs[L.thrusts] = 0.95 * 9.81 / 4.0
    obs[L.imu] = (0.0, 0.0, 9.81)
    return obs


class Guarded:
    """A guarded estimator run over its explicit state, one vehicle (``state``) and the same
    stream as a batch of one (``rows``) beside it: each step's estimate and weight agree."""

    def __init__(self, **ood):
        cfg = residual_config(ood={"enabled": True, **ood}, rls={"warmup_steps": 0})
        self.e = ResidualEstimator(ControlContext(), cfg, learn=True)
        self.state = self.e.init_one()
        self.rows = self.e.init_state(1)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        R = L.rotation(obs)
        self.state, est = self.e.estimate_one(self.state, obs, R, np.zeros(3))
        self.rows, est_rows = self.e.estimate(self.rows, obs[None], R[None], np.zeros((1, 3)))
        np.testing.assert_allclose(est_rows[0], est, rtol=0, atol=1e-12)
        assert self.rows.ood_weight[0] == pytest.approx(self.state.ood_weight, abs=1e-12)
        assert self.rows.ood_steps[0] == self.state.ood_steps
        return est

    @property
    def ood_weight(self) -> float:
        return self.state.ood_weight


@pytest.mark.parametrize(("score", "weight"), [(3.0, 1.0), (4.5, 0.75), (5.0, 0.5), (7.0, 0.0)])
def test_weight_is_the_linear_blend_of_the_standardized_feature(score, weight):
    e = Guarded(recover_s=0.0)
    e(_hover_obs(score))
    assert e.ood_weight == pytest.approx(weight, abs=1e-12)


def test_heading_error_blends_too():
    e = Guarded(recover_s=0.0)
    e(_hover_obs(0.0, yaw=0.425))  # halfway between heading_on 0.35 and heading_off 0.5
    assert e.ood_weight == pytest.approx(0.5, abs=1e-9)
    e(_hover_obs(0.0, yaw=-math.pi))  # wrapped: π away
    assert e.ood_weight == 0.0


def test_outside_the_envelope_the_last_inside_estimate_is_held():
    e = Guarded(recover_s=0.0)
    inside = e(_hover_obs(0.0)).copy()
    outside = e(_hover_obs(10.0))
    np.testing.assert_array_equal(outside, inside)
    assert e.state.ood_steps == 1


def test_zero_fallback():
    e = Guarded(recover_s=0.0, fallback="zero")
    e(_hover_obs(0.0))
    np.testing.assert_array_equal(e(_hover_obs(10.0)), np.zeros(3))


def test_weight_recovers_no_faster_than_recover_s():
    e = Guarded(recover_s=0.5)  # 0.02 per 10 ms step
    e(_hover_obs(10.0))
    assert e.ood_weight == 0.0
    for k in range(1, 6):
        e(_hover_obs(0.0))
        assert e.ood_weight == pytest.approx(0.02 * k, abs=1e-12)


def test_no_rls_update_from_a_sample_outside_the_envelope():
    e = Guarded(recover_s=0.0)
    e(_hover_obs(0.0))
    e(_hover_obs(0.0))
    steps = e.state.rls.steps
    e(_hover_obs(10.0))  # updates with the previous (inside) regressor
    assert e.state.rls.steps == steps + 1
    assert e.rows.rls.steps[0] == steps + 1
    e(_hover_obs(0.0))  # the previous regressor was outside: no update
    assert e.state.rls.steps == steps + 1
    assert e.rows.rls.steps[0] == steps + 1


def test_off_by_default_and_bit_identical_when_off():
    assert not make_controller("geo_rls").config.ood.enabled
    kw = dict(payload="heavy", wind="windy", trajectory="helix", seed=0, episode_s=3.0)
    a = run_episode("geo_rls", **kw)
    b = run_episode(make_controller("geo_rls", ood={"enabled": False, "z_on": 1.0}), **kw)
    assert a.rmse == b.rmse and a.control_cost == b.control_cost


@pytest.mark.parametrize(
    ("ood", "match"),
    [
        ({"z_on": 5.0, "z_off": 4.0}, "z_on"),
        ({"features": ["omega_w"]}, "features"),
        ({"features": []}, "features"),
        ({"fallback": "blend"}, "fallback"),
        ({"heading_on": 0.5, "heading_off": 0.4}, "heading_on"),
        ({"recover_s": -1.0}, "recover_s"),
        ({"enabled": "yes"}, "enabled"),
    ],
)
def test_bad_settings_are_refused(ood, match):
    with pytest.raises(ValueError, match=match):
        residual_config(ood=ood)
