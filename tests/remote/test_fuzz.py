"""A fuzzed message stream (random bytes, truncated frames, wrong types, huge sizes, out-of-order
calls): the server answers every complete frame with a well-formed reply, never dies, and serves
a well-formed client afterwards. ``HYPOTHESIS_PROFILE=long`` sends ≈ 10 000 messages."""

from __future__ import annotations

import os
import socket
import time

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remote_helpers import REPLY_TIMEOUT_S, raw_client, served

from residual_quad.remote.protocol import HEADER, OPS, FrameReader, decode_payload

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


def _framed(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


messages = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: ("raw", b)),
    st.binary(min_size=1, max_size=64).map(lambda b: ("frame", _framed(b))),
    requests.map(lambda r: ("frame", _framed(msgpack.packb(r)))),
    requests.map(lambda r: ("frame", _framed(msgpack.packb(r)))),
    st.tuples(requests, st.integers(1, 30)).map(
        lambda rc: ("truncated", _framed(msgpack.packb(rc[0]))[: rc[1]])
    ),
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
                STATS["replies"] += 1

        stream()
        _well_formed_session(server)
        assert STATS["messages"] >= EXAMPLES * MIN_MESSAGES  # the stream really ran
        print(f"fuzz: {STATS} server counts {server.counts}")
