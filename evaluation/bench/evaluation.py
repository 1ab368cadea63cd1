"""``rquad bench --sections evaluation``: where the evaluation stage's time goes, row by row.

``--sections pipeline`` sets the pipeline's evaluation stage against its MuJoCo floor; this
section splits that figure. Each controller row of the evaluation matrix (``configs/sweep.yaml``;
an RL row by its first training seed) flies its matrix runs as one vector-backend batch on one
core — the sweep's own batch path (:func:`~residual_quad.episode.fly_batch`, one BLAS thread) —
with its controller's calls clocked apart. Rows, µs per env-step, each beside the floor (raw
``mj_step`` × substeps on one core, blocks before and after the flights, median):

* per row: the whole batch (controller and env construction, reset, the steps) and its
  controller's share (``policy_batch``);
* the matrix's estimate: the rows weighted by their runs in the matrix (an RL row counts every
  training seed's), split into the env's part (with what precedes the first step: building the
  controller and the vector env, the reset) and the controllers'. With the workers kept busy,
  the stage's wall time over the floor's share of the cores is this per-core ratio;
* what a ratio target for the stage (≤ :data:`STAGE_TARGET` × the floor) leaves for the
  controllers once the env's part is paid.

Not part of the default ``rquad bench`` run: one batch per row of the matrix, about a minute and
a half on one core (``--quick``: three rows, twelve 1 s flights each).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "evaluation"
STAGE_TARGET = 2.0  # × the floor: the two-core target of the pipeline's evaluation stage
#: the rows ``--quick`` flies (a tracker, an RLS tracker with its observer, a rotor-level policy)
QUICK_ROWS = ("pid", "geo_rls_dob", "ppo")
QUICK_RUNS, QUICK_EPISODE_S = 12, 1.0  # runs per row and their length (s) with ``--quick``
FLOOR_BLOCKS = 5  # floor blocks before and after the flights


@dataclass(frozen=True)
class RowCost:
    """One matrix row flown as one batch: its label, the runs flown and their env-steps, the
    batch's wall time, its controller's share and the part before the first step (building the
    controller and the vector env, the reset; s), and the runs the row has in the matrix."""

    label: str
    runs: int
    env_steps: int
    total_s: float
    controller_s: float
    setup_s: float
    matrix_runs: int


class _Clocked:
    """A batch controller whose ``policy_batch`` calls are clocked (``seconds``, and ``first``:
    when the first began); everything else is the wrapped controller's."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.seconds = 0.0
        self.first: float | None = None

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        if self.first is None:
            self.first = t0
        try:
            return self.inner.policy_batch(obs)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def matrix_rows(cfg: Any) -> dict[str, list[str]]:
    """The matrix's rows: each controller (a spec's target, ``ppo`` for
    ``ppo:training_seed=1``) with its labels, in the matrix's order."""
    rows: dict[str, list[str]] = {}
    for label in cfg.labels:
        rows.setdefault(cfg.controller_spec(label).target, []).append(label)
    return rows


def fly_row(cfg: Any, label: str, specs: Sequence[Any], matrix_runs: int) -> RowCost:
    """``specs`` (one label's runs) flown as one batch on one core, as the vector backend flies
    a batch (:func:`~residual_quad.evaluation.sweep.engine.run_batch`), the controller clocked."""
    from residual_quad.controllers.batch import batch_from_spec
    from residual_quad.episode import control_context, fly_batch, observation_env
    from residual_quad.training.blas import blas_threads

    with blas_threads(1):
        t0 = time.perf_counter()
        inner = batch_from_spec(
            cfg.controller_spec(label),
            len(specs),
            control_context(cfg.env),
            **cfg.controller_options.get(label, {}),
        )
        ctrl = _Clocked(inner)
        results = fly_batch(list(specs), ctrl, {**observation_env(inner), **cfg.env})
        total = time.perf_counter() - t0
    steps = sum(r.steps for r in results)
    setup = (ctrl.first or t0) - t0
    return RowCost(label, len(specs), steps, total, ctrl.seconds, setup, matrix_runs)


def budget_rows(costs: Sequence[RowCost], floor_us: float) -> list[BenchRow]:
    """The rows of the section from the flown rows and the floor (µs per env-step, one core)."""
    out = [BenchRow(SECTION, "floor: raw mj_step x substeps, one core", floor_us, 1.0, "floor")]
    for c in costs:
        total, ctrl = c.total_s / c.env_steps * 1e6, c.controller_s / c.env_steps * 1e6
        out.append(
            BenchRow(
                SECTION, f"{c.label}: {c.runs} runs, one batch", total, total / floor_us, "floor"
            )
        )
        out.append(BenchRow(SECTION, f"{c.label}: its controller", ctrl, ctrl / floor_us, "floor"))
    weights = np.array([c.matrix_runs for c in costs], dtype=float)
    total = float(np.average([c.total_s / c.env_steps * 1e6 for c in costs], weights=weights))
    ctrl = float(np.average([c.controller_s / c.env_steps * 1e6 for c in costs], weights=weights))
    setup = float(np.average([c.setup_s / c.env_steps * 1e6 for c in costs], weights=weights))
    runs = int(weights.sum())
    left = STAGE_TARGET * floor_us - (total - ctrl)  # µs per env-step
    out += [
        BenchRow(
            SECTION,
            f"matrix ({runs} runs), estimated: all",
            total,
            total / floor_us,
            "floor",
            f"<= {STAGE_TARGET:g}x (the evaluation stage)",
        ),
        BenchRow(
            SECTION, "matrix, estimated: the env", total - ctrl, (total - ctrl) / floor_us, "floor"
        ),
        BenchRow(SECTION, "... of which building and reset", setup, setup / floor_us, "floor"),
        BenchRow(SECTION, "matrix, estimated: the controllers", ctrl, ctrl / floor_us, "floor"),
        BenchRow(
            SECTION,
            f"left for the controllers under {STAGE_TARGET:g}x",
            left,
            left / ctrl if left > 0 and ctrl > 0 else None,  # none left: the env alone is over
            "of theirs today",
        ),
    ]
    return out


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad import configs
    from residual_quad.evaluation.bench.vector import Floor
    from residual_quad.evaluation.sweep.config import SweepConfig, expand

    cfg = configs.load(SweepConfig, "sweep")
    specs = expand(cfg)
    runs_of = {label: 0 for label in cfg.labels}
    for s in specs:
        runs_of[s.controller] += 1
    rows = matrix_rows(cfg)
    if quick:
        rows = {name: labels for name, labels in rows.items() if name in QUICK_ROWS}
    floor = Floor().start(FLOOR_BLOCKS)
    costs = []
    for labels in rows.values():
        mine = [s for s in specs if s.controller == labels[0]]
        if quick:
            mine = [replace(s, episode_s=QUICK_EPISODE_S) for s in mine[:QUICK_RUNS]]
        costs.append(fly_row(cfg, labels[0], mine, sum(runs_of[x] for x in labels)))
    for _ in range(FLOOR_BLOCKS):
        floor()
    floor.env.close()
    return budget_rows(costs, float(np.median(floor.times)))
