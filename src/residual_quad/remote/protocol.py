"""Wire protocol of the simulation server, version 1 (``docs/remote.md`` is the prose version).

Why length-prefixed msgpack: msgpack is a small, well-kept binary format with implementations in
every language a flight stack is written in (C, C++, Rust, Go, Java, MATLAB), it carries float64
without loss (the lock-step bit identity needs that) and costs a few microseconds per message;
a 4-byte length prefix makes framing trivial on a plain TCP socket, so a client needs no broker
and no extra library (ZeroMQ would add both). A client that has only its standard library may
send the same messages as UTF-8 JSON objects instead; the server answers each request in the
encoding it came in (JSON floats are written shortest-round-trip, so they are exact as well).

Frame: ``uint32`` big-endian payload length ``N`` (1 ≤ ``N`` ≤ the server's maximum message size),
then ``N`` bytes: a msgpack map, or a JSON object (its first byte is ``{``).

Integers are 64-bit in both encodings: in [-2^63, 2^64), msgpack's range (a JSON integer beyond
it is ``bad_request``, see :data:`INT_RANGE`).

Request: ``{"v": 1, "seq": <int, strictly increasing per connection>, "op": <op>, ...}``.
Reply: ``{"v": 1, "seq": <the request's seq or null>, "ok": true, ...}`` or
``{"v": 1, "seq": ..., "ok": false, "error": {"code": <ERROR_CODES key>, "message": <text>}}``.
"""

from __future__ import annotations

import json
import math
import socket
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.remote import require

msgpack = require("msgpack")

PROTOCOL_VERSION = 1
DEFAULT_PORT = 41460  # the source's plant-server port [RES §10]
DEFAULT_MAX_MESSAGE_BYTES = 1 << 16  # 64 KiB: a step request is ≈ 60 bytes, a reply ≈ 700
MAX_MESSAGE_BYTES_LIMIT = 1 << 24  # 16 MiB: the largest maximum a server may be configured with
HEADER = struct.Struct(">I")  # payload length, bytes
INT_RANGE = (-(2**63), 2**64)  # [low, high): msgpack's integers, and so every wire integer

OPS: dict[str, frozenset[str]] = {
    "hello": frozenset({"token", "client"}),
    "configure": frozenset({"scenario"}),
    "reset": frozenset({"seed", "options", "scenario"}),
    "step": frozenset({"action"}),
    "close": frozenset(),
}
"""Each operation and the optional argument keys it accepts besides ``v``, ``seq`` and ``op``."""

ENVELOPE = frozenset({"v", "seq", "op"})
"""The keys every request carries."""

ERROR_CODES: dict[str, str] = {
    "malformed": "the frame is not a msgpack map or a JSON object",
    "too_large": "the declared length exceeds the server's maximum (its bytes are skipped)",
    "bad_version": "the request's protocol version is not the server's",
    "unknown_op": "no such operation",
    "bad_request": "a missing, unknown or invalid field (the message says which)",
    "out_of_order": "seq not increasing, a call before hello, or a step while one is pending",
    "unauthorized": "wrong or missing token (the connection is then closed)",
    "reset_needed": "step before the first reset or after the episode ended",
    "busy": "another client controls the plant (the connection is then closed; the error's "
    "retry_after_s says when the holder's idle deadline passes)",
    "timeout": "the handshake or idle deadline passed (sent unasked with seq null; the "
    "connection is then closed)",
    "internal": "the server failed on this request (a bug; the traceback is in its log)",
}
"""The error codes a reply can carry, and what they mean."""

SCENARIO_KEYS: dict[str, str] = {
    "payload": "none/light/heavy/extra or a mass in kg",
    "wind": "calm/breezy/windy or [mean, sigma] in m/s",
    "trajectory": "hover/helix/figure8",
    "trajectory_params": "map of the trajectory's parameters (e.g. {period: 6.0})",
    "ground_effect": "true/false",
    "control_hz": "control rate, Hz",
    "physics_hz": "physics rate, Hz",
    "episode_s": "episode length, s",
    "action_mode": "rotor or ctbr",
    "wind_tau": "gust correlation time, s",
    "wind_direction": "mean-wind heading, rad",
    "max_tilt": "crash tilt, rad",
    "crash_speed": "floor-contact crash speed, m/s",
    "max_position_error": "tracking error that ends the episode, m",
    "max_body_rate": "ctbr rate scale [p, q, r], rad/s",
    "k_rate": "ctbr rate-loop gain, 1/s",
    "reward_weights": "map of RewardWeights overrides",
    "pos_noise": "position noise std, m",
    "vel_noise": "velocity noise std, m/s",
    "gyro_noise": "body-rate noise std, rad/s",
    "imu_noise": "accelerometer noise std, m/s²",
    "preset": "named plant options: ideal or realistic",
    "rotor_tau_s": "first-order rotor lag, s",
    "action_delay_steps": "command latency, control periods",
    "obs_delay_steps": "sensor latency, control periods",
    "turbulence": "Dryden turbulence level (light/moderate/severe) instead of the OU gusts",
    "imu_bias": "IMU bias random walks: a level name or a map of ImuBias fields",
    "events": "mid-flight events: a list of maps, each with kind (payload/rotor/wind), t_s (s) "
    "and the kind's fields",
}
"""The ``ResidualQuad-v0`` arguments a client may set over the wire (``configure``/``reset``)."""

TRUTH_KEYS: tuple[str, ...] = (
    "residual_accel",
    "wind",
    "drag_force",
    "ground_gain",
    "payload_kg",
    "true_mass",
    "rotor_thrusts",
    "gyro_bias",
    "accel_bias",
    "mean_wind",
    "rotor_efficiency",
    "events_fired",
)
"""``info`` entries that are ground truth: sent apart, under ``truth``, never in ``obs``."""

INFO_KEYS: tuple[str, ...] = ("t", "position_error", "reward_terms", "diverged", "termination")
"""The other ``info`` entries of a reply."""


class ProtocolError(Exception):
    """A request the server refuses; ``code`` is a key of :data:`ERROR_CODES`."""

    def __init__(self, code: str, message: str, **details: Any):
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details  # extra fields of the reply's error map (e.g. retry_after_s)


class RemoteError(ConnectionError):
    """An error reply seen by a client (``code`` from :data:`ERROR_CODES`): the server refused
    the request (a ``ConnectionError``, so the command line reports it in one line)."""

    def __init__(self, code: str, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(f"server refused the request ({code}): {message}")
        self.code = code
        self.message = message
        self.details = dict(details or {})  # the error's other fields (busy: retry_after_s)


# ----------------------------------------------------------------------------- encoding
def encode_payload(message: Mapping[str, Any], encoding: str = "msgpack") -> bytes:
    """The payload bytes of ``message`` in ``encoding`` (``msgpack`` or ``json``)."""
    if encoding == "msgpack":
        return msgpack.packb(message, use_bin_type=True)
    if encoding == "json":
        return json.dumps(message, separators=(",", ":")).encode()
    raise ValueError(f"unknown encoding {encoding!r}; valid: msgpack, json")


def frame(message: Mapping[str, Any], encoding: str = "msgpack") -> bytes:
    """One frame: the length prefix and the payload of ``message``."""
    payload = encode_payload(message, encoding)
    return HEADER.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> tuple[dict[str, Any], str]:
    """``(message, encoding)`` of one frame's payload; anything but a map is ``malformed``."""
    if payload[:1] == b"{":
        encoding = "json"
        try:
            message = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ProtocolError("malformed", f"not a JSON object: {exc}") from None
    else:
        encoding = "msgpack"
        try:
            message = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several types for bad bytes
            raise ProtocolError("malformed", f"not a msgpack map: {type(exc).__name__}") from None
    if not isinstance(message, dict):
        raise ProtocolError("malformed", f"a message must be a map, got {type(message).__name__}")
    return message, encoding


class FrameReader:
    """Splits a byte stream into frames; a frame longer than ``max_bytes`` is reported once and
    its bytes are skipped as they arrive (never buffered), so the framing stays intact."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._skip = 0  # bytes of an oversized frame still to drop

    def feed(self, data: bytes) -> Iterator[tuple[str, bytes | int]]:
        """Yield ``("frame", payload)`` or ``("too_large", declared_length)`` events."""
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data
        buf = self._buffer
        while True:
            if self._skip:
                dropped = min(self._skip, len(buf))
                self._skip -= dropped
                del buf[:dropped]
                if self._skip:
                    return
            if len(buf) < HEADER.size:
                return
            (length,) = HEADER.unpack_from(buf)
            if length == 0 or length > self.max_bytes:
                del buf[: HEADER.size]
                self._skip = length
                yield "too_large", length
                continue
            if len(buf) < HEADER.size + length:
                return
            payload = bytes(buf[HEADER.size : HEADER.size + length])
            del buf[: HEADER.size + length]
            yield "frame", payload


def kernel_timeouts(sock: socket.socket, seconds: float, send_only: bool = False) -> None:
    """Make ``sock`` blocking with kernel send (and receive) timeouts of ``seconds``: each call is
    then one system call (a Python-level timeout polls before every call). A call that times out
    raises ``BlockingIOError``."""
    sock.settimeout(None)
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    if not send_only:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket; ``ConnectionError`` when it closes first."""
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        chunks += chunk
    return bytes(chunks)


def recv_message(sock: socket.socket, max_bytes: int = MAX_MESSAGE_BYTES_LIMIT) -> dict[str, Any]:
    """One message from a blocking socket (the client side)."""
    (length,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    if not 0 < length <= max_bytes:
        raise ConnectionError(f"reply of {length} bytes is beyond {max_bytes}")
    message, _ = decode_payload(recv_exact(sock, length))
    return message


# ----------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Request:
    """A checked request: its operation, sequence number and arguments."""

    op: str
    seq: int
    args: dict[str, Any]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a JSON string may hold a lone surrogate
    (``"\\ud800"``), and so may an environment variable with undecodable bytes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_integers(args: Mapping[str, Any]) -> None:
    """Every integer in a request's arguments (at any depth) is a 64-bit one, as msgpack carries:
    JSON has no limit, and an integer beyond a float's range (10**400) would overflow wherever
    the server reads it as a number. The hello token is left to hello (anything but the right
    string is ``unauthorized``)."""
    stack = [(str(key), value) for key, value in args.items() if key != "token"]
    stack.reverse()
    while stack:  # iterative: a JSON frame may nest as deep as its decoder allows
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(reversed([(f"{path}.{k}", v) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
        elif _is_int(value) and not INT_RANGE[0] <= value < INT_RANGE[1]:
            digits = len(str(abs(value)))
            raise ProtocolError(
                "bad_request",
                f"{path}: an integer of {digits} digits is outside the protocol's 64-bit range "
                "[-2^63, 2^64)",
            )


def parse_request(message: dict[str, Any]) -> Request:
    """Check the envelope and the argument keys of one request (values are checked by the op)."""
    version = message.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            "bad_version", f"this server speaks protocol v{PROTOCOL_VERSION}, got v={version!r}"
        )
    seq = message.get("seq")
    if not _is_int(seq) or not 0 <= seq < 2**63:
        raise ProtocolError("bad_request", f"seq must be an integer in [0, 2^63), got {seq!r}")
    op = message.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ProtocolError("unknown_op", f"op {op!r}; valid: {', '.join(OPS)}")
    allowed = OPS[op]
    args = {k: v for k, v in message.items() if k not in ENVELOPE}
    unknown = sorted(map(str, (k for k in args if k not in allowed)))
    if unknown:
        raise ProtocolError(
            "bad_request",
            f"unknown field(s) {unknown} for {op}; valid: {', '.join(sorted(OPS[op])) or 'none'}",
        )
    _check_integers(args)
    return Request(op, seq, args)


def parse_action(value: Any) -> list[float]:
    """A step's action: four real numbers (not bools), finite (clipping is the env's job)."""
    if not isinstance(value, list | tuple) or len(value) != 4:
        raise ProtocolError("bad_request", f"action must be a list of 4 numbers, got {value!r}")
    if not all(type(a) is float or type(a) is int for a in value):  # decoders give only these
        raise ProtocolError("bad_request", f"action must hold real numbers, got {value!r}")
    action = [float(a) for a in value]
    if not all(map(math.isfinite, action)):
        raise ProtocolError("bad_request", f"action must be finite, got {action}")
    return action


def parse_seed(value: Any) -> int | None:
    """A reset's seed: ``None`` or an integer in [0, 2^63)."""
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value < 2**63:
        raise ProtocolError("bad_request", f"seed must be null or an integer >= 0, got {value!r}")
    return value


def parse_scenario(value: Any) -> dict[str, Any]:
    """A scenario map with keys from :data:`SCENARIO_KEYS` (values are the env's to check)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError("bad_request", f"scenario must be a map, got {value!r}")
    unknown = sorted(map(str, set(value) - set(SCENARIO_KEYS)))
    if unknown:
        raise ProtocolError(
            "bad_request",
            f"unknown scenario key(s) {unknown}; valid: {', '.join(SCENARIO_KEYS)}",
        )
    if "events" in value:
        _check_events(value["events"])
    return dict(value)


def _check_events(events: Any) -> None:
    """The shape of a scenario's ``events``: null or a list of maps (the env checks each
    event's kind, fields and time, and names what is wrong)."""
    if events is None:
        return
    if not isinstance(events, list):
        raise ProtocolError(
            "bad_request", f"scenario events must be a list of maps or null, got {events!r}"
        )
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise ProtocolError(
                "bad_request",
                f"scenario events[{i}] must be a map with a kind (payload, wind, rotor), "
                f"got {event!r}",
            )


def env_kwargs(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """``ResidualQuad-v0`` keyword arguments of a wire scenario (lists become tuples, a
    trajectory with parameters becomes its object); the env checks the values."""
    from residual_quad.envs.trajectories import make_named_trajectory

    kwargs = dict(scenario)
    if isinstance(kwargs.get("wind"), list):
        kwargs["wind"] = tuple(kwargs["wind"])
    if isinstance(kwargs.get("max_body_rate"), list):
        kwargs["max_body_rate"] = tuple(kwargs["max_body_rate"])
    if isinstance(kwargs.get("events"), list):
        kwargs["events"] = tuple(kwargs["events"])
    params = kwargs.pop("trajectory_params", None)
    if params is not None:
        if not isinstance(params, dict):
            raise ValueError(f"trajectory_params must be a map, got {params!r}")
        name = kwargs.get("trajectory", "hover")
        if not isinstance(name, str):
            raise ValueError(f"trajectory must be a name with trajectory_params, got {name!r}")
        kwargs["trajectory"] = make_named_trajectory(name, **params)
    elif "trajectory" in kwargs and not isinstance(kwargs["trajectory"], str):
        raise ValueError(f"trajectory must be a name, got {kwargs['trajectory']!r}")
    return kwargs


def wire_truth(value: Any) -> Any:
    """A truth entry of ``info`` as the wire carries it: arrays as lists of floats, counts as
    ints, other numbers as floats."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if np.ndim(value):
        return np.asarray(value, dtype=float).tolist()
    return float(value)


def error_reply(seq: Any, code: str, message: str, **details: Any) -> dict[str, Any]:
    """The reply to a refused request; ``details`` are extra fields of its error map (``busy``
    carries ``retry_after_s``)."""
    return {
        "v": PROTOCOL_VERSION,
        "seq": seq if _is_int(seq) else None,
        "ok": False,
        "error": {"code": code, "message": message, **details},
    }
