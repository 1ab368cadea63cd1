"""Every controller flies bit-identically in this process and in worker processes, with or without
the ``rl`` extra (whose controllers ``RL_EXTRA_CONTROLLERS`` lists)."""

from __future__ import annotations

import os
import subprocess
import sys

from residual_quad.controllers import available_controllers
from residual_quad.controllers.extras import RL_EXTRA_CONTROLLERS
from residual_quad.evaluation.sweep import SweepConfig, failed_rows, run_sweep


def _rl_extra_installed() -> bool:
    """Whether stable-baselines3 imports (an installed but broken one counts as missing)."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def test_every_controller_is_deterministic_across_processes(tmp_path, offpolicy_policy):
    names = list(available_controllers())
    options = {}
    if not _rl_extra_installed():  # the rl extra is optional
        names = [n for n in names if n not in RL_EXTRA_CONTROLLERS]
    else:  # sb3 needs a zip: a fresh, seeded SAC
        import gymnasium as gym
        import stable_baselines3 as sb3

        sb3.SAC("MlpPolicy", gym.make("ResidualQuad-v0"), seed=0, device="cpu").save(
            tmp_path / "sac.zip"
        )
        options["sb3"] = {"path": str(tmp_path / "sac.zip")}
        for algo in ("sac", "tqc"):  # no shipped policy: an untrained one
            options[algo] = {"path": str(offpolicy_policy(algo))}
    cfg = SweepConfig(
        controllers=names,
        payloads=["heavy"],
        winds=["windy"],
        trajectories=["helix"],
        seeds=[1],
        episode_s=3.5,
        series=[],
        controller_options=options,
    )
    serial = run_sweep(cfg, tmp_path / "serial", workers=1, progress=False)
    pooled = run_sweep(cfg, tmp_path / "pool", workers=2, progress=False)

    def strip(rows):
        return {r["run_id"]: {k: v for k, v in r.items() if k != "wall_time"} for r in rows}

    assert len(serial) == len(names)
    assert failed_rows(serial) == []  # every controller flew: equal failure rows prove nothing
    assert strip(serial) == strip(pooled)


HIDE_SB3 = 'raise ImportError("stable_baselines3 hidden: the rl extra is not installed")\n'
BUILD_ALL = """
import os
import subprocess
import sys

from residual_quad.controllers import available_controllers
from residual_quad.controllers.ppo import INSTALL_HINT
from residual_quad.episode import build_controller

for name in available_controllers():
    try:
        path = name in ("sb3", "sac", "tqc")
        build_controller(name, {}, {"path": "policy.zip"} if path else None)
    except ImportError as exc:
        assert INSTALL_HINT in str(exc), exc
        print(name)
"""


def test_the_rl_extra_list_names_the_controllers_that_need_it(tmp_path):
    """Without stable-baselines3 exactly the controllers of ``RL_EXTRA_CONTROLLERS`` refuse to
    build, each with the install hint."""
    (tmp_path / "stable_baselines3").mkdir()
    (tmp_path / "stable_baselines3" / "__init__.py").write_text(HIDE_SB3)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_ALL],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert tuple(proc.stdout.split()) == RL_EXTRA_CONTROLLERS
