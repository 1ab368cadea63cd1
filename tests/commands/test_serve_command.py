"""``rquad serve`` as a process (loopback, stopped in ``finally``), ``rquad eval --remote`` and
``--record``, SIGTERM/SIGINT shutdown, and the stdlib-only client example of docs/remote.md."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # s for the server to print its address (imports on a busy machine)
STOP_TIMEOUT_S = 20.0


@contextmanager
def serve(*argv: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """``rquad serve --port 0 argv`` in a child process; yields it and its ``host:port``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "residual_quad.cli", "serve", "--port", "0", *argv],
        cwd=ROOT,
        env={**os.environ, "MUJOCO_GL": "egl", "PYTHONWARNINGS": "ignore", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _read_line(proc, START_TIMEOUT_S)
        match = re.search(r"on (127\.0\.0\.1:\d+)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.first_line = line  # type: ignore[attr-defined]
        yield proc, match.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(STOP_TIMEOUT_S)
        proc.stdout.close()
        proc.stderr.close()


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError("rquad serve printed nothing")
    return proc.stdout.readline()


def _stop(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    rc = proc.wait(STOP_TIMEOUT_S)
    return rc, proc.stdout.read()


def test_eval_remote_equals_eval_in_process_and_sigterm_stops_cleanly(tmp_path, capsys):
    log = tmp_path / "served.mcap"
    with serve("--control-hz", "50", "--record", str(log)) as (proc, where):  # eval overrides
        args = ["eval", "--controller", "geo_rls", "--payload", "extra", "--wind", "windy"]
        args += ["--trajectory", "helix", "--episode-s", "3.5", "--json"]
        local = run_main(args, capsys)
        remote = run_main([*args, "--remote", where], capsys)
        assert local.rc == remote.rc == 0, remote.err
        a, b = json.loads(local.out), json.loads(remote.out)
        assert (a["rmse"], a["max_error"], a["control_cost"]) == (
            b["rmse"],
            b["max_error"],
            b["control_cost"],
        )
        rc, out = _stop(proc, signal.SIGTERM)
    assert rc == 0 and "stopped: 1 connection(s)" in out and str(log) in out
    from rosbags.rosbag2 import Reader

    with Reader(log) as reader:  # finished: the summary section is there
        assert reader.message_count == 9 * (350 + 1)


def test_sigint_stops_a_realtime_server_with_a_client_attached():
    from residual_quad.remote.protocol import frame, recv_message

    with serve("--realtime", "--client-timeout", "60") as (proc, where):
        import socket

        host, port = where.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(frame({"v": 1, "seq": 1, "op": "hello"}))
            assert recv_message(sock)["realtime"] is True
            sock.sendall(frame({"v": 1, "seq": 2, "op": "reset"}))
            recv_message(sock)
            rc, out = _stop(proc, signal.SIGINT)
            assert sock.recv(1) == b""  # the server closed the connection on its way out
    assert rc == 0 and "stopped" in out


def test_eval_record_writes_a_log(tmp_path, capsys):
    log = tmp_path / "eval.mcap"
    res = run_main(["eval", "--episode-s", "0.2", "--record", str(log)], capsys)
    assert res.rc == 0, res.err
    from rosbags.rosbag2 import Reader

    with Reader(log) as reader:
        assert reader.message_count == 9 * 20


def test_stdlib_client_example_flies_a_hover():
    with serve() as (proc, where):
        example = ROOT / "docs" / "examples" / "remote_hover_client.py"
        done = subprocess.run(  # -I: isolated, so the project cannot be imported
            [sys.executable, "-I", str(example), where],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        error = float(re.search(r"height error ([-+0-9.]+) m", done.stdout).group(1))
        assert "t = 3.00 s" in done.stdout and abs(error) < 0.05
        rc, out = _stop(proc, signal.SIGTERM)
        assert rc == 0


def test_example_uses_the_standard_library_only():
    source = (ROOT / "docs" / "examples" / "remote_hover_client.py").read_text()
    imported = set(re.findall(r"^import (\w+)", source, flags=re.M))
    imported |= set(re.findall(r"^from (\w+)", source, flags=re.M))
    assert imported <= set(sys.stdlib_module_names), imported
    assert sum(1 for line in source.splitlines() if line.strip()) <= 40


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["serve", "--port", "70000"], ["port"]),
        (["serve", "--client-timeout", "0"], ["> 0"]),
        (["serve", "--handshake-timeout", "0"], ["> 0"]),
        (["serve", "--handshake-timeout", "nan"], ["> 0"]),
        (["serve", "--host", "not a host", "--port", "0"], ["not a host"]),
        (["serve", "--max-message-bytes", "10"], ["max_message_bytes"]),
        (["serve", "--record", "/nonexistent/x.mcap", "--port", "0"], ["does not exist"]),
        (["eval", "--controller", "geo,pid", "--record", "x.mcap"], ["one controller"]),
        (["eval", "--remote", "127.0.0.1:1", "--episode-s", "0.1"], ["refused"]),
        (["eval", "--remote", "nohost:", "--episode-s", "0.1"], ["empty port"]),
        (["eval", "--remote", "no.such.host.invalid:5", "--episode-s", "0.1"], ["cannot reach"]),
    ],
)
def test_user_errors_are_one_line(argv, fragments, capsys):
    res = run_main(argv, capsys)
    assert_user_error(res, argv[0], *fragments)


def test_serve_refuses_a_taken_port(capsys):
    with serve() as (proc, where):
        res = run_main(["serve", "--port", where.split(":")[1]], capsys)
        assert_user_error(res, "serve", "in use")


def test_token_from_the_environment(capsys, monkeypatch):
    with serve(env={"RQUAD_TOKEN": "t0ken"}) as (proc, where):
        res = run_main(["eval", "--remote", where, "--episode-s", "0.1"], capsys)
        assert_user_error(res, "eval", "unauthorized")
        monkeypatch.setenv("RQUAD_TOKEN", "t0ken")
        res = run_main(["eval", "--remote", where, "--episode-s", "0.1"], capsys)
        assert res.rc == 0, res.err
        time.sleep(0)  # both connections are closed by now


def test_the_server_docs_show_the_example_as_it_is_tested():
    page = (ROOT / "docs" / "remote.md").read_text(encoding="utf-8")
    example = (ROOT / "docs" / "examples" / "remote_hover_client.py").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in page


GARBAGE = st.sampled_from(["", "x", "-1", "nan", "inf", "1e400", "0", "70000", "é"])


@st.composite
def serve_argv(draw) -> list[str]:
    """``serve`` arguments, good and bad; the port is 0 or garbage (never a fixed free port)."""
    argv = ["serve", "--port", draw(st.sampled_from(["0", "-5", "65536", "x"]))]
    for flag, good in (
        ("--client-timeout", ["0.5", "30"]),
        ("--handshake-timeout", ["0.5", "5"]),
        ("--max-message-bytes", ["64", "65536", "63"]),
        ("--control-hz", ["50", "100"]),
        ("--episode-s", ["0.5", "20"]),
        ("--payload", ["extra", "0.3", "lead"]),
        ("--wind", ["windy", "1,0.5", "1"]),
        ("--trajectory", ["helix", "spiral"]),
        ("--action-mode", ["ctbr", "thrust"]),
        ("--host", ["127.0.0.1", "::1", "not a host"]),
    ):
        if draw(st.booleans()):
            argv += [flag, draw(st.one_of(st.sampled_from(good), GARBAGE))]
    argv += draw(st.sampled_from([[], ["--realtime"], ["--no-ground-effect"]]))
    return argv


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(argv=serve_argv())
def test_serve_arguments_start_or_fail_in_one_line(capsys, monkeypatch, argv):
    from residual_quad.remote.server import SimServer

    monkeypatch.setattr(SimServer, "serve_forever", lambda self: self.close())  # start, then stop
    res = run_main(argv, capsys)
    if res.rc == 0:
        assert "serving ResidualQuad-v0 on" in res.out and "stopped" in res.out
    else:
        assert_user_error(res, "serve")


def test_serve_with_a_live_view_prints_its_address():
    from websockets.sync.client import connect

    with serve("--foxglove", "0") as (proc, where):
        live = re.search(r"live view (ws://127\.0\.0\.1:\d+)", proc.first_line)
        assert live, proc.first_line
        with connect(live.group(1), subprotocols=["foxglove.sdk.v1"], open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["op"] == "serverInfo"
        rc, _ = _stop(proc, signal.SIGTERM)
        assert rc == 0


def test_serve_help_explains_the_deadlines(capsys):
    res = run_main(["serve", "--help"], capsys)
    assert res.rc == 0
    text = " ".join(res.out.split())  # argparse wraps lines
    assert "--handshake-timeout" in text and "has not completed hello" in text
    assert "(default 5)" in text and "(default 30; partial frames do not count)" in text
