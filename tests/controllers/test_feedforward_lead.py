"""The feed-forward's lead over the lag (``ff_lead_s``): the reference's acceleration advanced by
its jerk, a known answer on a reference of constant jerk, reset and bad-sample handling, one
formula for one vehicle and a batch, and the option reaching every tracker's law."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.feedforward import FeedforwardLead
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import run_episode
from tests.controllers.test_batch_equivalence import TOL, fly_side_by_side

DT = 0.01  # s
JERK = np.array([0.5, -1.2, 0.3])  # m/s³
A0 = np.array([1.0, 0.0, -0.4])  # m/s²


def _obs(k: int, rows: int | None = None) -> np.ndarray:
    obs = np.zeros(OBS_DIM if rows is None else (rows, OBS_DIM))
    obs[..., L.ref_acc] = A0 + JERK * (k * DT)
    return obs


def test_a_reference_of_constant_jerk_is_led_exactly_after_its_first_step():
    lead = FeedforwardLead(0.08, DT)
    state = lead.init_state(1)
    state = type(state)(*(x[0] for x in state))  # one vehicle: no leading axis
    state, out = lead.apply(state, _obs(0), _obs(0))
    np.testing.assert_array_equal(out[L.ref_acc], A0)  # no previous sample: no jerk
    for k in range(1, 4):
        obs = _obs(k)
        state, out = lead.apply(state, obs, obs)
        np.testing.assert_allclose(out[L.ref_acc], A0 + JERK * (k * DT + 0.08), atol=1e-12)
        assert np.array_equal(obs[L.ref_acc], A0 + JERK * (k * DT))  # the input is left alone
    state, out = lead.apply(lead.forget_one(state), _obs(9), _obs(9))  # after a reset
    np.testing.assert_array_equal(out[L.ref_acc], _obs(9)[L.ref_acc])


def test_a_batch_row_has_the_one_vehicle_bits_and_forget_clears_only_its_rows():
    lead = FeedforwardLead(0.12, DT)
    batch = lead.init_state(3)
    one = type(batch)(*(x[0] for x in lead.init_state(1)))
    for k in range(3):
        batch, out = lead.apply(batch, _obs(k, 3), _obs(k, 3))
        one, out_one = lead.apply(one, _obs(k), _obs(k))
        assert out[1].tobytes() == out_one.tobytes()
    batch = lead.forget(batch, np.array([1]))
    batch, out = lead.apply(batch, _obs(3, 3), _obs(3, 3))
    np.testing.assert_array_equal(out[1, L.ref_acc], _obs(3)[L.ref_acc])
    np.testing.assert_allclose(out[0, L.ref_acc], A0 + JERK * (3 * DT + 0.12), atol=1e-12)


@pytest.mark.parametrize("value", [-0.1, float("nan"), 1.5])
def test_a_bad_lead_is_the_option_domain_error(value):
    with pytest.raises(ValueError, match="ff_lead_s"):
        make_controller("geo", ff_lead_s=value)


@pytest.mark.parametrize("name", ["pid", "geo_rls", "hnewton_rls"])
def test_the_batched_lead_flies_the_single_trackers_actions(name):
    worst, batch, _, resets = fly_side_by_side(name, steps=120, reset_at=60, ff_lead_s=0.1)
    assert resets >= 1 and worst <= TOL
    assert batch.lead is not None and batch.lead.lead_s == 0.1


def test_the_lead_changes_the_flight_only_where_the_reference_accelerates():
    """Hover: the reference's acceleration is constant, the lead adds nothing (the same
    thrusts); on the helix it moves the command."""
    kw = dict(payload="none", wind="calm", episode_s=2.0, seed=0)
    hover = run_episode("geo", trajectory="hover", **kw)
    led = run_episode("geo:ff_lead_s=0.1", trajectory="hover", **kw)
    np.testing.assert_array_equal(led.thrusts, hover.thrusts)
    helix = run_episode("geo", trajectory="helix", **kw)
    led = run_episode("geo:ff_lead_s=0.1", trajectory="helix", **kw)
    assert not np.array_equal(led.thrusts, helix.thrusts)
