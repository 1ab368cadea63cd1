"""The simulation server: one ``ResidualQuad-v0`` served over TCP (``rquad serve``).

One thread, one ``selectors`` loop: it accepts connections, reads frames (:mod:`.protocol`),
steps the plant and, with ``realtime``, advances the plant on the wall clock.

Sessions: a connection holds nothing until its ``hello`` succeeds (with the right token when the
server has one); that makes it the controlling client, which owns the plant. A valid ``hello``
while another client controls the plant gets ``busy`` (with ``retry_after_s``) and is closed. Two
deadlines keep the plant from being held hostage, and neither is moved by the bytes of a partial
frame: a connection must complete its handshake within ``handshake_timeout_s`` of being accepted
(whatever it trickles), and the controlling client is released ``client_timeout_s`` after its
last *complete* request. Either way the server sends a ``timeout`` error (seq null) when the
socket takes it without waiting, then closes the connection. At most :data:`MAX_PENDING`
connections wait for their handshake; a new one closes the oldest. Replies to a connection
without a handshake never wait for it to read (one that does not read is closed), so such a
connection cannot stall the loop either. Any bad request gets an error reply and the server keeps
serving; an unexpected exception while handling a request is logged with its traceback and
answered with ``internal``.

Lock-step (default): each ``step`` request advances the plant one control period and is answered
at once, so a remote episode is the in-process episode bit for bit.

Real time (``realtime=True``): after a ``reset`` the plant advances one control period every
``1/control_hz`` seconds of wall clock. A ``step`` request sets the command for the next period
boundary and is answered there with the new state; a period without a fresh command applies the
last one again (before the first command: the zero action) and counts as ``late``. A period
executed more than one period behind its schedule counts as an ``overrun``.
"""

from __future__ import annotations

import hmac
import logging
import selectors
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from residual_quad.envs.observation import FIELDS, OBS_DIM, ObsLayout
from residual_quad.envs.registration import ENV_ID
from residual_quad.remote.config import ServerConfig
from residual_quad.remote.protocol import (
    PROTOCOL_VERSION,
    TRUTH_KEYS,
    FrameReader,
    ProtocolError,
    Request,
    decode_payload,
    env_kwargs,
    error_reply,
    frame,
    is_text,
    kernel_timeouts,
    parse_action,
    parse_request,
    parse_scenario,
    parse_seed,
    wire_truth,
)

log = logging.getLogger(__name__)

_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)  # a send that fails rather than waits

MAX_PENDING = 8  # connections without a completed handshake; a new one closes the oldest
SEND_TIMEOUT_S = 5.0  # s a reply may wait for a controlling client that does not read
POLL_S = 0.5  # s between checks of the stop flag when nothing happens

StepHook = Callable[[int, np.ndarray, dict[str, Any], list[float] | None], None]
"""``hook(stamp_ns, obs, info, action)`` called after every reset (``action=None``) and step."""


def _same_token(given: Any, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time. Anything but a string that is
    UTF-8 text is not: a JSON string may hold a lone surrogate (``"\\ud800"``), which no token
    equals."""
    if not isinstance(given, str) or not is_text(given):
        return False
    return hmac.compare_digest(given.encode(), token.encode())


def _unusable(exc: ArithmeticError) -> ProtocolError:
    """The ``bad_request`` for a value that passed the plant's checks but overflows in it (a gust
    correlation time near the largest float, say): the client's value, not a server bug. The log
    notes the gap in the plant's checks in one line, without a traceback."""
    what = f"{type(exc).__name__}: {exc}"
    log.warning("a request's value passed the plant's checks but overflows in it (%s)", what)
    return ProtocolError(
        "bad_request", f"a value of the request is beyond what the plant can fly ({what})"
    )


def make_env(scenario: Mapping[str, Any]) -> Any:
    """The unwrapped ``ResidualQuad-v0`` of a wire scenario (as :func:`run_episode` makes it)."""
    return gym.make(ENV_ID, disable_env_checker=True, **env_kwargs(scenario)).unwrapped


def describe(env: Any, scenario: Mapping[str, Any], realtime: bool) -> dict[str, Any]:
    """What a client needs to know about the served plant (the ``hello``/``configure`` reply)."""
    layout = {}
    for name in FIELDS:
        where = getattr(ObsLayout, name)
        layout[name] = [where.start, where.stop] if isinstance(where, slice) else [where, where + 1]
    low, high = env.observation_space.low, env.observation_space.high
    return {
        "protocol": PROTOCOL_VERSION,
        "env": ENV_ID,
        "scenario": dict(scenario),
        "action_mode": env.action_mode,
        "control_hz": 1.0 / env.control_dt,
        "control_dt": env.control_dt,
        "max_steps": env.max_steps,
        "obs_dim": OBS_DIM,
        "obs_layout": layout,
        "obs_low": low.tolist(),
        "obs_high": high.tolist(),
        "realtime": realtime,
    }


def result_message(
    obs: np.ndarray, info: Mapping[str, Any], reward: float | None = None, ended=(False, False)
) -> dict[str, Any]:
    """The body of a ``reset`` (no ``reward``) or ``step`` reply: observation, the non-truth
    ``info`` entries, and the ground truth apart under ``truth``."""
    body: dict[str, Any] = {
        "obs": obs.tolist(),
        "info": {
            "t": float(info["t"]),  # s
            "position_error": float(info["position_error"]),  # m
            "reward_terms": {str(k): float(v) for k, v in info["reward_terms"].items()},
            "diverged": bool(info["diverged"]),
            "termination": info["termination"],
        },
        # units and frames: docs/remote.md (3-vectors in world or body axes, 4-vectors per rotor)
        "truth": {key: wire_truth(info[key]) for key in TRUTH_KEYS},
    }
    if reward is not None:
        body["reward"] = float(reward)
        body["terminated"], body["truncated"] = bool(ended[0]), bool(ended[1])
    return body


class _Session:
    """One connection: its framing, the protocol state and, for the controller, the plant.

    ``controller`` turns true with a successful ``hello`` (the handshake), never before."""

    def __init__(self, sock: socket.socket, peer: Any, max_bytes: int):
        self.sock = sock
        self.peer = peer
        self.reader = FrameReader(max_bytes)
        self.controller = False
        self.encoding = "msgpack"  # of the last readable request (for unreadable ones)
        self.last_seq = -1
        self.hello = False
        self.closed = False
        self.opened = time.monotonic()  # s, monotonic: the handshake deadline counts from here
        self.last_request = self.opened  # s, monotonic: the last complete frame (idle deadline)
        self.env: Any = None
        self.scenario: dict[str, Any] = {}
        self.running = False  # an episode is under way (reset done, not ended)
        # real time
        self.next_tick: float | None = None  # perf_counter time of the next period boundary
        self.pending: tuple[int, list[float], str] | None = None  # (seq, action, encoding)
        self.held = [0.0, 0.0, 0.0, 0.0]
        self.undelivered: dict[str, Any] | None = None  # an episode end no step has seen yet
        self.periods = self.late = self.overruns = 0


class SimServer:
    """Serve one ``ResidualQuad-v0`` over TCP (see the module docstring).

    The listening socket is bound at construction (``address`` has the real port when ``port``
    was 0); :meth:`serve_forever` runs the loop until :meth:`stop` (callable from another thread
    or a signal handler). ``hook`` receives every reset and step (the flight recorder and the
    live view).
    """

    def __init__(self, config: ServerConfig, hook: StepHook | None = None):
        self.config = config
        self.hook = hook
        self._base = parse_scenario(dict(config.scenario))
        make_env(self._base).close()  # a bad base scenario fails here, not at the first client
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self._listener = socket.create_server((config.host, config.port), family=family)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._sessions: list[_Session] = []
        self._stopping = False
        self._clock_ns = 0  # flight clock of the hook: simulated time over all episodes, ns
        self._episode_offset_ns = 0
        self.counts = {"connections": 0, "refused": 0, "errors": 0, "requests": 0, "timeouts": 0}

    # ------------------------------------------------------------------ lifecycle
    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the server listens on."""
        host, port = self._listener.getsockname()[:2]
        return host, port

    def stop(self) -> None:
        """Ask the loop to end (thread- and signal-safe)."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # full or closed: the loop polls the flag anyway

    def serve_forever(self) -> None:
        """Run until :meth:`stop`; then close every connection and the listening socket."""
        try:
            while not self._stopping:
                events = self._selector.select(self._timeout())
                for key, _ in events:
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._on_readable(key.data)
                self._on_time()
        finally:
            self.close()

    def close(self) -> None:
        """Close every connection, the plant and the sockets (idempotent)."""
        for session in list(self._sessions):
            self._end(session, "server shutting down")
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._selector.close()

    # ------------------------------------------------------------------ loop pieces
    def _deadline(self, session: _Session) -> float:
        """Monotonic time (s) at which ``session`` is closed: the controller's idle deadline from
        its last complete request, anyone else's handshake deadline from its accept."""
        if session.controller:
            return session.last_request + self.config.client_timeout_s
        return session.opened + self.config.handshake_timeout_s

    def _timeout(self) -> float:
        now = time.monotonic()
        deadline = now + POLL_S
        for s in self._sessions:
            deadline = min(deadline, self._deadline(s))
        timeout = deadline - now
        ctrl = self._controller()
        if ctrl is not None and ctrl.next_tick is not None:
            timeout = min(timeout, ctrl.next_tick - time.perf_counter())
        return max(timeout, 0.0)

    def _controller(self) -> _Session | None:
        for s in self._sessions:
            if s.controller:
                return s
        return None

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        try:
            sock, peer = self._listener.accept()
        except OSError:
            return
        self.counts["connections"] += 1
        pending = [s for s in self._sessions if not s.controller]
        if len(pending) >= MAX_PENDING:  # the oldest goes: a flood cannot lock newcomers out
            self._end(pending[0], f"closed: more than {MAX_PENDING} connections without hello")
            self.counts["refused"] += 1
        try:  # the send timeout bounds sendall; recv runs only when data is ready
            kernel_timeouts(sock, SEND_TIMEOUT_S, send_only=True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        session = _Session(sock, peer, self.config.max_message_bytes)
        self._sessions.append(session)
        self._selector.register(sock, selectors.EVENT_READ, session)
        log.info("client %s connected", peer)

    def _end(self, session: _Session, why: str) -> None:
        if session.closed:
            return
        session.closed = True
        log.info("client %s: %s", session.peer, why)
        try:
            self._selector.unregister(session.sock)
        except (KeyError, ValueError):
            pass
        session.sock.close()
        if session.env is not None:
            session.env.close()
            session.env = None
        self._sessions.remove(session)

    def _on_time(self) -> None:
        mono = time.monotonic()
        for s in list(self._sessions):
            if mono >= self._deadline(s):
                self._time_out(s)
        ctrl = self._controller()
        if ctrl is not None and ctrl.next_tick is not None:
            now = time.perf_counter()
            while ctrl.next_tick is not None and now >= ctrl.next_tick and not ctrl.closed:
                self._tick(ctrl, now)

    def _on_readable(self, session: _Session) -> None:
        try:
            data = session.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError as exc:
            self._end(session, f"connection error: {exc}")
            return
        if not data:
            self._end(session, "disconnected")
            return
        for kind, item in session.reader.feed(data):  # partial frames move no deadline
            if kind == "too_large":
                self._error(
                    session,
                    None,
                    "too_large",
                    f"declared {item} bytes; the maximum is {self.config.max_message_bytes} "
                    "(the frame's bytes are skipped)",
                )
            else:
                assert isinstance(item, bytes)
                session.last_request = time.monotonic()
                self._on_frame(session, item)
            if session.closed:
                return

    # ------------------------------------------------------------------ requests
    def _time_out(self, session: _Session) -> None:
        """Close ``session`` at its deadline, telling it why when its socket takes the notice."""
        if session.controller:
            limit = self.config.client_timeout_s
            why = f"no complete request for {limit:g} s: the plant is released"
        else:
            limit = self.config.handshake_timeout_s
            why = f"no successful hello within {limit:g} s of connecting"
        self.counts["timeouts"] += 1
        notice = frame(error_reply(None, "timeout", why), session.encoding)
        try:
            session.sock.send(notice, _DONTWAIT)  # never wait for a client that does not read
        except OSError:
            pass
        self._end(session, f"timeout: {why}")

    def _send(self, session: _Session, message: Mapping[str, Any], encoding: str) -> None:
        if session.closed:
            return
        data = frame(message, encoding)
        try:
            if session.controller:  # bounded by the kernel send timeout
                session.sock.sendall(data)
            elif session.sock.send(data, _DONTWAIT) < len(data):
                self._end(session, "reply not delivered: the client does not read its replies")
        except OSError as exc:  # includes the send timeout and a full buffer without hello
            self._end(session, f"reply not delivered: {exc}")

    def _error(self, session: _Session, seq: Any, code: str, message: str, **details: Any) -> None:
        self.counts["errors"] += 1
        self._send(session, error_reply(seq, code, message, **details), session.encoding)

    def _on_frame(self, session: _Session, payload: bytes) -> None:
        self.counts["requests"] += 1
        if payload[:1] == b"{":
            session.encoding = "json"
        try:
            message, session.encoding = decode_payload(payload)
        except ProtocolError as exc:
            self._error(session, None, exc.code, exc.message)
            return
        seq = message.get("seq")
        try:
            request = parse_request(message)
            if request.seq <= session.last_seq:
                raise ProtocolError(
                    "out_of_order",
                    f"seq {request.seq} after {session.last_seq}: seq must increase",
                )
            session.last_seq = request.seq
            reply = self._dispatch(session, request)
        except ProtocolError as exc:
            self._error(session, seq, exc.code, exc.message, **exc.details)
            if exc.code in ("unauthorized", "busy"):
                self._end(session, exc.code)
                self.counts["refused"] += exc.code == "busy"
            return
        except Exception:  # a bug: keep serving, say so, log the traceback
            log.error("request %r failed:\n%s", message.get("op"), traceback.format_exc())
            self._error(session, seq, "internal", "the server failed on this request (see its log)")
            return
        if reply is not None:
            reply = {"v": PROTOCOL_VERSION, "seq": request.seq, "ok": True, **reply}
            self._send(session, reply, session.encoding)
        if request.op == "close":
            self._end(session, "closed by the client")

    def _dispatch(self, session: _Session, request: Request) -> dict[str, Any] | None:
        op, args = request.op, request.args
        if op == "hello":
            return self._hello(session, args)
        if not session.hello:
            raise ProtocolError("out_of_order", f"{op} before hello: send hello first")
        if op == "configure":
            self._configure(session, parse_scenario(args.get("scenario")))
            return describe(session.env, session.scenario, self.config.realtime)
        if op == "reset":
            return self._reset(session, args)
        if op == "step":
            return self._step(session, request.seq, parse_action(args.get("action")))
        if op == "close":
            return {"clock": self._clock(session)} if self.config.realtime else {}
        raise ProtocolError("unknown_op", op)  # unreachable: parse_request checked it

    def _hello(self, session: _Session, args: Mapping[str, Any]) -> dict[str, Any]:
        if session.hello:
            raise ProtocolError("out_of_order", "hello was already done on this connection")
        if self.config.token is not None and not _same_token(args.get("token"), self.config.token):
            raise ProtocolError("unauthorized", "wrong or missing token")
        holder = self._controller()
        if holder is not None:
            wait = max(self._deadline(holder) - time.monotonic(), 0.0)  # s
            raise ProtocolError(
                "busy",
                "another client controls the plant; one client at a time (it is released "
                f"{self.config.client_timeout_s:g} s after its last request: try again in "
                f"{wait:.1f} s or later)",
                retry_after_s=round(wait, 3),
            )
        self._configure(session, {})
        session.hello = session.controller = True
        return describe(session.env, session.scenario, self.config.realtime)

    def _configure(self, session: _Session, overrides: Mapping[str, Any]) -> None:
        scenario = {**self._base, **overrides}
        try:
            env = make_env(scenario)
        except (ValueError, TypeError) as exc:
            raise ProtocolError("bad_request", f"bad scenario: {exc}") from None
        except ArithmeticError as exc:
            raise _unusable(exc) from None
        if session.env is not None:
            session.env.close()
        session.env, session.scenario = env, scenario
        session.running = False
        session.next_tick = session.pending = session.undelivered = None

    def _reset(self, session: _Session, args: Mapping[str, Any]) -> dict[str, Any]:
        seed = parse_seed(args.get("seed"))
        options = args.get("options")
        if options is not None and not isinstance(options, dict):
            raise ProtocolError("bad_request", f"options must be a map or null, got {options!r}")
        if args.get("scenario") is not None:
            self._configure(session, parse_scenario(args["scenario"]))
        try:
            obs, info = session.env.reset(seed=seed, options=options)
        except (ValueError, TypeError) as exc:
            raise ProtocolError("bad_request", str(exc)) from None
        except ArithmeticError as exc:
            raise _unusable(exc) from None
        session.running = True
        session.pending = session.undelivered = None
        session.held = [0.0, 0.0, 0.0, 0.0]
        session.periods = session.late = session.overruns = 0
        if self.config.realtime:
            session.next_tick = time.perf_counter() + session.env.control_dt
        self._episode_offset_ns = self._clock_ns + (1_000_000 if self._clock_ns else 0)
        self._publish(obs, info, None)
        return result_message(obs, info)

    def _step(self, session: _Session, seq: int, action: list[float]) -> dict[str, Any] | None:
        if self.config.realtime:
            if session.undelivered is not None:  # the episode ended in a period with no command
                body, session.undelivered = session.undelivered, None
                return body
            if not session.running:
                raise ProtocolError("reset_needed", "no episode under way: send reset first")
            if session.pending is not None:
                raise ProtocolError("out_of_order", "a step is already waiting for its period")
            session.pending = (seq, action, session.encoding)
            return None
        try:
            obs, reward, terminated, truncated, info = session.env.step(action)
        except ResetNeeded:
            raise ProtocolError(
                "reset_needed", "the episode ended or never started: send reset first"
            ) from None
        except ValueError as exc:
            raise ProtocolError("bad_request", str(exc)) from None
        self._publish(obs, info, action)
        return result_message(obs, info, reward, (terminated, truncated))

    def _tick(self, session: _Session, now: float) -> None:
        """One real-time period: the fresh command or the held one, then the pending reply."""
        assert session.next_tick is not None
        dt = session.env.control_dt
        if now - session.next_tick > dt:
            session.overruns += 1
        pending, session.pending = session.pending, None
        if pending is None:
            session.late += 1
            action = session.held
        else:
            action = pending[1]
        session.periods += 1
        try:
            obs, reward, terminated, truncated, info = session.env.step(action)  # checked action
            session.held = action
            self._publish(obs, info, action)
        except Exception:  # a bug or a failing recorder: end the episode, keep serving
            log.error("real-time period failed:\n%s", traceback.format_exc())
            session.running, session.next_tick = False, None
            if pending is not None:
                self._error(session, pending[0], "internal", "the period failed (see its log)")
            return
        body = result_message(obs, info, reward, (terminated, truncated))
        body["clock"] = self._clock(session)
        if terminated or truncated:
            session.running = False
            session.next_tick = None
        else:
            session.next_tick += dt
        if pending is not None:
            reply = {"v": PROTOCOL_VERSION, "seq": pending[0], "ok": True, **body}
            self._send(session, reply, pending[2])
        elif not session.running:
            session.undelivered = body

    @staticmethod
    def _clock(session: _Session) -> dict[str, Any]:
        return {"periods": session.periods, "late": session.late, "overruns": session.overruns}

    def _publish(self, obs: np.ndarray, info: Mapping[str, Any], action: Any) -> None:
        self._clock_ns = self._episode_offset_ns + int(round(info["t"] * 1e9))
        if self.hook is not None:
            self.hook(self._clock_ns, obs, dict(info), action)
