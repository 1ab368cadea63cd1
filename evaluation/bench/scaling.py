"""``rquad bench --sections scaling``: what more cores buy, measured on the machine it runs on.

Runs only when named (:data:`~residual_quad.evaluation.bench.sections.ON_REQUEST`: minutes of
sweeps at every worker count). Every figure stands beside its floor and beside its one-thread
(one-worker) figure, measured in the same run; the target column gives the speed-up against the
ideal (the thread or worker count). Rows:

* the machine: cores (``os.cpu_count()`` and those this process may use), the processor's model,
  the load average when the section starts (a shared machine's figures are slower, its ratios
  still compare), and the numerics :func:`residual_quad.numerics.fingerprint` names (OpenBLAS
  kernel, numpy's SIMD targets, versions);
* the vector env with every disturbance on (``extra`` payload, ``windy``, helix, open-loop hover
  thrust: the batch flies) at N = :data:`N_ENVS` envs (``--quick``: :data:`QUICK_N_ENVS`) on
  1, 2, 4, … rollout threads up to the cores (:func:`thread_counts`; the env splits a batch into
  lanes of at least ``MIN_LANE_ENVS`` = 64 envs, so N = 1024 keeps at most 16 threads busy), µs
  per env-step and env-steps/s; its floor at each thread count is MuJoCo's bare ``rollout`` of
  the same model and N on as many threads: one call of ``nstep = substeps`` with a constant
  control, the engine's floor of a period (:mod:`~residual_quad.evaluation.bench.period`) without
  the env's work between substeps. The env flies with the compiled substep wrench (the default,
  :mod:`~residual_quad.envs.substep`) and, in rows after those, with the numpy reference
  (``BatchPhysics.compiled`` false: what it cost before). Every env block is timed right after a
  floor block
  (:func:`~residual_quad.evaluation.bench.vector.paired`) and the thread counts take turns round
  by round, so each ratio is of neighbouring blocks;
* the 432 runs of the source matrix (``configs/sweep.yaml`` restricted to the four source
  trackers; ``--quick``: :data:`QUICK_MATRIX`) on the ``vector`` backend with each worker count,
  and on the ``local`` backend with the most, in wall seconds and µs per env-step; the floor is
  the matrix's env-steps at raw ``mj_step`` × substeps on one model
  (:class:`~residual_quad.evaluation.bench.vector.Floor`, timed before and after the sweeps),
  spread over the workers. A sweep is timed once (tens of seconds each).

On a 2-core machine the rows stop at 2; the same command on a many-core machine measures its
scaling.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from functools import partial
from typing import Any

import mujoco
import mujoco.rollout
import numpy as np

from residual_quad.envs.vector_physics import MIN_LANE_ENVS
from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "scaling"
N_ENVS = 1024  # envs of the vector-env rows
QUICK_N_ENVS = 2 * MIN_LANE_ENVS  # two lanes: enough for the two-thread row
STEPS, ROUNDS = 20, 5  # batched steps per block, rounds of blocks (medians over rounds)
QUICK_STEPS, QUICK_ROUNDS = 3, 3
FLOOR_WARMUP_BLOCKS = 3
FLOOR_BLOCKS = 5  # Floor blocks timed before and after the sweeps
#: the ``--quick`` matrix: the four source trackers, two payloads, one wind, one trajectory,
#: one seed, 2 s flights (8 runs)
QUICK_MATRIX: dict[str, Any] = {
    "payloads": ["none", "extra"],
    "winds": ["windy"],
    "trajectories": ["helix"],
    "seeds": [0],
    "episode_s": 2.0,
}


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, … below ``cores``, then ``cores`` itself (``6`` → ``[1, 2, 4, 6]``)."""
    counts, k = [], 1
    while k < cores:
        counts.append(k)
        k *= 2
    return [*counts, max(1, cores)]


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux), or what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_rows(cores: int) -> list[BenchRow]:
    """The facts the figures depend on, as rows without a timing."""
    from residual_quad.numerics import fingerprint

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    f = fingerprint()
    simd = ", ".join(f["numpy_simd"]) or "not reported"
    return [
        BenchRow(
            SECTION,
            f"machine: {cores} cores ({usable} usable here), {cpu_model()}, "
            f"load average {load:.2f} at the start",
            None,
        ),
        BenchRow(
            SECTION,
            f"numerics: OpenBLAS kernel {f['blas_core']}, numpy SIMD {simd}; "
            f"numpy {f['numpy']}, mujoco {f['mujoco']}",
            None,
        ),
    ]


class RolloutFloor:
    """The floor of ``n`` envs on ``nthread`` threads: MuJoCo's bare ``rollout`` of ``n`` copies of
    the scenario's model as the vector env prepares it, from one hovering state, one call of
    ``nstep = substeps`` with a constant hover control (the control spec the env uses), no numpy
    between substeps; µs per env-step of a block of ``calls`` calls, every block kept in
    :attr:`times`. Callable like :class:`~residual_quad.evaluation.bench.vector.Floor`."""

    def __init__(self, n: int, nthread: int, calls: int) -> None:
        from residual_quad.envs.residual_quad_env import ResidualQuadEnv
        from residual_quad.envs.vector_physics import CONTROL_SPEC, FULL_PHYSICS
        from residual_quad.evaluation.bench.period import rollout_model
        from residual_quad.evaluation.bench.vector import SCENARIO

        env = ResidualQuadEnv(**SCENARIO)
        env.reset(seed=0)
        plant = env.plant
        model = rollout_model(plant)
        self.n, self.calls, self.substeps = n, calls, plant.substeps
        nstate = mujoco.mj_stateSize(plant.model, FULL_PHYSICS)
        state = np.empty(nstate)
        mujoco.mj_getState(plant.model, plant.data, state, FULL_PHYSICS)
        self.state0 = np.tile(state, (n, 1))
        self.qacc0 = np.tile(plant.data.qacc, (n, 1))
        self.control = np.zeros((n, self.substeps, 4 + 6 * model.nbody))
        self.control[:, :, :4] = plant.true_mass * plant.airframe.gravity / 4.0  # N per rotor
        self.result = np.empty((n, self.substeps, nstate))
        self.sensors = np.empty((n, self.substeps, 0))
        self.models = [model] * n
        self.datas = [mujoco.MjData(model) for _ in range(nthread)]
        self.pool = mujoco.rollout.Rollout(nthread=nthread if nthread > 1 else 0)
        self.spec = CONTROL_SPEC
        self.clock = time.perf_counter  # wall time: the threads work side by side
        self.times: list[float] = []
        env.close()

    def _call(self) -> None:
        self.pool.rollout(
            self.models,
            self.datas,
            self.state0,
            self.control,
            control_spec=self.spec,
            nstep=self.substeps,
            initial_warmstart=self.qacc0,
            state=self.result,
            sensordata=self.sensors,
            skip_checks=True,
        )

    def __call__(self) -> float:
        t0 = self.clock()
        for _ in range(self.calls):
            self._call()
        t = (self.clock() - t0) / (self.calls * self.n) * 1e6
        self.times.append(t)
        return t

    def close(self) -> None:
        self.pool.close()


def _speedup(speedup: float, ideal: int) -> str:
    """The target column of a row: its speed-up over one thread (worker) and the ideal."""
    return f"speed-up {speedup:.2f}x (ideal {ideal})"


WRENCHES = {True: "", False: " (numpy wrench)"}
"""The vector env's rows: the compiled substep wrench (the default), then the numpy reference
(``BatchPhysics.compiled`` false), each flown beside the same floor in the same rounds."""


def vector_rows(n: int, counts: list[int], steps: int, rounds: int) -> list[BenchRow]:
    """The vector env (compiled and numpy wrench) and its rollout floor at each thread count in
    ``counts`` (module doc)."""
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv
    from residual_quad.evaluation.bench.vector import SCENARIO, hover_actions, paired

    floors, runs = [], []
    for nthread in counts:
        floor = RolloutFloor(n, nthread, steps)
        for _ in range(FLOOR_WARMUP_BLOCKS):  # warm-up
            floor()
        for compiled in WRENCHES:
            env = ResidualQuadVectorEnv(n, scenarios=[SCENARIO] * n, nthread=nthread)
            env.physics.compiled = compiled
            _, info = env.reset(seed=0)
            actions = hover_actions(env, info)
            for _ in range(FLOOR_WARMUP_BLOCKS):  # warm-up
                env.step(actions)
            runs.append((env, actions))
        floor.times.clear()
        floors.append(floor)
    nw = len(WRENCHES)
    env_t = np.empty((rounds, len(runs)))  # µs per env-step, (count, wrench) flattened
    to_floor = np.empty((rounds, len(runs)))
    for k in range(rounds):
        for j, (env, actions) in enumerate(runs):
            env_t[k, j], to_floor[k, j] = paired(
                partial(env.step, actions), n, steps, 1, floors[j // nw]
            )
    floor_t = np.array([f.times for f in floors]).T  # (rounds × wrenches, counts)
    for env, _ in runs:
        env.close()
    for floor in floors:
        floor.close()
    rows: list[BenchRow] = []
    for j, nthread in enumerate(counts):
        threads = f"{nthread} thread{'s' if nthread > 1 else ''}"
        f_us = float(np.median(floor_t[:, j]))
        # the speed-up is the printed ratio's inverse: a median of per-round reciprocals equals
        # it only for an odd count of rounds, and rounds × wrenches can be even
        ratio = float(np.median(floor_t[:, j] / floor_t[:, 0]))
        rows.append(
            BenchRow(
                SECTION,
                f"rollout floor, N = {n}, {threads}: {1e6 / f_us:,.0f} env-steps/s",
                f_us,
                ratio,
                "1 thread",
                _speedup(1.0 / ratio, nthread),
            )
        )
    for w, label in enumerate(WRENCHES.values()):
        for j, nthread in enumerate(counts):
            threads = f"{nthread} thread{'s' if nthread > 1 else ''}"
            col, one = j * nw + w, w
            e_us = float(np.median(env_t[:, col]))
            rows.append(
                BenchRow(
                    SECTION,
                    f"vector env.step{label}, N = {n}, {threads}: {1e6 / e_us:,.0f} env-steps/s",
                    e_us,
                    float(np.median(to_floor[:, col])),
                    "floor",
                    _speedup(float(np.median(env_t[:, one] / env_t[:, col])), nthread),
                )
            )
    return rows


def sweep_rows(quick: bool, counts: list[int]) -> list[BenchRow]:
    """The source matrix on the vector backend at each worker count in ``counts`` and on the
    local backend at the last, beside its ``mj_step`` floor spread over the workers."""
    from residual_quad.controllers.base import SOURCE_TRACKERS
    from residual_quad.evaluation.bench.vector import Floor
    from residual_quad.evaluation.sweep.config import SweepConfig
    from residual_quad.evaluation.sweep.engine import run_sweep

    matrix = QUICK_MATRIX if quick else {}
    cfg = SweepConfig(controllers=list(SOURCE_TRACKERS), series=[], **matrix)
    floor = Floor().start(FLOOR_BLOCKS, FLOOR_WARMUP_BLOCKS)
    runs = [("vector", w) for w in counts] + [("local", counts[-1])]
    walls: dict[tuple[str, int], float] = {}
    env_steps = runs_flown = 0
    for backend, workers in runs:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            flown = run_sweep(cfg, out, backend=backend, workers=workers, progress=False)
            walls[backend, workers] = time.perf_counter() - t0
        env_steps, runs_flown = sum(r["steps"] for r in flown), len(flown)
    for _ in range(FLOOR_BLOCKS):
        floor()
    floor.env.close()
    floor_us = float(np.median(floor.times))  # one core
    floor_s = floor_us * env_steps / 1e6
    rows = [
        BenchRow(
            SECTION,
            f"sweep floor: {env_steps:,} env-steps x raw mj_step: {floor_s:.1f} s",
            floor_us,
            1.0,
            "",
            "on one core",
        )
    ]
    one = walls["vector", counts[0]]
    for (backend, workers), wall in walls.items():
        us = wall / env_steps * 1e6
        if backend == "local":
            target = f"{wall / walls['vector', workers]:.2f}x the vector backend's time"
        else:
            target = _speedup(one / wall, workers)
        rows.append(
            BenchRow(
                SECTION,
                f"{runs_flown}-run matrix, {backend}, {workers} worker"
                f"{'s' if workers > 1 else ''}: {wall:.1f} s",
                us,
                us / (floor_us / workers),
                f"floor/{workers}",
                target,
            )
        )
    return rows


def run(quick: bool = False) -> list[BenchRow]:
    cores = os.cpu_count() or 1
    counts = thread_counts(min(cores, 2) if quick else cores)
    n = QUICK_N_ENVS if quick else N_ENVS
    steps, rounds = (QUICK_STEPS, QUICK_ROUNDS) if quick else (STEPS, ROUNDS)
    return [
        *machine_rows(cores),
        *vector_rows(n, counts, steps, rounds),
        *sweep_rows(quick, counts),
    ]
