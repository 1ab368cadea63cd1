"""Every controller flies bit-identically in this process and in worker processes."""

from __future__ import annotations

import importlib.util

from residual_quad.controllers import available_controllers
from residual_quad.evaluation.sweep import SweepConfig, run_sweep


def test_every_controller_is_deterministic_across_processes(tmp_path):
    names = [c for c in available_controllers()]
    options = {}
    if importlib.util.find_spec("stable_baselines3") is None:
        names.remove("ppo")  # the rl extra is optional
        names.remove("sb3")
    else:  # sb3 needs a zip: a fresh, seeded SAC
        import gymnasium as gym
        import stable_baselines3 as sb3

        sb3.SAC("MlpPolicy", gym.make("ResidualQuad-v0"), seed=0, device="cpu").save(
            tmp_path / "sac.zip"
        )
        options["sb3"] = {"path": str(tmp_path / "sac.zip")}
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
    assert strip(serial) == strip(pooled)
