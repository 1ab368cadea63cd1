"""``rquad bench --sections vector``: the vector env's cost per env-step beside the raw floor.

The floor is ``mj_step`` × substeps on one model (one control period, collision detection off as
the plant runs it in flight), measured in the same run. Rows: the vector env with every
disturbance on (``extra`` payload, ``windy``, helix) at N = 64 / 256 / 1024 envs on 1 and 2
rollout threads, reported per env-step (ratio to the floor; its inverse is env-steps/s), and the
closed loop with batched ``geo_rls`` at N = 256 on 1 thread. The issue's targets: N = 256 on one
thread within 1.5× the floor, N = 1024 on two threads at >= 100 000 env-steps/s (10 µs).
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from residual_quad.evaluation.bench import BenchRow

SECTION = "vector"
SCENARIO = {"payload": "extra", "wind": "windy", "trajectory": "helix"}


def _per_env_step_us(step, n: int, steps: int, repeats: int) -> float:
    """Median over ``repeats`` of the µs per env-step of ``steps`` batched steps of ``n`` envs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t0) / (steps * n) * 1e6)
    return float(np.median(times))


def _floor_us(repeats: int) -> float:
    from residual_quad.envs.plant import DSBL_CONTACT
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv

    env = ResidualQuadEnv(**SCENARIO)
    env.reset(seed=0)
    m, d = env.plant.model, env.plant.data
    m.opt.disableflags |= DSBL_CONTACT
    d.ctrl[:] = env.airframe.hover_thrust / 4.0  # N per rotor
    substeps = env.plant.substeps
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(200):
            mujoco.mj_step(m, d, substeps)
        times.append((time.perf_counter() - t0) / 200 * 1e6)
    env.close()
    return float(np.median(times))


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.controllers.batch import make_batch_controller
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv
    from residual_quad.training.blas import blas_threads

    sizes = (64, 256) if quick else (64, 256, 1024)
    threads = (1,) if quick else (1, 2)
    steps, repeats = (5, 3) if quick else (20, 5)
    floor = _floor_us(repeats)
    rows = [BenchRow(SECTION, "raw mj_step x substeps, one model (the floor)", floor, 1.0, "floor")]
    for nthread in threads:
        for n in sizes:
            env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=nthread)
            env.reset(seed=0)
            actions = np.zeros((n, 4))  # mid-range rotor thrust, 3 N each (a climb)
            for _ in range(3):  # warm-up
                env.step(actions)
            t = _per_env_step_us(lambda: env.step(actions), n, steps, repeats)  # noqa: B023
            env.close()
            target = ""
            if n == 256 and nthread == 1:
                target = "<= 1.5x floor"
            elif n == 1024 and nthread == 2:
                target = ">= 100k env-steps/s (<= 10 us)"
            rows.append(
                BenchRow(
                    SECTION,
                    f"vector env.step per env, N = {n}, {nthread} thread(s)",
                    t,
                    t / floor,
                    "floor",
                    target,
                )
            )
    n = 64 if quick else 256
    env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=1)
    ctrl = make_batch_controller("geo_rls", n)
    state = {"obs": env.reset(seed=0)[0]}
    ctrl.reset_batch(list(range(n)))

    def closed_loop() -> None:
        state["obs"], *_ = env.step(ctrl.policy_batch(state["obs"]))

    with blas_threads(1):
        for _ in range(3):
            closed_loop()
        t = _per_env_step_us(closed_loop, n, steps, repeats)
    env.close()
    rows.append(
        BenchRow(
            SECTION, f"closed loop, batched geo_rls + vector env, N = {n}", t, t / floor, "floor"
        )
    )
    return rows
