"""``rquad bench --sections vector``: the vector env's cost per env-step beside the raw floor.

The floor is ``mj_step`` × substeps on one model (one control period, collision detection off as
the plant runs it in flight), measured in the same run. Rows: the vector env with every
disturbance on (``extra`` payload, ``windy``, helix) at N = 64 / 256 / 1024 envs on 1 and 2
rollout threads, reported per env-step with the median ratio to a floor block timed right before
each block (its inverse is env-steps/s); then N = 256 on 1 thread in calm air (open-loop hover
thrust keeps every env flying) in CPU time, in lockstep and with the envs' episodes out of step
(env ``i`` at step ``k + i``, as autoresets leave a training batch), references tabulated and
called per env (``reference_table_bytes=0``, the path before the tables), side by side; and the
closed loop with batched ``geo_rls`` at N = 256 on 1 thread; and an autoreset of half of
N = 256 envs, batched, beside the same envs' single resets one by one. The targets: N = 256 on
one thread within 1.5× the floor, N = 1024 on two threads at >= 100 000 env-steps/s (10 µs).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mujoco
import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "vector"
SCENARIO = {"payload": "extra", "wind": "windy", "trajectory": "helix"}
STAGGERED = {**SCENARIO, "wind": "calm"}  # open-loop hover thrust flies through the stagger


def paired(step, n: int, steps: int, repeats: int, floor) -> tuple[float, float]:
    """(median µs per env-step, median ratio to the floor) of ``steps`` batched steps of ``n``
    envs, each block timed right after a floor block (on the floor's clock): on a shared or
    virtual machine the speed drifts by tens of percent within a minute, and a ratio of
    neighbouring blocks does not."""
    times, ratios = [], []
    for _ in range(repeats):
        f = floor()
        t0 = floor.clock()
        for _ in range(steps):
            step()
        t = (floor.clock() - t0) / (steps * n) * 1e6
        times.append(t)
        ratios.append(t / f)
    return float(np.median(times)), float(np.median(ratios))


def hover_actions(env, info: dict) -> np.ndarray:
    """Open-loop rotor actions that carry each env's true mass (payload included): the batch
    flies (drag, wind, payload on) instead of falling to the floor and autoresetting, which
    would time the contact path and the resets instead of flight."""
    frame = env.airframe
    f = info["true_mass"] * frame.gravity / 4.0  # N per rotor
    a = 2.0 * f / frame.max_rotor_thrust - 1.0
    return np.repeat(a[:, None], 4, axis=1)


class Floor:
    """The floor: ``mj_step`` × substeps on one model (contacts off, as the plant flies), µs per
    env-step of a block of 200; every block it times is kept for the floor row."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        from residual_quad.envs.plant import DSBL_CONTACT
        from residual_quad.envs.residual_quad_env import ResidualQuadEnv

        self.env = ResidualQuadEnv(**SCENARIO)
        self.env.reset(seed=0)
        self.model, self.data = self.env.plant.model, self.env.plant.data
        self.model.opt.disableflags |= DSBL_CONTACT
        self.data.ctrl[:] = self.env.airframe.hover_thrust / 4.0  # N per rotor
        self.substeps = self.env.plant.substeps
        self.times: list[float] = []
        self.clock = clock  # s: wall time, or the process's CPU time (see out_of_step_rows)

    def start(self, blocks: int, warmup: int = 3) -> Floor:
        """``warmup`` blocks not kept, then ``blocks`` kept: a section's floor before its runs."""
        for _ in range(warmup):
            self()
        self.times.clear()
        for _ in range(blocks):
            self()
        return self

    def __call__(self) -> float:
        t0 = self.clock()
        for _ in range(200):
            mujoco.mj_step(self.model, self.data, self.substeps)
        t = (self.clock() - t0) / 200 * 1e6
        self.times.append(t)
        return t


def out_of_step_rows(n: int, steps: int, repeats: int) -> list[BenchRow]:
    """``env.step`` of ``n`` envs in lockstep, and out of step with references tabulated and
    called per env, one thread, blocks interleaved, in the process's CPU time beside a floor on
    the same clock: the work done, which other processes on a shared machine barely move (wall
    time there swings by 3× and more)."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    floor = Floor(time.process_time)
    for _ in range(3):  # warm-up
        floor()
    variants = {
        "in lockstep": (False, {}),
        "out of step, references tabulated": (True, {}),
        "out of step, references called per env": (True, {"reference_table_bytes": 0}),
    }
    runs = []
    for staggered, kwargs in variants.values():
        env = ResidualQuadVectorEnv(n, scenarios=[STAGGERED] * n, nthread=1, **kwargs)
        _, info = env.reset(seed=0)
        actions = hover_actions(env, info)
        ended = np.zeros(n, dtype=bool)  # an env whose episode ended waits for env.step
        for k in range(1, n if staggered else 0):  # env i ends up i steps ahead of env 0
            ids = np.flatnonzero(~ended[k:]) + k
            _, _, terminated, truncated, _ = env.step_subset(ids, actions[ids])
            ended |= terminated | truncated
        for _ in range(3):  # warm-up
            env.step(actions)
        runs.append((env, actions))
    times: list[list[float]] = [[] for _ in runs]
    ratios: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for (env, actions), t, r in zip(runs, times, ratios, strict=True):
            block_t, block_r = paired(lambda: env.step(actions), n, steps, 1, floor)  # noqa: B023
            t.append(block_t)
            r.append(block_r)
    for env, _ in runs:
        env.close()
    return [
        BenchRow(
            SECTION,
            f"vector env.step per env, N = {n}, 1 thread, calm, {what} (CPU time)",
            float(np.median(t)),
            float(np.median(r)),
            "floor",
        )
        for what, t, r in zip(variants, times, ratios, strict=True)
    ]


def reset_rows(n: int, repeats: int) -> list[BenchRow]:
    """An autoreset of every other env of ``n`` (:meth:`reset_subset`: one batched reset,
    bookkeeping included) beside the same envs' single ``reset`` one by one (the path an
    autoreset took before resets were batched, without the batch's bookkeeping), blocks
    interleaved; µs per env reset, and the batched time over the one-by-one time."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=1)
    env.reset(seed=0)
    ids = list(range(0, n, 2))

    def batched() -> None:
        env.reset_subset(ids)

    def one_by_one() -> None:
        for i in ids:
            env.envs[i].reset()

    for fn in (batched, one_by_one):  # warm-up
        fn()
    times: dict[str, list[float]] = {"batched": [], "one by one": []}
    for _ in range(repeats):
        for what, fn in (("batched", batched), ("one by one", one_by_one)):
            t0 = time.perf_counter()
            fn()
            times[what].append((time.perf_counter() - t0) / len(ids) * 1e6)
    env.reset_subset(ids)  # the vector env's own state again
    env.close()
    ratios = np.array(times["batched"]) / np.array(times["one by one"])
    k = len(ids)
    return [
        BenchRow(
            SECTION,
            f"autoreset of {k} of {n} envs, batched (reset_subset), per env",
            float(np.median(times["batched"])),
            float(np.median(ratios)),
            "one by one",
        ),
        BenchRow(
            SECTION,
            f"the same {k} envs' single reset, one by one, per env",
            float(np.median(times["one by one"])),
            1.0,
            "one by one",
        ),
    ]


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.controllers.batch import make_batch_controller
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv
    from residual_quad.training.blas import blas_threads

    sizes = (64, 256) if quick else (64, 256, 1024)
    threads = (1,) if quick else (1, 2)
    steps, repeats = (5, 3) if quick else (20, 5)
    floor = Floor()
    for _ in range(3):  # warm-up
        floor()
    rows: list[BenchRow] = []
    for nthread in threads:
        for n in sizes:
            env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=nthread)
            _, info = env.reset(seed=0)
            actions = hover_actions(env, info)
            for _ in range(3):  # warm-up
                env.step(actions)
            t, ratio = paired(lambda: env.step(actions), n, steps, repeats, floor)  # noqa: B023
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
                    ratio,
                    "floor",
                    target,
                )
            )
    n = 64 if quick else 256
    rows.extend(out_of_step_rows(n, steps, repeats))
    rows.extend(reset_rows(n, repeats))
    env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=1)
    ctrl = make_batch_controller("geo_rls", n)
    state = {"obs": env.reset(seed=0)[0]}
    ctrl.reset_batch(list(range(n)))

    def closed_loop() -> None:
        state["obs"], *_ = env.step(ctrl.policy_batch(state["obs"]))

    with blas_threads(1):
        for _ in range(3):
            closed_loop()
        t, ratio = paired(closed_loop, n, steps, repeats, floor)
    env.close()
    rows.append(
        BenchRow(SECTION, f"closed loop, batched geo_rls + vector env, N = {n}", t, ratio, "floor")
    )
    floor.env.close()
    median_floor = float(np.median(floor.times))
    head = BenchRow(SECTION, "raw mj_step x substeps, one model (the floor)", median_floor, 1.0)
    return [head, *rows]
