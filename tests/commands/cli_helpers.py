"""Running ``rquad`` in-process or as a subprocess and checking the one-line error contract."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from residual_quad.cli import main


@dataclass
class Outcome:
    """Exit code and captured streams of one ``rquad`` call."""

    rc: int
    out: str
    err: str


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    """``rquad argv`` in this process (argparse's exit becomes the exit code)."""
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    captured = capsys.readouterr()
    return Outcome(rc, captured.out, captured.err)


def run_subprocess(
    argv: list[str],
    cwd: str,
    timeout: float = 60.0,
    *,
    unset: tuple[str, ...] = (),
    **env_vars: str,
) -> Outcome:
    """``python -m residual_quad.cli argv`` in a child process (bounded by ``timeout``, s), with
    ``MUJOCO_GL=egl`` unless ``unset`` names it; ``unset`` removes variables from the child's
    environment, ``env_vars`` set others."""
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONWARNINGS": "ignore"}
    for name in ("RQUAD_DEBUG", *unset):
        env.pop(name, None)
    env.update(env_vars)
    proc = subprocess.run(
        [sys.executable, "-m", "residual_quad.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_user_error(res: Outcome, command: str, *fragments: str) -> None:
    """Exit code 2, exactly one stderr line ``rquad <command>: error: ...`` with ``fragments``."""
    lines = res.err.splitlines()
    assert res.rc == 2, (res.rc, res.err[-2000:])
    assert "Traceback" not in res.err, res.err[-2000:]
    assert len(lines) == 1, res.err
    assert lines[0].startswith(f"rquad {command}: error: "), lines[0]
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def assert_clean(res: Outcome, command: str) -> None:
    """Success, or a user error in the one-line form: never a traceback. Lines starting with
    ``warning:`` (e.g. a skipped incomplete row) and progress bars may precede the error line."""
    assert "Traceback" not in res.err, res.err[-3000:]
    if res.rc != 0:
        lines = [ln for ln in res.err.splitlines() if ln.strip() and "%|" not in ln]
        assert all(line.startswith("warning: ") for line in lines[:-1]), res.err[-3000:]
        assert_user_error(Outcome(res.rc, res.out, "\n".join(lines[-1:])), command)
