"""``rquad`` on a headless machine without OpenGL libraries: commands that render nothing run with
``MUJOCO_GL`` unset, and a command that renders says what to install or set in one line.

Such a host is reproduced here by a ``sitecustomize`` module that makes ``ctypes`` refuse to load
any EGL or OSMesa library (what PyOpenGL finds on a machine without them), with ``DISPLAY`` and
``MUJOCO_GL`` unset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Outcome, assert_user_error, run_subprocess

SITECUSTOMIZE = """
import ctypes

_cdll_init = ctypes.CDLL.__init__


def _no_gl(self, name, *args, **kwargs):
    if name is not None and any(lib in str(name) for lib in ("EGL", "OSMesa")):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")
    _cdll_init(self, name, *args, **kwargs)


ctypes.CDLL.__init__ = _no_gl
"""

ONE_RUN = """controllers: [pid]
payloads: [none]
winds: [calm]
trajectories: [hover]
seeds: [0]
episode_s: 0.5
"""


def _rquad_without_gl(argv: list[str], cwd: Path) -> Outcome:
    """``rquad argv`` in a child process on a host without EGL/OSMesa, no display, no GL choice."""
    site = cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return run_subprocess(
        argv,
        str(cwd),
        timeout=180,
        unset=("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM"),
        PYTHONPATH=str(site),
    )


def test_the_reproduction_really_has_no_egl(tmp_path):
    """The stand-in host is faithful: forcing EGL there fails as on a machine without libEGL."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(PYTHONPATH=str(site), MUJOCO_GL="egl", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-c", "import mujoco"], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0


def test_a_command_that_renders_nothing_runs_without_opengl(tmp_path):
    (tmp_path / "one.yaml").write_text(ONE_RUN)
    res = _rquad_without_gl(["sweep", "one.yaml", "--out", "out"], tmp_path)
    assert res.rc == 0, res.err[-3000:]
    assert "MUJOCO_GL" not in res.err
    assert len((tmp_path / "out" / "rows.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("command", [["eval", "--payload", "none"], ["stress", "--help"]])
def test_other_commands_start_without_opengl(tmp_path, command):
    argv = [*command, "--episode-s", "0.5"] if command[0] == "eval" else command
    res = _rquad_without_gl(argv, tmp_path)
    assert res.rc == 0, res.err[-3000:]


def test_a_command_that_renders_says_what_to_install(tmp_path):
    res = _rquad_without_gl(
        ["eval", "--controller", "pid", "--episode-s", "0.5", "--gif", "f.gif"], tmp_path
    )
    assert_user_error(res, "eval", "MUJOCO_GL=egl")
    assert not (tmp_path / "f.gif").exists()
