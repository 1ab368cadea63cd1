"""Mid-flight events and the plant options travel to the server (loopback only); the newer
``info`` entries come back as ground truth, equal to the in-process env's; bad events are
``bad_request`` errors that say what is wrong."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from remote_helpers import address, raw_client, served

from residual_quad.envs.events import RotorEvent
from residual_quad.envs.registration import ENV_ID, REMOTE_ENV_ID
from residual_quad.remote.client import wire_scenario
from residual_quad.remote.protocol import TRUTH_KEYS

HOVER = [0.0, 0.0, 0.0, 0.0]
NEW_TRUTH = (
    "rotor_thrusts",
    "gyro_bias",
    "accel_bias",
    "mean_wind",
    "rotor_efficiency",
    "events_fired",
)
SCENARIO = {
    "episode_s": 0.2,
    "wind": "breezy",
    "imu_bias": "adis16448",
    "rotor_tau_s": 0.06,
    "events": [
        {"kind": "rotor", "t_s": 0.05, "rotor": 0, "efficiency": 0.7},
        {"kind": "payload", "t_s": 0.1, "mass_kg": 0.5},
    ],
}


def test_events_and_plant_options_travel_and_the_new_truth_equals_in_process():
    assert set(NEW_TRUTH) <= set(TRUTH_KEYS)
    with served() as server:
        remote = gym.make(REMOTE_ENV_ID, address=address(server), **SCENARIO)
        local = gym.make(ENV_ID, **SCENARIO)
        try:
            (o_l, i_l), (o_r, i_r) = local.reset(seed=3), remote.reset(seed=3)
            fired = []
            for _ in range(20):  # the whole 0.2 s episode
                assert o_l.tobytes() == o_r.tobytes()
                for key in NEW_TRUTH:
                    assert np.array_equal(i_l[key], i_r[key]), key
                    assert np.shape(i_l[key]) == np.shape(i_r[key]), key
                fired.append(i_r["events_fired"])
                action = np.array([0.1, 0.1, 0.1, 0.1])
                o_l, _, term_l, trunc_l, i_l = local.step(action)
                o_r, _, term_r, trunc_r, i_r = remote.step(action)
                assert (term_l, trunc_l) == (term_r, trunc_r)
            assert fired[0] == 0 and fired[-1] == 2  # both events fired, in the reply
            assert i_r["rotor_efficiency"][0] == pytest.approx(0.7)
            assert i_r["payload_kg"] == pytest.approx(0.5)
            assert np.any(i_r["gyro_bias"] != 0.0) and np.any(i_r["accel_bias"] != 0.0)
            assert i_r["rotor_thrusts"].shape == (4,)
        finally:
            remote.close()
            local.close()


def test_event_dataclasses_travel_as_maps():
    wire = wire_scenario({"events": (RotorEvent(t_s=1.0, rotor=2, efficiency=0.5),)})
    assert wire == {"events": [{"kind": "rotor", "t_s": 1.0, "rotor": 2, "efficiency": 0.5}]}


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ("rotor", "scenario events must be a list of maps or null"),
        ([3], "scenario events[0] must be a map with a kind"),
        ([{"kind": "meteor", "t_s": 1.0}], "unknown event kind 'meteor'; valid choices: "),
        ([{"kind": "rotor", "t_s": 1.0, "rotor": 0}], "missing field(s) ['efficiency']"),
        ([{"kind": "payload", "t_s": 9.0, "mass_kg": 0.5}], "outside the episode"),
        ([{"kind": "payload", "t_s": 1.0, "mass_kg": 0.5, "colour": 1}], "unknown field(s)"),
    ],
)
def test_bad_events_are_bad_requests_that_say_why(events, message):
    with served(scenario={"episode_s": 2.0}) as server, raw_client(server) as c:
        assert c.call("hello")["ok"]
        for op in ("configure", "reset"):
            reply = c.call(op, scenario={"events": events})
            assert not reply["ok"] and reply["error"]["code"] == "bad_request", reply
            assert message in reply["error"]["message"], reply
        # the session still serves: a good scenario after the bad ones
        assert c.call("reset", seed=0, scenario={"events": None})["ok"]


def test_a_bad_event_in_the_server_config_is_an_error_at_start():
    from residual_quad.remote.config import ServerConfig

    with pytest.raises(ValueError, match="scenario events must be a list"):
        ServerConfig(scenario={"events": "rotor"})
