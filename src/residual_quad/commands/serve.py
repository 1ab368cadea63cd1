"""``rquad serve``: serve one ``ResidualQuad-v0`` over TCP (protocol: ``docs/remote.md``)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
from typing import Any

from residual_quad.commands.argtypes import episode_seconds, positive_int
from residual_quad.commands.eval import _payload, _wind
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.trajectories import TRAJECTORIES

TOKEN_ENV = "RQUAD_TOKEN"
"""Environment variable holding the shared token (kept off the command line, which other users
of the machine can read)."""


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be an integer in [0, 65535], got {text!r}")
    return port


def _positive(text: str) -> float:
    """A finite number > 0 (seconds, Hz)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scenario_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The wire scenario of the scenario options."""
    wind = args.wind if isinstance(args.wind, str) else list(args.wind)
    return {
        "payload": args.payload,
        "wind": wind,
        "trajectory": args.trajectory,
        "episode_s": args.episode_s,
        "control_hz": args.control_hz,
        "action_mode": args.action_mode,
        "ground_effect": not args.no_ground_effect,
    }


def _cmd(args: argparse.Namespace) -> int:
    from residual_quad.remote.config import ServerConfig
    from residual_quad.remote.protocol import is_text
    from residual_quad.remote.server import SimServer
    from residual_quad.remote.telemetry import FlightTelemetry, FoxgloveSink, McapSink

    logging.basicConfig(level=logging.INFO, format="rquad serve: %(message)s", stream=sys.stderr)
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not is_text(token):
        raise ValueError(f"{TOKEN_ENV} must be UTF-8 text (it holds undecodable bytes)")
    config = ServerConfig(
        host=args.host,
        port=args.port,
        scenario=scenario_from_args(args),
        realtime=args.realtime,
        token=token,
        max_message_bytes=args.max_message_bytes,
        client_timeout_s=args.client_timeout,
        handshake_timeout_s=args.handshake_timeout,
    )
    sinks: list[Any] = []
    telemetry = recorder = None
    try:
        if args.record:
            recorder = McapSink(args.record)
            sinks.append(recorder)
        if args.foxglove is not None:
            sinks.append(FoxgloveSink(host=args.host, port=args.foxglove))
        telemetry = FlightTelemetry(sinks) if sinks else None
        try:
            server = SimServer(config, hook=telemetry)
        except OSError as exc:  # a host that does not resolve or is not ours, a busy port
            raise ValueError(
                f"cannot listen on --host {args.host} --port {args.port}: {exc.strerror or exc}"
            ) from None
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    if not _is_loopback(args.host):  # only once it listens: a bad host is one error line
        print(
            f"rquad serve: warning: listening on {args.host}, reachable from other machines; "
            f"the protocol is not encrypted{'' if token else f' and no {TOKEN_ENV} is set'}",
            file=sys.stderr,
        )
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: server.stop())
    try:
        host, port = server.address
        mode = "real time" if args.realtime else "lock-step"
        live = "" if args.foxglove is None else f", live view ws://{args.host}:{sinks[-1].port}"
        log = "" if recorder is None else f", flight log {args.record}"
        print(f"serving ResidualQuad-v0 on {host}:{port} ({mode}{live}{log})", flush=True)
        server.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if telemetry is not None:
            telemetry.close()
    counts = server.counts
    log = "" if recorder is None else f"; flight log {args.record}: {recorder.stats()}"
    print(
        f"stopped: {counts['connections']} connection(s), {counts['requests']} request(s), "
        f"{counts['errors']} error reply(ies), {counts['refused']} refused, "
        f"{counts['timeouts']} timed out{log}",
        flush=True,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve ResidualQuad-v0 over TCP for remote controllers (see docs/remote.md)",
        description="Serve one ResidualQuad-v0 over TCP (protocol v1, docs/remote.md). "
        f"A shared token is read from ${TOKEN_ENV}. Stop with Ctrl-C or SIGTERM.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=41460, help="TCP port (0: any free port)")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="advance at the control rate on the wall clock (default: lock-step)",
    )
    p.add_argument(
        "--record",
        metavar="FILE.mcap",
        default=None,
        help="write a ROS2 MCAP log (a crash loses at most its last second of flight)",
    )
    p.add_argument(
        "--foxglove",
        metavar="PORT",
        type=_port,
        nargs="?",
        const=8765,
        default=None,
        help="publish a Foxglove live view on PORT (default 8765)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=positive_int,
        default=1 << 16,
        help="largest request accepted, bytes (default 65536)",
    )
    p.add_argument(
        "--client-timeout",
        type=_positive,
        default=30.0,
        help="release the plant and disconnect the controlling client when it sends no complete "
        "request for this long, s (default 30; partial frames do not count)",
    )
    p.add_argument(
        "--handshake-timeout",
        type=_positive,
        default=5.0,
        help="close a connection that has not completed hello (with the right token) this long "
        "after connecting, whatever it sends, s (default 5); until then it holds nothing",
    )
    p.add_argument("--payload", type=_payload, default="none", help="none/light/heavy/extra or kg")
    p.add_argument("--wind", type=_wind, default="calm", help="calm/breezy/windy or MEAN,SIGMA")
    p.add_argument(
        "--trajectory",
        choices=list(TRAJECTORIES),
        default="hover",
        help=f"reference to track, {'/'.join(TRAJECTORIES)} (default hover)",
    )
    p.add_argument("--episode-s", type=episode_seconds, default=20.0, help="episode length, s")
    p.add_argument(
        "--control-hz", type=_positive, default=100.0, help="control rate, Hz (default 100)"
    )
    p.add_argument(
        "--action-mode",
        choices=list(ACTION_MODES),
        default="rotor",
        help="what a client's action commands: rotor (4 thrusts) or ctbr (collective thrust "
        "and body rates; default rotor)",
    )
    p.add_argument(
        "--no-ground-effect", action="store_true", help="turn off the thrust gain near the floor"
    )
    p.set_defaults(func=_cmd)
