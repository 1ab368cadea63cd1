"""Benchmarks of the plant and the closed loop, measured side by side in one run.

* floor: ``mj_step`` for one control period (``substeps`` physics steps) on the same model, with
  collision detection as the plant runs it at altitude (off above the floor-reach height);
  also shown with collision detection forced on;
* ``env.step`` with every disturbance on (``extra`` payload, ``windy``, helix, ground effect);
* one closed-loop ``geo`` step (``policy`` + ``env.step``) and the ``geo`` policy alone.
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from residual_quad.controllers import make_controller
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.evaluation.bench.timing import BenchRow

SCENARIO = dict(payload="extra", wind="windy", trajectory="helix", ground_effect=True)


def _blocks(fn, reset, *, block: int, blocks: int) -> float:
    """Median over ``blocks`` of the mean µs per call of ``fn`` in runs of ``block`` calls."""
    per_call = []
    for _ in range(blocks):
        reset()
        t0 = time.perf_counter()
        for _ in range(block):
            fn()
        per_call.append((time.perf_counter() - t0) / block * 1e6)
    return float(np.median(per_call))


def run(quick: bool = False) -> list[BenchRow]:
    blocks = 7 if quick else 31
    block = 100
    env = ResidualQuadEnv(**SCENARIO)
    geo = make_controller("geo", env)
    obs, _ = env.reset(seed=0)
    # a recorded closed-loop action sequence, replayed so every env.step sees a realistic state
    actions = []
    for _ in range(block):
        a = geo.policy(obs)
        actions.append(a)
        obs, *_ = env.step(a)
    m, d = env.plant.model, env.plant.data
    substeps = env.plant.substeps

    def reset_env() -> None:
        env.reset(seed=0)
        it[0] = iter(actions)

    it = [iter(actions)]

    def env_step() -> None:
        env.step(next(it[0]))

    t_env = _blocks(env_step, reset_env, block=block, blocks=blocks)

    def reset_floor() -> None:
        env.reset(seed=0)  # leaves collision detection as the plant sets it at altitude
        d.ctrl[:] = env.airframe.hover_thrust / 4.0

    def floor() -> None:
        mujoco.mj_step(m, d, substeps)

    t_floor = _blocks(floor, reset_floor, block=block, blocks=blocks)

    def reset_floor_contact() -> None:
        reset_floor()
        env.plant.enable_contact_detection()

    t_floor_c = _blocks(floor, reset_floor_contact, block=block, blocks=blocks)

    state = {"obs": None}

    def reset_loop() -> None:
        state["obs"], _ = env.reset(seed=0)
        geo.reset(0)

    def loop() -> None:
        state["obs"], *_ = env.step(geo.policy(state["obs"]))

    t_loop = _blocks(loop, reset_loop, block=block, blocks=blocks)
    obs0, _ = env.reset(seed=0)
    t_policy = _blocks(lambda: geo.policy(obs0), lambda: None, block=block, blocks=blocks)

    floor_name = f"raw mj_step x{substeps} (one control period)"
    return [
        BenchRow("plant", floor_name, t_floor, 1.0, "floor"),
        BenchRow(
            "plant",
            "  same, collision detection forced on",
            t_floor_c,
            t_floor_c / t_floor,
            "floor",
        ),
        BenchRow(
            "plant",
            "env.step, all disturbances on",
            t_env,
            t_env / t_floor,
            "floor",
            "<= 40 us and <= 4x floor",
        ),
        BenchRow("plant", "geo policy alone", t_policy, t_policy / t_floor, "floor"),
        BenchRow(
            "plant",
            "closed-loop geo step (policy + env.step)",
            t_loop,
            t_loop / t_floor,
            "floor",
            "<= 80 us",
        ),
    ]
