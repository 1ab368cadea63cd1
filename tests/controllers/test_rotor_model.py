"""The trackers' rotor model (``rotor_tau_s``): the env's lagged thrusts, off by default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import BatchedLoop, make_batch_controller
from residual_quad.controllers.rotor_model import RotorModel
from residual_quad.controllers.specs import make_controller
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv


def test_rotor_model_is_the_first_order_step_response():
    model = RotorModel(0.05, 0.01)
    obs = np.zeros(36)
    obs[L.thrusts] = 2.0
    model.observe(obs)  # the first observation: the rotors at the command
    obs[L.thrusts] = 5.0
    for k in range(1, 8):
        out = model.observe(obs)
        want = 5.0 - 3.0 * math.exp(-k * 0.01 / 0.05)
        np.testing.assert_allclose(out[L.thrusts], want, rtol=0, atol=1e-12)
        assert np.array_equal(np.delete(out, np.r_[L.thrusts]), np.delete(obs, np.r_[L.thrusts]))


def test_rotor_model_tracks_the_envs_lagged_thrusts():
    """Flying the env with 60 ms rotors, the tracker's model of them equals the env's true
    lagged thrusts (``info["rotor_thrusts"]``) at every step, to rounding: the same filter, one
    period at a time instead of one substep at a time."""
    env = ResidualQuadEnv(rotor_tau_s=0.06, payload="heavy", wind="windy")
    ctl = make_controller("geo_rls", env, rotor_tau_s=0.06)
    obs, info = env.reset(seed=1)
    ctl.reset(1)
    for _ in range(150):
        action = ctl.policy(obs)
        np.testing.assert_allclose(ctl.rotor_model.thrusts, info["rotor_thrusts"], atol=1e-12)
        obs, _, terminated, _, info = env.step(action)
        assert not terminated


def test_a_bad_sample_leaves_the_model_as_it_was():
    ctl = make_controller("geo_rls_dob", rotor_tau_s=0.06)
    env = ResidualQuadEnv(rotor_tau_s=0.06)
    obs, _ = env.reset(seed=0)
    ctl.policy(obs)
    before = ctl.rotor_model.thrusts.copy()
    bad = obs.copy()
    bad[L.thrusts] = np.nan
    ctl.policy(bad)
    assert np.array_equal(ctl.rotor_model.thrusts, before)


@pytest.mark.parametrize("name", ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton"])
def test_rotor_model_is_off_by_default_and_an_option(name):
    assert make_controller(name).rotor_model is None
    ctl = make_controller(f"{name}:rotor_tau_s=0.05")
    assert ctl.rotor_model.tau_s == 0.05
    with pytest.raises(ValueError, match="rotor_tau_s"):
        make_controller(f"{name}:rotor_tau_s=-0.05")


@pytest.mark.parametrize(
    "name", ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton", "hnewton_rls"]
)
def test_a_batch_with_a_rotor_model_equals_the_single_trackers(name):
    """The batched twins run the rotor model row by row: the same actions as single trackers on
    lagged plants (closed loop on the batch's actions, an autoreset of one env, a row whose
    thrusts are NaN that leaves its env's model as it was)."""
    from residual_quad.controllers.rotor_model import BatchedRotorModel

    kw = {"rotor_tau_s": 0.06}
    scen = [("none", "windy", "helix"), ("heavy", "breezy", "hover"), ("extra", "windy", "hover")]
    envs = [ResidualQuadEnv(payload=p, wind=w, trajectory=t, **kw) for p, w, t in scen]
    context = ControlContext()
    batch = make_batch_controller(name, len(envs), context, **kw)
    assert not isinstance(batch, BatchedLoop)
    assert isinstance(batch.rotor_model, BatchedRotorModel)
    singles = [make_controller(name, context, **kw) for _ in envs]
    batch.reset_batch([0, 1, 2])
    for i, ctl in enumerate(singles):
        ctl.reset(i)
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    worst = 0.0
    for k in range(200):
        rows = obs.copy()
        if k == 60:
            rows[1, L.thrusts] = np.nan
        got = batch.policy_batch(rows)
        want = np.stack([ctl.policy(o) for ctl, o in zip(singles, rows, strict=True)])
        worst = max(worst, float(np.abs(got - want).max()))
        for i, env in enumerate(envs):
            o, _, te, tr, _ = env.step(got[i])
            if te or tr or (k == 120 and i == 2):
                o, _ = env.reset(seed=50 + i)
                batch.reset_env(i, 50 + i)
                singles[i].reset(50 + i)
            obs[i] = o
    assert worst <= 1e-9, worst
