"""``rquad bench --sections sweep``: the matrix of the four source trackers flown by the ``local``
backend (a process pool, one run per job) and by the ``vector`` backend (batches on the vector
env), one after the other in the same run, with every core.

Each backend is timed once (a 432-run matrix takes tens of seconds; ``--quick``: seed 0 only,
144 runs), reported per env-step (wall time / (runs × steps)); the row names carry the wall
seconds, and the vector row's ratio is to the local one. The target: the 432 runs within
15 s on a quiet 2-core machine. Nothing is written outside a temporary folder.
"""

from __future__ import annotations

import os
import tempfile
import time

from residual_quad.controllers.base import SOURCE_TRACKERS
from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "sweep"


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.evaluation.sweep.config import SweepConfig
    from residual_quad.evaluation.sweep.engine import run_sweep

    cfg = SweepConfig(
        controllers=list(SOURCE_TRACKERS), seeds=[0] if quick else [0, 1, 2], series=[]
    )
    workers = os.cpu_count() or 1
    rows: list[BenchRow] = []
    local_us = None
    for backend in ("local", "vector"):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            flown = run_sweep(cfg, out, backend=backend, workers=workers, progress=False)
            wall = time.perf_counter() - t0
        env_steps = sum(r["steps"] for r in flown)
        us = wall / env_steps * 1e6
        if backend == "local":
            local_us = us
        rows.append(
            BenchRow(
                SECTION,
                f"{len(flown)}-run matrix, {backend}, {workers} cores: {wall:.1f} s",
                us,
                None if backend == "local" else us / local_us,
                "" if backend == "local" else "local",
                "432 runs <= 15 s" if backend == "vector" and not quick else "",
            )
        )
    return rows
