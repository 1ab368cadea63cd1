"""``rquad demo --gif PATH`` and ``rquad eval --gif PATH``: the flight of one controller as a GIF
(the report's flight animation), and one-line errors for a bad path, a scenario the renderer does
not fly and a machine without OpenGL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Outcome, assert_user_error, run_main
from PIL import Image

SHORT = ["--episode-s", "0.3"]  # 30 control steps: frames after steps 1, 11, 21


def _rendered(res: Outcome) -> None:
    """Skip where this machine cannot render (the error line says so); else require success."""
    if res.rc == 2 and "nothing rendered with MUJOCO_GL" in res.err:
        pytest.skip(f"no headless OpenGL here: {res.err.strip()}")
    assert res.rc == 0, res.err[-2000:]


def test_demo_gif_shows_the_chosen_controller(capsys, tmp_path):
    path = tmp_path / "new" / "folder" / "demo.gif"  # folders are created
    res = run_main(["demo", *SHORT, "--gif", str(path), "--gif-controller", "geo_rls"], capsys)
    _rendered(res)
    assert f"GIF of geo_rls: {path}" in res.out
    assert path.read_bytes()[:6] in (b"GIF87a", b"GIF89a")
    with Image.open(path) as gif:
        assert gif.n_frames == 3  # 10 frames/s of the 0.3 s flight
        assert gif.size == (320, 240)  # one controller, not the five flown
    assert sorted(p.name for p in path.parent.iterdir()) == ["demo.gif"]  # no temporary left


def test_eval_gif_renders_the_first_controller_and_keeps_json_clean(capsys, tmp_path):
    path = tmp_path / "eval.gif"
    path.write_bytes(b"old")  # replaced
    res = run_main(
        ["eval", "--controller", "pid,geo", *SHORT, "--json", "--gif", str(path)], capsys
    )
    _rendered(res)
    assert [r["controller"] for r in json.loads(res.out)] == ["pid", "geo"]
    with Image.open(path) as gif:
        assert gif.n_frames == 3


def test_a_gif_path_that_cannot_be_created_is_one_line_before_flying(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    res = run_main(["demo", *SHORT, "--gif", str(blocker / "sub" / "d.gif")], capsys)
    assert_user_error(res, "demo", "--gif", f"{blocker} is a file")
    assert res.out == ""  # refused before anything was flown
    res = run_main(["eval", *SHORT, "--gif", str(tmp_path)], capsys)
    assert_user_error(res, "eval", "--gif", "is a folder")


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["--seed", "1"], ("--gif renders", "--seed 1")),
        (["--yaw-offset", "90"], ("--gif renders", "--yaw-offset 90")),
        (["--no-ground-effect"], ("--gif renders", "--no-ground-effect")),
        (["--gif-controller", "hnewton"], ("--gif-controller 'hnewton' is not flown", "geo")),
    ],
)
def test_a_gif_of_another_flight_is_refused_naming_the_argument(capsys, tmp_path, extra, fragments):
    path = tmp_path / "x.gif"
    res = run_main(["eval", *SHORT, "--gif", str(path), *extra], capsys)
    assert_user_error(res, "eval", *fragments)
    assert not path.exists()


def test_gif_controller_needs_gif(capsys):
    res = run_main(["eval", *SHORT, "--gif-controller", "geo"], capsys)
    assert_user_error(res, "eval", "--gif-controller", "--gif PATH")


def _rquad(argv: list[str], cwd: Path, **env: str) -> Outcome:
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "RQUAD_DEBUG")}
    environ.update(env, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-m", "residual_quad.cli", *argv],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def _one_line(res: Outcome) -> str:
    lines = res.err.splitlines()
    assert res.rc == 2, (res.rc, res.err[-2000:])
    assert "Traceback" not in res.err and len(lines) == 1, res.err[-2000:]
    assert re.match(r"rquad( eval)?: error: ", lines[0]), lines[0]
    return lines[0]


def test_without_opengl_the_gif_error_says_what_to_set(tmp_path):
    # GLX without a display: no OpenGL context can be made
    res = _rquad(["eval", *SHORT, "--gif", "out/x.gif"], tmp_path, MUJOCO_GL="glx")
    line = _one_line(res)
    assert "MUJOCO_GL=egl" in line and "MUJOCO_GL=osmesa" in line, line
    assert not (tmp_path / "out" / "x.gif").exists()
    assert list((tmp_path / "out").iterdir()) == []  # the temporary folder is gone too


def test_a_mujoco_gl_mujoco_cannot_start_with_is_one_line(tmp_path):
    res = _rquad(["eval", *SHORT], tmp_path, MUJOCO_GL="no_such_backend")
    line = _one_line(res)
    assert line.startswith("rquad: error: MuJoCo cannot start with MUJOCO_GL=no_such_backend")
    assert "MUJOCO_GL=egl" in line
