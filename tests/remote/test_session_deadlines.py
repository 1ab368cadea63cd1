"""Nobody holds the plant hostage: a connection owns it only after a valid ``hello``, an
unfinished handshake is closed at its deadline whatever it trickles, and a silent or slow
controlling client is released at its idle deadline (loopback, short deadlines, bounded loops)."""

from __future__ import annotations

import socket
import threading
import time

import gymnasium as gym
import pytest
from remote_helpers import REPLY_TIMEOUT_S, RawClient, address, header, raw_client, served

from residual_quad.envs.registration import REMOTE_ENV_ID
from residual_quad.remote.protocol import RemoteError, frame
from residual_quad.remote.server import MAX_PENDING

HOVER = [0.0, 0.0, 0.0, 0.0]
TOKEN = "s3cret"
SLACK_S = 1.5  # s a deadline may be late on a loaded 2-core machine (never early)


def _ok(reply):
    assert reply["ok"], reply
    return reply


def _error(reply, code):
    assert not reply["ok"] and reply["error"]["code"] == code, reply
    return reply


def _fly(c: RawClient, token: str | None = None) -> None:
    """Take control and fly one step: the plant is this client's."""
    _ok(c.call("hello", token=token) if token else c.call("hello"))
    _ok(c.call("reset", seed=0))
    assert len(_ok(c.call("step", action=HOVER))["obs"]) == 36


class Trickler(threading.Thread):
    """Sends ``data`` one byte every ``period_s`` until the server closes the socket or ``stop``
    (at most ``len(data)`` bytes: the caller passes a frame it never completes)."""

    def __init__(self, sock: socket.socket, data: bytes, period_s: float = 0.05):
        super().__init__(daemon=True)
        self.sock, self.data, self.period_s = sock, data, period_s
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        for byte in self.data:
            if self.stop.wait(self.period_s):
                return
            try:
                self.sock.send(bytes([byte]))
            except OSError:
                return
            self.sent += 1


def _unfinished(message: dict, missing: int = 1) -> bytes:
    """A frame of ``message`` without its last ``missing`` bytes: it never completes."""
    data = frame(message)
    return data[:-missing]


def _expect_timeout_notice(c: RawClient, opened: float, deadline_s: float, fragment: str) -> None:
    """The server closes ``c`` with a ``timeout`` notice no earlier than ``deadline_s`` after
    ``opened`` and within the slack after it."""
    notice = c.closing_notice()
    elapsed = time.monotonic() - opened
    assert notice is not None, "closed without a notice"
    _error(notice, "timeout")
    assert notice["seq"] is None and fragment in notice["error"]["message"], notice
    assert deadline_s - 0.05 <= elapsed <= deadline_s + SLACK_S, elapsed
    assert c.closed_by_server()


def test_a_slow_loris_holds_nothing_and_is_closed_at_the_handshake_deadline():
    with served(token=TOKEN, handshake_timeout_s=1.5) as server:
        loris = RawClient(server)
        opened = time.monotonic()
        # a hello frame (without the token) trickled a byte at a time, never completed
        hello = {"v": 1, "seq": 1, "op": "hello", "client": "loris" * 10}  # ≈ 3 s of trickle
        trickle = Trickler(loris.sock, _unfinished(hello), 0.05)
        trickle.start()
        try:
            time.sleep(0.2)  # the loris is well under way
            with raw_client(server) as authorized:  # gets the plant at once
                _fly(authorized, TOKEN)
                _ok(authorized.call("close"))
            assert trickle.is_alive() and trickle.sent >= 2  # still trickling meanwhile
            _expect_timeout_notice(loris, opened, 1.5, "no successful hello within 1.5 s")
            assert trickle.sent < len(trickle.data)  # it never completed its frame
        finally:
            trickle.stop.set()
            trickle.join(REPLY_TIMEOUT_S)
            loris.close()
        assert server.counts["timeouts"] == 1


def test_a_connection_that_never_says_hello_holds_nothing():
    with served(handshake_timeout_s=0.6) as server:
        idle = RawClient(server)
        opened = time.monotonic()
        try:
            with raw_client(server) as other:  # the idle one came first; it owns nothing
                _fly(other)
                _expect_timeout_notice(idle, opened, 0.6, "no successful hello")
                assert _ok(other.call("step", action=HOVER))["info"]["t"] > 0.0  # still flying
        finally:
            idle.close()


def test_requests_before_hello_do_not_extend_the_handshake_deadline():
    with served(handshake_timeout_s=1.0) as server, raw_client(server) as c:
        opened = time.monotonic()
        for _ in range(5):  # complete frames, but no hello: the deadline stays where it was
            _error(c.call("reset", seed=0), "out_of_order")
            time.sleep(0.1)
            if time.monotonic() - opened > 0.6:  # keep clear of the deadline on a busy machine
                break
        _expect_timeout_notice(c, opened, 1.0, "no successful hello")


def test_a_wrong_token_never_gets_the_plant():
    with served(token=TOKEN) as server:
        with raw_client(server) as wrong, raw_client(server) as right:
            _error(wrong.call("reset", seed=0), "out_of_order")  # no plant before hello
            _fly(right, TOKEN)  # the wrong-token connection came first; it holds nothing
            reply = _error(wrong.call("hello", token="guess"), "unauthorized")
            assert "retry_after_s" not in reply["error"]  # tells an intruder nothing
            assert wrong.closed_by_server()
        with raw_client(server) as nothing:
            _error(nothing.call("hello"), "unauthorized")  # no token: refused, not busy
            assert nothing.closed_by_server()
        with raw_client(server) as right:
            _fly(right, TOKEN)
        assert server.counts["refused"] == 0  # none of them was ever in line for the plant


def test_a_slow_controller_is_released_at_its_idle_deadline_and_the_waiting_client_takes_over():
    with served(token=TOKEN, client_timeout_s=1.2) as server:
        holder = RawClient(server)
        try:
            _fly(holder, TOKEN)
            last_request = time.monotonic()
            # the holder now trickles a step frame it never completes: partial bytes are no
            # request, so they do not keep the plant
            step = _unfinished({"v": 1, "seq": holder.seq + 1, "op": "step", "action": HOVER})
            trickle = Trickler(holder.sock, step, 0.05)
            trickle.start()
            with raw_client(server) as waiting:
                busy = _error(waiting.call("hello", token=TOKEN), "busy")
                retry = busy["error"]["retry_after_s"]
                assert 0.0 < retry <= 1.2 and "one client at a time" in busy["error"]["message"]
                assert waiting.closed_by_server()
            time.sleep(retry)
            got = None
            for _ in range(100):  # retry until the plant is free; bounded by count and time
                with raw_client(server) as waiting:
                    reply = waiting.call("hello", token=TOKEN)
                    if reply["ok"]:
                        got = time.monotonic()
                        assert _ok(waiting.call("reset", seed=0))["info"]["t"] == 0.0
                        _ok(waiting.call("step", action=HOVER))
                        break
                    _error(reply, "busy")
                if time.monotonic() - last_request > 1.2 + SLACK_S:
                    break
                time.sleep(0.05)
            assert got is not None, "the waiting client never got the plant"
            assert 1.2 - 0.05 <= got - last_request <= 1.2 + SLACK_S
            _expect_timeout_notice(holder, last_request, 1.2, "the plant is released")
            trickle.stop.set()
            trickle.join(REPLY_TIMEOUT_S)
        finally:
            holder.close()


def test_an_active_controller_keeps_the_plant_and_others_are_busy():
    with served(client_timeout_s=1.0) as server, raw_client(server) as holder:
        _fly(holder)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.2:  # well past two idle deadlines, requesting often
            _ok(holder.call("step", action=HOVER))
            with raw_client(server) as other:
                busy = _error(other.call("hello"), "busy")
                assert 0.0 < busy["error"]["retry_after_s"] <= 1.0
            time.sleep(0.1)
        _ok(holder.call("step", action=HOVER))


def test_the_timeout_notice_reaches_the_gymnasium_client_as_a_remote_error():
    with served(client_timeout_s=1.0) as server:
        env = gym.make(REMOTE_ENV_ID, address=address(server))
        try:
            env.reset(seed=0)
            time.sleep(1.5)
            with pytest.raises(RemoteError, match="timeout.*released"):
                env.step(HOVER)
        finally:
            env.close()
        with raw_client(server) as busy_check:  # the plant is free again
            _ok(busy_check.call("hello"))


def test_a_flood_of_connections_without_hello_cannot_lock_out_a_client():
    with served(handshake_timeout_s=30.0) as server:
        flood = [RawClient(server) for _ in range(MAX_PENDING + 2)]
        try:
            for c in flood:  # each is accepted before the next connects
                c.send_raw(header(100))  # a frame it never completes
            assert flood[0].closed_by_server()  # the oldest made room (long before 30 s)
            with raw_client(server) as c:
                _fly(c)
            alive = flood[-1]
            alive.sock.settimeout(0.2)
            assert not alive.closed_by_server()  # a recent one is still there
        finally:
            for c in flood:
                c.close()


def test_a_client_that_does_not_read_its_replies_cannot_stall_the_plant():
    """A connection without a handshake that floods requests and never reads its replies is
    closed when its socket buffer fills, instead of making the server wait for it."""
    with served() as server, raw_client(server) as holder:
        _fly(holder)
        hog = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: tiny window
        hog.connect(server.address)
        hog.settimeout(REPLY_TIMEOUT_S)
        try:
            t0 = time.monotonic()
            junk = header(0) * 20_000  # each is a too_large error reply of ≈ 100 bytes
            try:
                for _ in range(10):  # up to 20 MB of replies; the hog is closed long before
                    hog.sendall(junk)
            except OSError:
                pass  # closed by the server
            for _ in range(20):
                _ok(holder.call("step", action=HOVER))
            elapsed = time.monotonic() - t0
            assert elapsed < 3.0, elapsed  # the server never waited for the hog (it used to 5 s)
        finally:
            hog.close()


def test_cli_defaults_are_the_server_defaults():
    import argparse

    from residual_quad.commands import serve
    from residual_quad.remote.config import ServerConfig

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    args = parser.parse_args(["serve"])
    config = ServerConfig()
    assert args.handshake_timeout == config.handshake_timeout_s == 5.0
    assert args.client_timeout == config.client_timeout_s == 30.0
