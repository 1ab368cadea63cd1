"""Behind sensor latency the estimators pair the sensed motion with the thrusts of its period.

The observation's motion is ``obs_delay_steps`` periods old while its thrusts are the last
period's; INDI, the residual and the observers read the thrusts that many observations back
(``controllers/rotor_model.py``, :class:`SensedThrusts`).
"""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.rotor_model import SensedThrusts
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import control_context, run_episode

#: 40 ms rotors behind two periods of latency each way: the plant of the lag sweep where pairing
#: the current thrusts with the motion of two periods earlier lost the track
PLANT = {"preset": "realistic", "rotor_tau_s": 0.04, "action_delay_steps": 2, "obs_delay_steps": 2}


def _obs(thrusts: list[float]) -> np.ndarray:
    obs = np.zeros(OBS_DIM)
    obs[L.thrusts] = thrusts
    return obs


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_the_estimators_read_the_thrusts_of_steps_observations_back(steps):
    """Known answer: observation k carries the thrusts of observation k − steps (the first
    one's until the line is full), for one vehicle and a batch alike."""
    pairing = SensedThrusts(steps)
    one = pairing.init_state(1)
    one = type(one)(*(x[0] for x in one))  # the one-vehicle row
    batch = pairing.init_state(2)
    given = [[float(k)] * 4 for k in range(1, 9)]
    for k, thrusts in enumerate(given):
        one, out = pairing.pair_one(one, _obs(thrusts))
        expected = given[max(k - steps, 0)]
        np.testing.assert_array_equal(out[L.thrusts], expected)
        batch, rows = pairing.pair(batch, np.stack([_obs(thrusts), _obs(thrusts)]))
        np.testing.assert_array_equal(rows[:, L.thrusts], [expected, expected])
    forgotten = pairing.forget(batch, np.array([1]))
    _, rows = pairing.pair(forgotten, np.stack([_obs([9.0] * 4)] * 2))
    np.testing.assert_array_equal(rows[:, L.thrusts], [given[-steps], [9.0] * 4])


@pytest.mark.parametrize("bad", [0, -1, 1.0, True])
def test_a_bad_line_length_is_named(bad):
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        SensedThrusts(bad)


def test_every_tracker_pairs_behind_sensor_latency_and_not_without():
    assert make_controller("geo_rls", control_context(PLANT)).sensed_thrusts.steps == 2
    assert make_controller("geo_rls", control_context({"preset": "realistic"})).law.sensed_thrusts
    assert make_controller("geo_rls").law.sensed_thrusts is None


def test_paired_inertia_identification_keeps_the_track_behind_two_periods():
    """The flight of the lag sweep that lost the track: ``hnewton_rls`` (INDI with inertia
    identification) at 15 rad/s, figure-8 from rest, no payload, gusts, seed 2. Paired with the
    current thrusts its identified pitch inertia swung 0.6–3.9× nominal and the vehicle left the
    track by 3.5 m at 47° tilt; paired with the thrusts of its period it flies it at 0.4 m."""
    ctrl = make_controller(
        "hnewton_rls", control_context(PLANT), weights="docs/results/model/residual.npz"
    )
    assert ctrl.inner.gains.wn_rp == pytest.approx(15.0)
    r = run_episode(ctrl, wind="windy", trajectory="figure8", seed=2, episode_s=8.0, **PLANT)
    assert not r.diverged and r.error.max() < 1.0


@pytest.mark.parametrize("name", ["pid", "geo_rls", "geo_rls_dob", "hnewton_rls"])
def test_batched_trackers_behind_sensor_latency_equal_the_single_ones(name, batch_flight):
    ctx = control_context(PLANT)
    batch = make_batch_controller(name, 2, ctx)
    singles = [make_controller(name, ctx) for _ in range(2)]
    envs = [
        ResidualQuadEnv(payload=p, wind="windy", trajectory=t, **PLANT)
        for p, t in (("extra", "helix"), ("none", "figure8"))
    ]
    batch_flight(batch, singles, envs, 60, atol=1e-9)
    assert singles[0].state.sensed.known
