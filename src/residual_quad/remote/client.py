"""``ResidualQuadRemote-v0``: a Gymnasium env that proxies a simulation server.

Every controller, :func:`~residual_quad.episode.run_episode`, the sweep and SB3 run against it
unchanged: it has the spaces, ``action_mode``, ``control_dt``, ``max_steps`` and ``info`` keys of
``ResidualQuad-v0`` (the server's ground truth comes back into ``info`` under the same names;
nothing of it reaches the observation). In lock-step it is the in-process env bit for bit.

    env = gym.make("ResidualQuadRemote-v0", address="127.0.0.1:41460",
                   payload="extra", wind="windy", trajectory="helix")
"""

from __future__ import annotations

import dataclasses
import math
import socket
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from residual_quad.envs.actions import clip_action
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import integer
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.remote.protocol import (
    DEFAULT_PORT,
    MAX_MESSAGE_BYTES_LIMIT,
    PROTOCOL_VERSION,
    SCENARIO_KEYS,
    TRUTH_KEYS,
    FrameReader,
    ProtocolError,
    RemoteError,
    decode_payload,
    frame,
    kernel_timeouts,
)

#: truth entries that are arrays in the in-process ``info`` (3-vectors; 4 rotors' thrusts, N,
#: and efficiencies)
VECTOR_TRUTH = (
    "residual_accel",
    "wind",
    "drag_force",
    "rotor_thrusts",
    "gyro_bias",
    "accel_bias",
    "mean_wind",
    "rotor_efficiency",
)


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:41460"`` for IPv6; a bare host takes port 41460) →
    ``(host, port)``; anything else is a ``ValueError``."""
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"address must be 'HOST:PORT', got {address!r}")
    text = address.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"address must be '[IPV6]:PORT', got {address!r}")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        if not port_text:
            raise ValueError(f"address has an empty port: {address!r}")
    elif ":" not in text:
        host, port_text = text, ""
    else:
        raise ValueError(f"an IPv6 address needs brackets ('[::1]:41460'), got {address!r}")
    if not host:
        raise ValueError(f"address has no host: {address!r}")
    if not port_text:
        return host, DEFAULT_PORT
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in [1, 65535], got {port_text!r}")
    return host, port


def wire_scenario(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``ResidualQuad-v0`` keyword arguments as a wire scenario: a built-in trajectory object
    becomes its name and parameters, tuples become lists; an argument that cannot travel (an
    object, a user trajectory) is a ``ValueError``."""
    unknown = sorted(set(kwargs) - set(SCENARIO_KEYS))
    if unknown:
        raise ValueError(
            f"argument(s) {unknown} cannot be sent to a remote plant; valid: "
            f"{', '.join(SCENARIO_KEYS)}"
        )
    scenario: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "trajectory" and not isinstance(value, str):
            if type(value) not in TRAJECTORIES.values():
                raise ValueError(
                    f"a remote plant flies the built-in trajectories "
                    f"({', '.join(TRAJECTORIES)}) with parameters, got {value!r}"
                )
            scenario["trajectory"] = type(value).name
            scenario["trajectory_params"] = dataclasses.asdict(value)
            continue
        if key == "events" and value is not None:
            scenario["events"] = [_wire_event(e) for e in value]
            continue
        scenario[key] = _plain(value)
    return scenario


def _plain(value: Any) -> Any:
    """A value as msgpack carries it: tuples and arrays as lists of floats, numpy scalars as
    Python ones."""
    if isinstance(value, tuple | np.ndarray):
        return [float(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _wire_event(event: Any) -> Any:
    """A mid-flight event (an ``envs.events`` dataclass or a dict) as a wire map; anything else
    travels as is, for the server to name."""
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return {"kind": event.kind, **{k: _plain(v) for k, v in vars(event).items()}}
    if isinstance(event, dict):
        return {k: _plain(v) for k, v in event.items()}
    return event


class ResidualQuadRemoteEnv(gym.Env):
    """``ResidualQuad-v0`` served by ``rquad serve`` at ``address``.

    Args:
        address: ``"host:port"`` of the server.
        token: the server's shared token, if it has one.
        timeout_s: how long a reply may take, s (a realtime ``step`` waits for its period).
        seed: used by the first ``reset`` that passes none (as in ``ResidualQuad-v0``).
        **scenario: ``ResidualQuad-v0`` arguments sent with ``configure`` (the keys of
            :data:`~residual_quad.remote.protocol.SCENARIO_KEYS`); the server checks them.

    A refused request raises: ``reset_needed`` → ``gymnasium.error.ResetNeeded``,
    ``bad_request`` → ``ValueError`` (as the in-process env), anything else
    :class:`~residual_quad.remote.protocol.RemoteError`. A lost connection is a
    ``ConnectionError``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        address: str = f"127.0.0.1:{DEFAULT_PORT}",
        token: str | None = None,
        timeout_s: float = 30.0,
        seed: int | None = None,
        render_mode: str | None = None,
        **scenario: Any,
    ):
        if render_mode is not None:
            raise ValueError("a remote plant does not render; use render_mode=None")
        if seed is not None:
            integer("seed", seed, low=0)
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
        if token is not None and not isinstance(token, str):
            raise ValueError(f"token must be a string or None, got {type(token).__name__}")
        wire = wire_scenario(scenario)
        host, port = parse_address(address)
        self.address = f"{host}:{port}"
        self._seed = seed
        self._seq = 0
        self._frames = FrameReader(MAX_MESSAGE_BYTES_LIMIT)
        try:
            self._sock: socket.socket | None = socket.create_connection(
                (host, port), timeout=timeout_s
            )
        except OSError as exc:
            raise ConnectionError(
                f"cannot reach a simulation server at {self.address}: {exc}"
            ) from None
        self.timeout_s = float(timeout_s)
        try:
            kernel_timeouts(self._sock, self.timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            description = self._call({"op": "hello", "token": token, "client": "residual_quad"})
            if wire:
                description = self._call({"op": "configure", "scenario": wire})
        except BaseException:
            self.close()
            raise
        self.description = description
        self.action_mode: str = description["action_mode"]
        self.control_dt: float = description["control_dt"]
        self.max_steps: int = description["max_steps"]
        self.realtime: bool = description["realtime"]
        self.clock: dict[str, int] = {}  # realtime counters of the last step
        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        low = np.array(description["obs_low"], dtype=np.float64)
        high = np.array(description["obs_high"], dtype=np.float64)
        self.observation_space = spaces.Box(low, high, shape=low.shape, dtype=np.float64)

    @property
    def nominal(self) -> Airframe:
        """What a controller may know: the nominal airframe."""
        return Airframe()

    # ------------------------------------------------------------------ wire
    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._sock is None:
            raise ConnectionError("the remote env is closed")
        self._seq += 1
        message = {"v": PROTOCOL_VERSION, "seq": self._seq, **request}
        self._sock.sendall(frame(message))
        reply = self._receive(self._sock)
        unasked = reply.get("seq") is None and not reply.get("ok")  # e.g. a timeout notice
        if reply.get("seq") != self._seq and not unasked:
            raise ConnectionError(f"reply to seq {reply.get('seq')!r}, expected {self._seq}")
        if not reply.get("ok"):
            error = reply.get("error") or {}
            code, text = str(error.get("code")), str(error.get("message"))
            if code == "reset_needed":
                raise ResetNeeded(text)
            if code == "bad_request":
                raise ValueError(text)
            details = {k: v for k, v in error.items() if k not in ("code", "message")}
            raise RemoteError(code, text, details)
        return reply

    def _receive(self, sock: socket.socket) -> dict[str, Any]:
        """The next reply: one ``recv`` per reply when it arrives in one segment (loopback)."""
        data = b""
        while True:
            for kind, item in self._frames.feed(data):
                if kind == "too_large":
                    raise ConnectionError(f"a reply of {item} bytes is beyond the limit")
                assert isinstance(item, bytes)
                message, _ = decode_payload(item)
                return message
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:  # the kernel receive timeout
                raise TimeoutError(f"no reply within {self.timeout_s:g} s") from None
            if not data:
                raise ConnectionError("the server closed the connection")

    def _result(self, reply: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        obs = np.array(reply["obs"], dtype=np.float64)
        info = dict(reply["info"])
        truth = reply["truth"]
        for key in TRUTH_KEYS:
            info[key] = np.array(truth[key]) if key in VECTOR_TRUTH else truth[key]
        if "clock" in reply:
            self.clock = info["clock"] = reply["clock"]
        return obs, info

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            integer("seed", seed, low=0)
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        super().reset(seed=seed)
        if options is not None and isinstance(options, dict):
            options = {k: np.asarray(v).tolist() for k, v in options.items()}
        return self._result(self._call({"op": "reset", "seed": seed, "options": options}))

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reply = self._call({"op": "step", "action": clip_action(action)})
        obs, info = self._result(reply)
        return obs, reply["reward"], reply["terminated"], reply["truncated"], info

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            self._seq += 1
            sock.sendall(frame({"v": PROTOCOL_VERSION, "seq": self._seq, "op": "close"}))
            self._receive(sock)
        except (OSError, ProtocolError):
            pass  # the server is gone already: nothing to free
        finally:
            sock.close()
