"""The trackers' rotor model (``rotor_tau_s``): the env's lagged thrusts, off by default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.driver import LawBatch
from residual_quad.controllers.law import one_vehicle, tree_leaves, tree_map
from residual_quad.controllers.rotor_model import RotorModel, RotorState
from residual_quad.controllers.specs import make_controller
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv


def test_rotor_model_is_the_first_order_step_response():
    """One vehicle and a batch: the step response of the first-order lag, bit for bit the same
    in both forms; only the thrust fields of the observation change."""
    model = RotorModel(0.05, 0.01)
    one = one_vehicle(model.init_state(1))
    rows = model.init_state(2)
    obs = np.zeros(36)
    obs[L.thrusts] = 2.0
    one, _ = model.observe_one(one, obs)  # the first observation: the rotors at the command
    rows, _ = model.observe(rows, np.stack([obs, obs]))
    obs[L.thrusts] = 5.0
    for k in range(1, 8):
        one, out = model.observe_one(one, obs)
        rows, out_rows = model.observe(rows, np.stack([obs, obs]))
        want = 5.0 - 3.0 * math.exp(-k * 0.01 / 0.05)
        np.testing.assert_allclose(out[L.thrusts], want, rtol=0, atol=1e-12)
        assert np.array_equal(np.delete(out, np.r_[L.thrusts]), np.delete(obs, np.r_[L.thrusts]))
        assert np.array_equal(out_rows, np.stack([out, out]))
        assert np.array_equal(one.thrusts, out[L.thrusts]) and one.known


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
        np.testing.assert_allclose(ctl.state.rotors.thrusts, info["rotor_thrusts"], atol=1e-12)
        obs, _, terminated, _, info = env.step(action)
        assert not terminated


def _leaves(state) -> list[np.ndarray]:
    """Copies of the leaves of a state tree."""
    return [np.array(x, copy=True) for x in tree_leaves(state)]


@pytest.mark.parametrize("where", ["thrusts", "pos"], ids=["nan-thrusts", "finite-thrusts"])
def test_a_bad_sample_leaves_the_model_as_it_was(where):
    """A bad sample leaves the whole state as it was (the law only told to forget its previous
    sample), the rotor model included — also when another field is bad and the thrusts it
    reports are finite: the model does not step on a sample the law never sees. One vehicle,
    and that env's row of a batch."""
    ctl = make_controller("geo_rls_dob", rotor_tau_s=0.06)
    batch = make_batch_controller("geo_rls_dob", 2, rotor_tau_s=0.06)
    env = ResidualQuadEnv(rotor_tau_s=0.06)
    obs, _ = env.reset(seed=0)
    batch.policy_batch(np.stack([obs, obs]))
    obs, *_ = env.step(ctl.policy(obs))
    ctl.policy(obs)
    batch.policy_batch(np.stack([obs, obs]))
    obs, *_ = env.step(np.full(4, 0.3))  # thrusts that differ from the model's estimate
    thrusts = ctl.state.rotors.thrusts.copy()
    expected = _leaves(ctl.law.forget_one(tree_map(np.copy, ctl.state)))
    rows = _leaves(batch.law.forget(tree_map(np.copy, batch.state), np.array([True, False])))
    bad = obs.copy()
    bad[L.thrusts if where == "thrusts" else L.pos.start] = np.nan
    ctl.policy(bad)
    assert np.array_equal(ctl.state.rotors.thrusts, thrusts)
    assert all(np.array_equal(x, y) for x, y in zip(expected, _leaves(ctl.state), strict=True))
    batch.policy_batch(np.stack([bad, obs]))
    assert np.array_equal(batch.state.rotors.thrusts[0], thrusts)
    after = _leaves(batch.state)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(rows, after, strict=True))
    assert not np.array_equal(batch.state.rotors.thrusts[1], thrusts)  # the clean row stepped


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
    """A batch runs the rotor model row by row: the same actions as single trackers on lagged
    plants (closed loop on the batch's actions, an autoreset of one env, a row whose thrusts are
    NaN and one whose position is NaN, each leaving its env's model as it was)."""
    kw = {"rotor_tau_s": 0.06}
    scen = [("none", "windy", "helix"), ("heavy", "breezy", "hover"), ("extra", "windy", "hover")]
    envs = [ResidualQuadEnv(payload=p, wind=w, trajectory=t, **kw) for p, w, t in scen]
    context = ControlContext()
    batch = make_batch_controller(name, len(envs), context, **kw)
    assert isinstance(batch, LawBatch) and isinstance(batch.rotor_model, RotorModel)
    assert isinstance(batch.state.rotors, RotorState)
    assert batch.state.rotors.thrusts.shape == (len(envs), 4)
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
        if k == 90:
            rows[0, L.pos.start] = np.nan
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
