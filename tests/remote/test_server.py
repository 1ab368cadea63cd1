"""The server on loopback: sessions, error replies, one client at a time, timeouts, real time."""

from __future__ import annotations

import socket
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from remote_helpers import RawClient, address, header, raw_client, served

from residual_quad.envs.registration import REMOTE_ENV_ID
from residual_quad.remote.protocol import (
    INFO_KEYS,
    PROTOCOL_VERSION,
    TRUTH_KEYS,
    RemoteError,
    frame,
)

HOVER = [0.0, 0.0, 0.0, 0.0]


def _ok(reply):
    assert reply["ok"], reply
    return reply


def _error(reply, code):
    assert not reply["ok"] and reply["error"]["code"] == code, reply
    return reply


def test_a_session_hello_reset_step_close():
    with served(scenario={"episode_s": 0.05}) as server, raw_client(server) as c:
        hello = _ok(c.call("hello"))
        assert hello["protocol"] == PROTOCOL_VERSION and hello["max_steps"] == 5
        assert hello["obs_layout"]["pos"] == [0, 3] and hello["obs_dim"] == 36
        reset = _ok(c.call("reset", seed=0))
        assert len(reset["obs"]) == 36 and "reward" not in reset
        assert tuple(reset["truth"]) == TRUTH_KEYS  # the documented keys, in order
        assert tuple(reset["info"]) == INFO_KEYS
        assert "wind" not in reset["info"]  # truth travels apart from info
        for k in range(5):
            step = _ok(c.call("step", action=HOVER))
            assert step["info"]["t"] == pytest.approx(0.01 * (k + 1))
        assert step["truncated"] and not step["terminated"]
        _error(c.call("step", action=HOVER), "reset_needed")
        _ok(c.call("reset", seed=1))
        _ok(c.call("close"))
        assert c.closed_by_server()


def test_json_requests_get_json_replies():
    with served() as server, raw_client(server, encoding="json") as c:
        c.seq = 1
        c.send_raw(frame({"v": 1, "seq": 1, "op": "hello"}, "json"))
        data = c.sock.recv(4)
        length = int.from_bytes(data, "big")
        payload = b""
        while len(payload) < length:
            payload += c.sock.recv(length - len(payload))
        assert payload[:1] == b"{"
        _ok(c.call("reset", seed=0))


def test_bad_requests_get_error_replies_and_the_session_goes_on():
    with served(max_message_bytes=1024) as server, raw_client(server) as c:
        _error(c.call("reset"), "out_of_order")  # before hello
        _ok(c.call("hello"))
        _error(c.call("hello"), "out_of_order")
        c.send_raw(header(3) + b"\xc1\xc1\xc1")
        _error(c.recv(), "malformed")
        c.send_raw(header(5000) + b"x" * 5000)
        reply = _error(c.recv(), "too_large")
        assert reply["seq"] is None and "1024" in reply["error"]["message"]
        _error(c.call("hello", seq=c.seq), "out_of_order")  # a seq that does not increase
        _error(c.call("fly"), "unknown_op")
        _error(c.call("step", action=HOVER), "reset_needed")
        _error(c.call("reset", seed=-3), "bad_request")
        _error(c.call("reset", options={"yaw": 1.0}), "bad_request")
        _error(c.call("configure", scenario={"payload": "lead"}), "bad_request")
        _error(c.call("configure", scenario={"airframe": 1}), "bad_request")
        _ok(c.call("reset", seed=0))
        _error(c.call("step", action=[0, 0, 0]), "bad_request")
        _error(c.call("step", action=[0, 0, 0, float("inf")]), "bad_request")
        c.send({"v": 9, "seq": 99, "op": "step"})
        _error(c.recv(), "bad_version")
        step = _ok(c.call("step", action=HOVER))  # the episode goes on
        assert step["info"]["t"] == pytest.approx(0.01)
        assert server.counts["errors"] == 14


def test_configure_switches_scenario_and_trajectory():
    with served() as server, raw_client(server) as c:
        assert _ok(c.call("hello"))["scenario"] == {}
        described = _ok(
            c.call(
                "configure",
                scenario={"trajectory": "helix", "trajectory_params": {"period": 6.0}},
            )
        )
        assert described["scenario"]["trajectory"] == "helix"
        reset = _ok(c.call("reset", seed=0, scenario={"trajectory": "figure8", "control_hz": 50}))
        assert reset["info"]["t"] == 0.0
        assert _ok(c.call("step", action=HOVER))["info"]["t"] == pytest.approx(0.02)


def test_token_is_checked_and_a_wrong_one_closes_the_connection():
    with served(token="s3cret") as server:
        with raw_client(server) as c:
            _error(c.call("hello", token="guess"), "unauthorized")
            assert c.closed_by_server()
        with raw_client(server) as c:
            _error(c.call("hello"), "unauthorized")
        with raw_client(server) as c:
            _ok(c.call("hello", token="s3cret"))
        env = gym.make(REMOTE_ENV_ID, address=address(server), token="s3cret")
        env.close()
        with pytest.raises(RemoteError, match="unauthorized"):
            gym.make(REMOTE_ENV_ID, address=address(server), token="nope")


def test_a_second_client_is_refused_and_a_disconnect_frees_the_plant():
    with served() as server:
        first = gym.make(REMOTE_ENV_ID, address=address(server))
        try:
            with raw_client(server) as second:
                reply = _error(second.call("hello"), "busy")
                assert "one client at a time" in reply["error"]["message"]
                assert second.closed_by_server()
            with pytest.raises(RemoteError, match="busy"):
                gym.make(REMOTE_ENV_ID, address=address(server))
            first.reset(seed=0)
        finally:
            first.unwrapped._sock.close()  # vanish without a close message
        deadline = time.monotonic() + 5.0
        while True:  # the server frees the plant when it sees the connection drop
            with raw_client(server) as c:
                reply = c.call("hello")
            if reply["ok"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        _ok(reply)


def test_a_silent_client_times_out_and_frees_the_plant():
    with served(client_timeout_s=0.3) as server:
        with raw_client(server) as silent:
            _ok(silent.call("hello"))
            time.sleep(0.6)
            assert silent.closed_by_server()
        with raw_client(server) as c:
            _ok(c.call("hello"))


def test_remote_env_errors_match_the_in_process_env():
    with served() as server:
        where = address(server)
        env = gym.make(REMOTE_ENV_ID, address=address(server), episode_s=0.02).unwrapped
        try:
            with pytest.raises(ResetNeeded):
                env.step(np.zeros(4))
            env.reset(seed=0)
            with pytest.raises(ValueError, match="shape"):
                env.step(np.zeros(3))
            with pytest.raises(ValueError, match="unknown reset options"):
                env.reset(options={"bogus": 1})
            env.reset(seed=0)
            obs, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.float32))
            assert obs.dtype == np.float64 and info["wind"].shape == (3,)
            env.step(np.zeros(4))
            with pytest.raises(ResetNeeded):
                env.step(np.zeros(4))
        finally:
            env.close()
        with pytest.raises(ValueError, match="unknown payload"):
            gym.make(REMOTE_ENV_ID, address=address(server), payload="lead")
    with pytest.raises(ConnectionError):  # the server is gone
        gym.make(REMOTE_ENV_ID, address=where, timeout_s=2.0)


def test_the_remote_env_has_the_spaces_and_attributes_of_the_local_one():
    local = gym.make("ResidualQuad-v0", action_mode="ctbr", control_hz=50.0).unwrapped
    with served() as server:
        env = gym.make(REMOTE_ENV_ID, address=address(server), action_mode="ctbr", control_hz=50.0)
        try:
            remote = env.unwrapped
            assert remote.observation_space == local.observation_space
            assert remote.action_space == local.action_space
            assert remote.action_mode == "ctbr" and remote.control_dt == local.control_dt
            assert remote.max_steps == local.max_steps == 1000
            assert env.spec.max_episode_steps == 2000  # Gymnasium's limit; the env ends at 1000
            obs, _ = env.reset(seed=3)
            assert remote.observation_space.contains(obs)
        finally:
            env.close()


def test_ipv6_loopback():
    try:
        probe = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"this machine has no IPv6 loopback: {exc}")
    probe.close()
    local = gym.make("ResidualQuad-v0")
    expected, _ = local.reset(seed=0)
    expected_step = local.step(np.zeros(4, dtype=np.float32))[0]
    local.close()
    with served(host="::1") as server:
        host, port = server.address
        assert host == "::1"
        env = gym.make(REMOTE_ENV_ID, address=f"[::1]:{port}")
        try:
            assert env.unwrapped._sock.family == socket.AF_INET6  # really over IPv6
            obs, info = env.reset(seed=0)
            np.testing.assert_array_equal(obs, expected)  # the in-process plant, bit for bit
            obs, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.float32))
            np.testing.assert_array_equal(obs, expected_step)
            assert info["t"] == pytest.approx(0.01) and not (terminated or truncated)
        finally:
            env.close()


def test_realtime_holds_the_last_command_and_counts_late_periods():
    with served(realtime=True, scenario={"episode_s": 0.3}) as server, raw_client(server) as c:
        _ok(c.call("hello"))
        _ok(c.call("reset", seed=0))
        first = _ok(c.call("step", action=HOVER))
        assert first["clock"]["periods"] >= 1
        time.sleep(0.055)  # miss about five periods: the held command flies them
        second = _ok(c.call("step", action=HOVER))
        assert second["clock"]["late"] >= 3
        assert second["info"]["t"] >= first["info"]["t"] + 0.04
        c.send_raw(  # two steps in one segment: the second arrives while the first waits
            frame({"v": 1, "seq": c.seq + 1, "op": "step", "action": HOVER})
            + frame({"v": 1, "seq": c.seq + 2, "op": "step", "action": HOVER})
        )
        c.seq += 2
        replies = [c.recv(), c.recv()]
        assert sorted(r["ok"] for r in replies) == [False, True]  # one step waits at a time
        time.sleep(0.4)  # the episode runs out on held commands
        last = _ok(c.call("step", action=HOVER))  # the end, delivered once
        assert last["truncated"] and last["info"]["t"] == pytest.approx(0.3)
        _error(c.call("step", action=HOVER), "reset_needed")
        closing = _ok(c.call("close"))
        assert closing["clock"]["periods"] == 30


def test_stop_closes_clients():
    with served() as server:
        c = RawClient(server)
        try:
            _ok(c.call("hello"))
            server.stop()
            assert c.closed_by_server()
        finally:
            c.close()


@pytest.mark.parametrize("realtime", [False, True])
def test_a_failing_hook_gets_internal_and_the_server_keeps_serving(realtime):
    calls = []

    def hook(stamp_ns, obs, info, action):
        calls.append(stamp_ns)
        if action is not None and len(calls) == 2:  # the first step after the first reset
            raise RuntimeError("disk full")

    with served(hook=hook, realtime=realtime) as server, raw_client(server) as c:
        _ok(c.call("hello"))
        _ok(c.call("reset", seed=0))
        _error(c.call("step", action=HOVER), "internal")
        _ok(c.call("reset", seed=0))
        _ok(c.call("step", action=HOVER))


def test_a_silent_server_is_a_timeout_for_the_client():
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts, never answers
        port = mute.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="no reply within 0.3 s"):
            gym.make(REMOTE_ENV_ID, address=f"127.0.0.1:{port}", timeout_s=0.3)
        assert time.monotonic() - t0 < 5.0


def test_a_token_that_is_not_text_is_unauthorized_and_closes_the_connection():
    # a JSON string may hold a lone surrogate ("\ud800"), which no UTF-8 token can equal
    with served(token="s3cret") as server:
        for token in ("\ud800", "s3cret\udcff", 10**400, ["s3cret"]):
            with raw_client(server, encoding="json") as c:
                _error(c.call("hello", token=token), "unauthorized")
                assert c.closed_by_server(), token
        with raw_client(server, encoding="json") as c:
            _ok(c.call("hello", token="s3cret"))


BEYOND_FLOAT = 10**400  # a JSON integer no float (nor msgpack integer) can hold


@pytest.mark.parametrize(
    ("op", "args", "field"),
    [
        ("step", {"action": [0, BEYOND_FLOAT, 0, 0]}, "action[1]"),
        ("step", {"action": [-BEYOND_FLOAT, 0, 0, 0]}, "action[0]"),
        ("reset", {"seed": BEYOND_FLOAT}, "seed"),
        ("reset", {"options": {"yaw_offset": BEYOND_FLOAT}}, "options.yaw_offset"),
        ("reset", {"options": {"velocity": [0, 0, BEYOND_FLOAT]}}, "options.velocity[2]"),
        ("configure", {"scenario": {"episode_s": BEYOND_FLOAT}}, "scenario.episode_s"),
        ("configure", {"scenario": {"payload": BEYOND_FLOAT}}, "scenario.payload"),
        ("configure", {"scenario": {"wind": [BEYOND_FLOAT, 0]}}, "scenario.wind[0]"),
        (
            "configure",
            {"scenario": {"events": [{"kind": "payload", "t_s": 0.5, "mass_kg": BEYOND_FLOAT}]}},
            "scenario.events[0].mass_kg",
        ),
        (
            "reset",
            {"scenario": {"trajectory": "helix", "trajectory_params": {"period": BEYOND_FLOAT}}},
            "scenario.trajectory_params.period",
        ),
        ("configure", {"scenario": {"reward_weights": {"pos": BEYOND_FLOAT}}}, "reward_weights"),
    ],
)
def test_integers_beyond_64_bits_are_bad_requests_that_name_the_field(op, args, field, caplog):
    with served() as server, raw_client(server, encoding="json") as c:
        _ok(c.call("hello"))
        _ok(c.call("reset", seed=0))
        with caplog.at_level("INFO", logger="residual_quad.remote.server"):
            reply = _error(c.call(op, **args), "bad_request")
        assert field in reply["error"]["message"] and "64-bit" in reply["error"]["message"]
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
        _ok(c.call("reset", seed=0))  # the session goes on
        _ok(c.call("step", action=HOVER))


def test_serve_refuses_a_token_that_is_not_text_in_one_line(monkeypatch, capsys):
    from residual_quad.cli import main

    monkeypatch.setenv("RQUAD_TOKEN", "s3cret\udcff")  # an undecodable byte of the variable
    assert main(["serve", "--host", "127.0.0.1", "--port", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "rquad serve: error: RQUAD_TOKEN must be UTF-8 text (it holds undecodable bytes)"
    ]
