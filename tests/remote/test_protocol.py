"""The wire format: framing, decoding, request checks, addresses and scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.remote.client import parse_address, wire_scenario
from residual_quad.remote.config import ServerConfig
from residual_quad.remote.protocol import (
    ERROR_CODES,
    HEADER,
    OPS,
    PROTOCOL_VERSION,
    FrameReader,
    ProtocolError,
    decode_payload,
    env_kwargs,
    frame,
    parse_action,
    parse_request,
    parse_scenario,
)


def test_frames_round_trip_in_both_encodings():
    message = {"v": 1, "seq": 3, "op": "step", "action": [0.1, -0.2, 1e-300, 0.5]}
    for encoding in ("msgpack", "json"):
        data = frame(message, encoding)
        assert HEADER.unpack(data[:4])[0] == len(data) - 4
        events = list(FrameReader(1 << 16).feed(data))
        assert events == [("frame", data[4:])]
        assert decode_payload(data[4:]) == (message, encoding)


def test_floats_travel_bit_exact():
    values = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0]
    for encoding in ("msgpack", "json"):
        decoded, _ = decode_payload(frame({"x": values}, encoding)[4:])
        assert [v.hex() for v in decoded["x"]] == [v.hex() for v in values]


@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(1, 7))
@settings(max_examples=60)
def test_frame_reader_splits_any_chunking(payloads, chunk):
    payloads = [p for p in payloads if p]
    stream = b"".join(HEADER.pack(len(p)) + p for p in payloads)
    reader = FrameReader(1 << 16)
    got = []
    for i in range(0, len(stream), chunk):
        got += [item for kind, item in reader.feed(stream[i : i + chunk]) if kind == "frame"]
    assert got == payloads


def test_oversized_frame_is_reported_and_skipped():
    reader = FrameReader(100)
    big = HEADER.pack(1000) + b"x" * 1000
    small = frame({"v": 1})
    events = list(reader.feed(big[:500])) + list(reader.feed(big[500:] + small))
    assert events == [("too_large", 1000), ("frame", small[4:])]
    assert list(FrameReader(100).feed(HEADER.pack(0))) == [("too_large", 0)]


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", b"\x93\x01\x02\x03", b"{nope", b"\x81\x01\x02", msgpack.packb(7), b"{" + b"[" * 5000],
)
def test_undecodable_payloads_are_malformed(payload):
    with pytest.raises(ProtocolError) as info:
        decode_payload(payload)
    assert info.value.code == "malformed"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"seq": 1, "op": "hello"}, "bad_version"),
        ({"v": 2, "seq": 1, "op": "hello"}, "bad_version"),
        ({"v": 1, "op": "hello"}, "bad_request"),
        ({"v": 1, "seq": -1, "op": "hello"}, "bad_request"),
        ({"v": 1, "seq": True, "op": "hello"}, "bad_request"),
        ({"v": 1, "seq": 1.0, "op": "hello"}, "bad_request"),
        ({"v": 1, "seq": 1, "op": "fly"}, "unknown_op"),
        ({"v": 1, "seq": 1}, "unknown_op"),
        ({"v": 1, "seq": 1, "op": "step", "action": [0] * 4, "extra": 1}, "bad_request"),
    ],
)
def test_bad_envelopes_are_refused(message, code):
    with pytest.raises(ProtocolError) as info:
        parse_request(message)
    assert info.value.code == code


@pytest.mark.parametrize(
    ("args", "place"),
    [
        ({"op": "step", "action": [0, 0, 10**400, 0]}, "action[2]"),
        ({"op": "step", "action": [-(2**63) - 1, 0, 0, 0]}, "action[0]"),
        ({"op": "reset", "seed": 2**64}, "seed"),
        ({"op": "reset", "options": {"velocity": [0, 10**400, 0]}}, "options.velocity[1]"),
        ({"op": "configure", "scenario": {"events": [{"t_s": 10**400}]}}, "scenario.events[0].t_s"),
        ({"op": "hello", "client": {"n": [10**400]}}, "client.n[0]"),
    ],
)
def test_integers_beyond_64_bits_are_bad_requests_that_name_their_place(args, place):
    with pytest.raises(ProtocolError, match=r"64-bit") as info:
        parse_request({"v": PROTOCOL_VERSION, "seq": 1, **args})
    assert info.value.code == "bad_request" and info.value.message.startswith(place)
    edge = {"op": "step", "action": [-(2**63), 2**64 - 1, 0, 0]}  # msgpack's range: accepted
    assert parse_request({"v": PROTOCOL_VERSION, "seq": 1, **edge}).args == {
        "action": edge["action"]
    }
    hello = {"op": "hello", "token": 10**400}  # the token is hello's to refuse (unauthorized)
    assert parse_request({"v": PROTOCOL_VERSION, "seq": 1, **hello}).args == {"token": 10**400}


def test_every_op_parses():
    for op in OPS:
        request = parse_request({"v": PROTOCOL_VERSION, "seq": 5, "op": op})
        assert (request.op, request.seq, request.args) == (op, 5, {})


@pytest.mark.parametrize(
    "action",
    [None, [0, 0, 0], [0] * 5, [True, 0, 0, 0], ["0", 0, 0, 0], [float("nan"), 0, 0, 0], "abcd"],
)
def test_bad_actions_are_refused(action):
    with pytest.raises(ProtocolError, match="action"):
        parse_action(action)


def test_scenarios():
    assert parse_scenario(None) == {}
    with pytest.raises(ProtocolError, match="unknown scenario key"):
        parse_scenario({"airframe": 1})
    with pytest.raises(ProtocolError, match="must be a map"):
        parse_scenario([1])
    kwargs = env_kwargs(
        {"wind": [1.0, 0.5], "trajectory": "helix", "trajectory_params": {"period": 6.0}}
    )
    assert kwargs["wind"] == (1.0, 0.5)
    assert kwargs["trajectory"].period == 6.0
    with pytest.raises(ValueError, match="unknown helix trajectory parameter"):
        env_kwargs({"trajectory": "helix", "trajectory_params": {"speed": 1}})
    with pytest.raises(ValueError, match="must be a name"):
        env_kwargs({"trajectory": 3})


def test_wire_scenario_from_env_arguments():
    from residual_quad.envs.trajectories import make_named_trajectory

    wire = wire_scenario(
        {"wind": (3.2, 1.8), "trajectory": make_named_trajectory("helix", period=6.0)}
    )
    assert wire["wind"] == [3.2, 1.8]
    assert wire["trajectory"] == "helix" and wire["trajectory_params"]["period"] == 6.0
    json.dumps(wire)  # plain data
    with pytest.raises(ValueError, match="cannot be sent"):
        wire_scenario({"airframe": None})
    with pytest.raises(ValueError, match="built-in trajectories"):
        wire_scenario({"trajectory": lambda t: None})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:41460", ("127.0.0.1", 41460)),
        ("localhost", ("localhost", 41460)),
        ("[::1]:9000", ("::1", 9000)),
        ("[::1]", ("::1", 41460)),
    ],
)
def test_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text", ["", "h:", ":80", "h:0", "h:70000", "h:x", "::1", "[::1", "[::1]x", 5]
)
def test_bad_addresses(text):
    with pytest.raises(ValueError):
        parse_address(text)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"port": -1}, "port"),
        ({"port": 70000}, "port"),
        ({"host": ""}, "host"),
        ({"token": ""}, "token"),
        ({"token": "s3cret\udcff"}, "token must be UTF-8 text"),  # an env var's undecodable byte
        ({"max_message_bytes": 10}, "max_message_bytes"),
        ({"max_message_bytes": 1 << 30}, "max_message_bytes"),
        ({"client_timeout_s": float("nan")}, "client_timeout_s"),
        ({"client_timeout_s": 0}, "client_timeout_s"),
        ({"handshake_timeout_s": 0}, "handshake_timeout_s"),
        ({"handshake_timeout_s": float("inf")}, "handshake_timeout_s"),
        ({"handshake_timeout_s": True}, "handshake_timeout_s"),
        ({"realtime": 1}, "realtime"),
        ({"scenario": {"bogus": 1}}, "unknown scenario key"),
    ],
)
def test_bad_server_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServerConfig(**kwargs)


def test_error_codes_are_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "remote.md").read_text("utf-8")
    for code in ERROR_CODES:
        assert f"`{code}`" in text, code
    for op in OPS:
        assert f"`{op}`" in text, op
