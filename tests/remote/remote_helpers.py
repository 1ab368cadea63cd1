"""A loopback server in a background thread or a child process (``rquad serve``) and a raw
protocol client, for the remote tests."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from residual_quad.remote.config import ServerConfig
from residual_quad.remote.protocol import HEADER, PROTOCOL_VERSION, frame, recv_message
from residual_quad.remote.server import SimServer

LOOPBACK = "127.0.0.1"
REPLY_TIMEOUT_S = 10.0  # s: no reply in a test may take longer
START_TIMEOUT_S = 60.0  # s for ``rquad serve`` to print its address (imports on a busy machine)
STOP_TIMEOUT_S = 20.0  # s for ``rquad serve`` to exit after a signal
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def served(hook: Any = None, **config: Any) -> Iterator[SimServer]:
    """A :class:`SimServer` on a free loopback port, serving in a thread, stopped in ``finally``."""
    config.setdefault("host", LOOPBACK)
    config.setdefault("port", 0)
    server = SimServer(ServerConfig(**config), hook=hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(REPLY_TIMEOUT_S)
        assert not thread.is_alive(), "the server did not stop"


class ServeProcess:
    """``rquad serve`` running in a child process on a free loopback port."""

    def __init__(self, proc: subprocess.Popen, address: tuple[str, int], first_line: str):
        self.proc = proc
        self.address = address  # (host, port), as SimServer.address
        self.first_line = first_line

    def stop(self, sig: int) -> tuple[int, str, str]:
        """Send ``sig``; the exit code, stdout and stderr once it has exited."""
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=STOP_TIMEOUT_S)
        return self.proc.returncode, out, err


@contextlib.contextmanager
def serve_process(*argv: str) -> Iterator[ServeProcess]:
    """``rquad serve --host 127.0.0.1 --port 0 argv`` in a child process, killed in ``finally``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "residual_quad.cli", "serve", "--host", LOOPBACK, "--port", "0"]
        + list(argv),
        cwd=ROOT,
        env={**os.environ, "MUJOCO_GL": "egl", "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(START_TIMEOUT_S), "rquad serve printed nothing"
        line = proc.stdout.readline()
        match = re.search(r"on (127\.0\.0\.1):(\d+)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield ServeProcess(proc, (match.group(1), int(match.group(2))), line)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(STOP_TIMEOUT_S)
        proc.stdout.close()
        proc.stderr.close()


def address(server: SimServer) -> str:
    host, port = server.address
    return f"{host}:{port}"


class RawClient:
    """A protocol client with no checks of its own: it sends what it is told."""

    def __init__(self, server: SimServer | ServeProcess, encoding: str = "msgpack"):
        self.sock = socket.create_connection(server.address, timeout=REPLY_TIMEOUT_S)
        self.encoding = encoding
        self.seq = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(frame(message, self.encoding))

    def recv(self) -> dict[str, Any]:
        return recv_message(self.sock)

    def call(self, op: str, seq: int | None = None, **args: Any) -> dict[str, Any]:
        """Send one request (the next seq unless given) and return its reply."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        self.send({"v": PROTOCOL_VERSION, "seq": seq, "op": op, **args})
        return self.recv()

    def closed_by_server(self) -> bool:
        """Whether the server closes this connection within the socket timeout (reads and drops
        what comes before the end, e.g. a ``timeout`` notice; a timeout is ``False``)."""
        try:
            for _ in range(1000):  # bounded: a notice is one frame
                if self.sock.recv(1 << 16) == b"":
                    return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        return False

    def closing_notice(self) -> dict[str, Any] | None:
        """The unasked message the server sends before it closes (``None`` when it sends none)."""
        try:
            return recv_message(self.sock)
        except ConnectionError:
            return None

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def raw_client(server: SimServer | ServeProcess, encoding: str = "msgpack") -> Iterator[RawClient]:
    client = RawClient(server, encoding)
    try:
        yield client
    finally:
        client.close()


def header(length: int) -> bytes:
    return HEADER.pack(length)
