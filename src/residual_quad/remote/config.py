"""Settings of the simulation server (:class:`ServerConfig`), checked when they are built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from residual_quad.remote.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PORT,
    MAX_MESSAGE_BYTES_LIMIT,
    ProtocolError,
    is_text,
    parse_scenario,
)

DEFAULT_HANDSHAKE_TIMEOUT_S = 5.0  # s from accept to a successful hello
DEFAULT_CLIENT_TIMEOUT_S = 30.0  # s the controlling client may go without a complete request


@dataclass(frozen=True)
class ServerConfig:
    """Settings of a :class:`SimServer`.

    ``scenario`` holds wire scenario keys (:data:`~.protocol.SCENARIO_KEYS`); a client's
    ``configure`` overrides them for its session. ``token``: a shared secret the client's
    ``hello`` must present (``None``: no token). ``max_message_bytes``: largest frame accepted.
    ``handshake_timeout_s``: a connection without a successful ``hello`` this long after it was
    accepted is closed, whatever it sends. ``client_timeout_s``: the controlling client is
    released (and disconnected) this long after its last complete request.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port (see SimServer.address)
    scenario: Mapping[str, Any] = field(default_factory=dict)
    realtime: bool = False
    token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # bytes
    client_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S  # s
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S  # s

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"host must be a non-empty string, got {self.host!r}")
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port:
            raise ValueError(f"port must be an integer in [0, 65535], got {self.port!r}")
        if self.port > 65535:
            raise ValueError(f"port must be an integer in [0, 65535], got {self.port!r}")
        if not isinstance(self.realtime, bool):
            raise ValueError(f"realtime must be True or False, got {self.realtime!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ValueError("token must be a non-empty string or None")
        if self.token is not None and not is_text(self.token):
            raise ValueError("token must be UTF-8 text (it holds a lone surrogate)")
        size = self.max_message_bytes
        if not isinstance(size, int) or isinstance(size, bool) or not 64 <= size:
            raise ValueError(f"max_message_bytes must be an integer >= 64, got {size!r}")
        if size > MAX_MESSAGE_BYTES_LIMIT:
            raise ValueError(
                f"max_message_bytes must be <= {MAX_MESSAGE_BYTES_LIMIT}, got {size!r}"
            )
        for name in ("client_timeout_s", "handshake_timeout_s"):
            timeout = getattr(self, name)
            if not isinstance(timeout, int | float) or isinstance(timeout, bool):
                raise ValueError(f"{name} must be a number of seconds, got {timeout!r}")
            if not (math.isfinite(timeout) and timeout > 0):
                raise ValueError(f"{name} must be finite and > 0 s, got {timeout!r}")
        try:
            parse_scenario(dict(self.scenario))
        except ProtocolError as exc:
            raise ValueError(exc.message) from None
