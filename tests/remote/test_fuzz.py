"""A fuzzed message stream (random bytes, truncated frames, wrong types, huge sizes, out-of-order
calls, in both encodings): the server answers every complete frame with a well-formed reply that
is never ``internal`` (a bug), never dies, and serves a well-formed client afterwards. The JSON
requests carry what msgpack cannot: integers beyond 64 bits (10**400, beyond a float) and strings
with lone surrogates (``"\\ud800"``), in every numeric and text field of every operation (each
scenario key, event field and reset option); a hello with any token but the right one is
``unauthorized`` and closed. ``HYPOTHESIS_PROFILE=long`` sends ≈ 10 000 messages."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from remote_helpers import REPLY_TIMEOUT_S, raw_client, served

from residual_quad.envs.imu_bias import ImuBias
from residual_quad.envs.residual_quad_env import RESET_OPTIONS
from residual_quad.envs.reward import RewardWeights
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.remote.protocol import (
    HEADER,
    OPS,
    SCENARIO_KEYS,
    FrameReader,
    decode_payload,
    frame,
    recv_message,
)

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLES = 400 if LONG else 25
MIN_MESSAGES = 25 if LONG else 5  # per example (a connection)
MAX_MESSAGES = 50
STATS = {"messages": 0, "replies": 0, "examples": 0}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
actions = st.lists(st.floats(-2, 2), min_size=4, max_size=4) | values


def _requests(scalar, number):
    """Requests whose values are drawn from ``scalar`` (anything) and ``number`` (numbers, in
    the places a number belongs: action, seed, every scenario key, event field and option)."""
    anything = st.recursive(
        scalar,
        lambda inner: (
            st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        ),
        max_leaves=12,
    )
    vector = st.lists(number, min_size=1, max_size=4)
    event = st.fixed_dictionaries(
        {"kind": st.sampled_from(["payload", "wind", "rotor"]) | scalar, "t_s": number},
        optional={
            "mass_kg": number,
            "mean_mps": vector,
            "rise_s": number,
            "rotor": number,
            "efficiency": number,
        },
    )
    scenario_value = (
        number | vector | scalar | st.dictionaries(st.text(max_size=8), number, max_size=3)
    )
    scenario = st.dictionaries(
        st.sampled_from([*SCENARIO_KEYS, "bogus"]), scenario_value, max_size=4
    ) | st.fixed_dictionaries({"events": st.lists(event, min_size=1, max_size=2)})
    return st.fixed_dictionaries(
        {
            "v": st.sampled_from([1, 1, 1, 1, 0, 2, "1", None]),
            "seq": st.integers(-3, 40) | st.integers(-(2**63), 2**64 - 1) | anything,
            "op": st.sampled_from([*OPS, *OPS, "", "fly", "STEP"]) | anything,
        },
        optional={
            "action": st.lists(number, min_size=4, max_size=4)
            | st.lists(st.floats(-2, 2), min_size=4, max_size=4)
            | anything,
            "seed": st.integers(-3, 10) | number | anything,
            "options": st.dictionaries(st.sampled_from(RESET_OPTIONS), number | vector) | anything,
            "scenario": scenario | anything,
            "token": anything,
            "client": anything,
        },
    )


requests = st.fixed_dictionaries(
    {
        "v": st.sampled_from([1, 1, 1, 1, 0, 2, "1", None]),
        "seq": st.integers(-3, 40) | st.integers(-(2**63), 2**64 - 1) | values,
        "op": st.sampled_from([*OPS, *OPS, "", "fly", "STEP"]) | values,
    },
    optional={
        "action": actions,
        "seed": st.integers(-3, 10) | values,
        "options": values,
        "scenario": st.dictionaries(
            st.sampled_from(["payload", "wind", "trajectory", "episode_s", "bogus"]), values
        )
        | values,
        "token": values,
    },
)
# what only JSON carries: integers of any size (10**400 is beyond a float) and lone surrogates
BIG_INTEGERS = (
    st.tuples(st.sampled_from([1, -1]), st.sampled_from([20, 309, 400])).map(
        lambda sign_exp: sign_exp[0] * 10 ** sign_exp[1]
    )
    | st.sampled_from([2**64, -(2**63) - 1])
    | st.integers()
)
SURROGATE_TEXT = st.text(st.characters(categories=["Cs"]) | st.characters(), max_size=8)
json_scalars = (
    st.none() | st.booleans() | st.floats() | st.text(max_size=8) | BIG_INTEGERS | SURROGATE_TEXT
)
json_requests = _requests(json_scalars, st.floats() | st.integers(-5, 5) | BIG_INTEGERS)


def _framed(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


JSON_EDGE_REQUESTS = [  # each of these was once answered ``internal``
    {"v": 1, "seq": 10, "op": "step", "action": [0, 10**400, 0, 0]},
    {"v": 1, "seq": 11, "op": "configure", "scenario": {"episode_s": -(10**400)}},
    {
        "v": 1,
        "seq": 12,
        "op": "reset",
        "scenario": {"events": [{"kind": "payload", "t_s": 0.5, "mass_kg": 10**400}]},
    },
    {"v": 1, "seq": 13, "op": "hello", "token": "\ud800", "client": "\udcff"},
]


messages = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: ("raw", b)),
    st.binary(min_size=1, max_size=64).map(lambda b: ("frame", _framed(b))),
    requests.map(lambda r: ("frame", _framed(msgpack.packb(r)))),
    requests.map(lambda r: ("frame", _framed(msgpack.packb(r)))),
    st.tuples(requests, st.integers(1, 30)).map(
        lambda rc: ("truncated", _framed(msgpack.packb(rc[0]))[: rc[1]])
    ),
    json_requests.map(lambda r: ("frame", _framed(json.dumps(r).encode()))),
    st.text(max_size=40).map(lambda t: ("frame", _framed(b"{" + t.encode()))),
    st.integers(2**16 + 1, 2**32 - 1).map(lambda n: ("huge", HEADER.pack(n))),
)


def _read_all(sock: socket.socket) -> bytes:
    sock.shutdown(socket.SHUT_WR)  # the server sees the end, answers what it has, closes
    data = bytearray()
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _well_formed_session(server) -> None:
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while True:  # the previous connection may take a moment to be seen closed
        with raw_client(server) as c:
            hello = c.call("hello")
            if hello["ok"]:
                assert c.call("reset", seed=0)["ok"]
                step = c.call("step", action=[0.0, 0.0, 0.0, 0.0])
                assert step["ok"] and len(step["obs"]) == 36
                return
        assert hello["error"]["code"] == "busy" and time.monotonic() < deadline
        time.sleep(0.02)


def test_fuzzed_streams_never_kill_the_server():
    with served(max_message_bytes=1 << 16, client_timeout_s=5.0) as server:

        @given(st.booleans(), st.lists(messages, min_size=MIN_MESSAGES, max_size=MAX_MESSAGES))
        @example(True, [("frame", _framed(json.dumps(r).encode())) for r in JSON_EDGE_REQUESTS])
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        def stream(greet, items):
            with raw_client(server) as c:
                if greet:  # a session under way: the fuzz then reaches reset/step/configure
                    for seq, op in enumerate(("hello", "reset"), start=1):
                        c.send_raw(_framed(msgpack.packb({"v": 1, "seq": seq, "op": op})))
                for _, data in items:
                    c.send_raw(data)
                replies = _read_all(c.sock)
            STATS["messages"] += len(items)
            STATS["examples"] += 1
            reader = FrameReader(1 << 24)
            for kind, payload in reader.feed(replies):  # every reply is a well-formed frame
                assert kind == "frame"
                reply, _ = decode_payload(payload)
                assert reply["v"] == 1 and isinstance(reply["ok"], bool)
                if not reply["ok"]:
                    assert isinstance(reply["error"]["code"], str)
                    assert reply["error"]["code"] != "internal", (reply, items)
                STATS["replies"] += 1

        stream()
        _well_formed_session(server)
        assert STATS["messages"] >= EXAMPLES * MIN_MESSAGES  # the stream really ran
        print(f"fuzz: {STATS} server counts {server.counts}")


TOKEN = "s3cret"


def test_any_hello_but_the_right_token_is_unauthorized_and_closed():
    with served(token=TOKEN) as server:

        @given(
            st.sampled_from(["msgpack", "json"]),
            values | SURROGATE_TEXT | BIG_INTEGERS | st.just(TOKEN + "\udcff"),
        )
        @settings(max_examples=EXAMPLES, deadline=None)
        @example("json", "\ud800")
        @example("json", TOKEN + "\udcff")
        @example("json", 10**400)
        def hello(encoding, token):
            request = {"v": 1, "seq": 1, "op": "hello", "token": token}
            other = "json" if encoding == "msgpack" else "msgpack"
            try:
                data = frame(request, encoding)
            except (TypeError, ValueError, OverflowError):  # bytes: msgpack only; a lone
                data = frame(request, other)  # surrogate or a big integer: JSON only
            with socket.create_connection(server.address, timeout=REPLY_TIMEOUT_S) as sock:
                sock.sendall(data)
                reply = recv_message(sock)
                assert reply["error"]["code"] == "unauthorized", (token, reply)
                assert sock.recv(1) == b""  # closed by the server

        hello()
        with socket.create_connection(server.address, timeout=REPLY_TIMEOUT_S) as sock:
            sock.sendall(frame({"v": 1, "seq": 1, "op": "hello", "token": TOKEN}, "json"))
            assert recv_message(sock)["ok"]


EVENTS = {  # a valid event of each kind
    "payload": {"kind": "payload", "t_s": 0.5, "mass_kg": 0.1},
    "wind": {"kind": "wind", "t_s": 0.5, "mean_mps": [1.0, 0.0, 0.0], "rise_s": 1.0},
    "rotor": {"kind": "rotor", "t_s": 0.5, "rotor": 0, "efficiency": 0.5},
}
MAPS = {  # the scenario keys whose value is a map, and the fields of the map
    "reward_weights": [f.name for f in dataclasses.fields(RewardWeights)],
    "imu_bias": [f.name for f in dataclasses.fields(ImuBias)],
}
VECTORS = {"wind": 2, "max_body_rate": 3}  # scenario keys whose value is a list of numbers


def _places():
    """``(name, op, args(value))``: every place of every request where a client puts a number or
    a string (each scenario key, map field, vector entry, event field, reset option, the action's
    entries, the seed and the hello's client), with ``value`` there and valid values elsewhere."""

    def at(op, name, build):
        places.append((name, op, build))

    places = []
    for i in range(4):
        at("step", f"action[{i}]", lambda v, i=i: {"action": [0.0] * i + [v] + [0.0] * (3 - i)})
    at("reset", "seed", lambda v: {"seed": v})
    at("hello", "client", lambda v: {"client": v})
    for key in RESET_OPTIONS:
        at("reset", f"options.{key}", lambda v, k=key: {"options": {k: v}})
        at("reset", f"options.{key}[1]", lambda v, k=key: {"options": {k: [0.0, v, 0.0]}})
    scenarios = []  # (name, scenario(value))
    for key in SCENARIO_KEYS:
        scenarios.append((key, lambda v, k=key: {k: v}))
    for key, n in VECTORS.items():
        scenarios.append((f"{key}[0]", lambda v, k=key, n=n: {k: [v] + [0.0] * (n - 1)}))
    for key, names in MAPS.items():
        for field in names:
            scenarios.append((f"{key}.{field}", lambda v, k=key, f=field: {k: {f: v}}))
    for trajectory, cls in TRAJECTORIES.items():
        for field in (f.name for f in dataclasses.fields(cls)):
            scenarios.append(
                (
                    f"trajectory_params.{field}",
                    lambda v, t=trajectory, f=field: {"trajectory": t, "trajectory_params": {f: v}},
                )
            )
    for event in EVENTS.values():
        for field in event:
            scenarios.append(
                (f"events[0].{field}", lambda v, e=event, f=field: {"events": [{**e, f: v}]})
            )
    for op in ("configure", "reset"):
        for name, scenario in scenarios:
            at(op, f"scenario.{name}", lambda v, sc=scenario: {"scenario": sc(v)})
    return places


PLACES = _places()
EDGE_VALUES = {  # what JSON carries and msgpack cannot, and a finite float at the edge
    "beyond a float": 10**400,
    "below a float": -(10**400),
    "beyond 64 bits": 2**64,
    "a lone surrogate": "\ud800",
    "the largest float": 1.7976931348623157e308,
}


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the largest float
@pytest.mark.parametrize("value", list(EDGE_VALUES.values()), ids=list(EDGE_VALUES))
def test_every_place_of_every_request_refuses_an_edge_value_cleanly(value, caplog):
    """No edge value is ``internal`` anywhere, and an integer beyond 64 bits is a ``bad_request``
    that names its place; the session goes on."""
    big = isinstance(value, int) and not -(2**63) <= value < 2**64
    with served() as server, raw_client(server, encoding="json") as c:
        c.call("hello")
        for name, op, args in PLACES:
            if op == "hello":
                with raw_client(server, encoding="json") as other:  # busy, after the check
                    reply = other.call(op, **args(value))
            else:
                reply = c.call(op, **args(value))
            code = None if reply["ok"] else reply["error"]["code"]
            assert code != "internal", (name, reply)
            if op == "reset" and reply["ok"]:  # the plant flies with the value
                step = c.call("step", action=[0.0] * 4)
                assert step["ok"] or step["error"]["code"] != "internal", (name, step)
            if big:
                assert code == "bad_request" and name in reply["error"]["message"], (name, reply)
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
        assert c.call("configure", scenario={})["ok"]
        assert c.call("reset", seed=0)["ok"] and c.call("step", action=[0.0] * 4)["ok"]
