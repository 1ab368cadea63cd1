"""The worked example of docs/rl_policies.md runs: a user script trains an SB3 SAC on
``ResidualQuad-v0`` and saves it; the saved zip flies through ``make_controller("sb3", ...)`` and
``rquad eval --controller sb3:PATH`` prints its metrics line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from residual_quad.commands.eval import UNDEFINED
from residual_quad.controllers import make_controller
from residual_quad.episode import run_episode

pytest.importorskip("stable_baselines3", reason="needs the rl extra (stable-baselines3)")

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "examples" / "train_sac.py"


def test_train_sac_example_then_evaluate_it(tmp_path):
    out = tmp_path / "sac.zip"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "200", "--seed", "0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.is_file() and f"sb3:{out}" in done.stdout

    ctrl = make_controller("sb3", path=str(out))
    assert ctrl.algo == "SAC" and ctrl.action_mode == "rotor"
    result = run_episode(ctrl, payload="none", trajectory="hover", seed=0, episode_s=0.5)
    assert result.steps > 0 and math.isfinite(result.control_cost)
    assert np.all(np.isfinite(result.thrusts))

    spec = f"sb3:{out}"
    done = subprocess.run(
        [sys.executable, "-m", "residual_quad.cli", "eval", "--controller", spec]
        + ["--payload", "none", "--trajectory", "hover", "--episode-s", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout.splitlines()
    rows = table[[i for i, line in enumerate(table) if set(line) == {"-"}][0] + 1 :]
    rows = [line for line in rows if line and not line.startswith("note:")]
    assert len(rows) == 1 and rows[0].startswith("sb3"), done.stdout  # the label: sb3...
    # RMSE, max error (– when a crash ends the flight before 3 s), cost, diverged, wall time
    rmse, max_err, cost, diverged, wall = rows[0].split()[-5:]
    assert all(v == UNDEFINED or float(v) >= 0 for v in (rmse, max_err))
    assert float(cost) > 0 and float(wall) >= 0 and diverged
