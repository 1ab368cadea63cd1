"""``rquad bench --sections pipeline``: the pipeline's stages side by side, and the evaluation
against its MuJoCo floor.

Runs ``rquad pipeline`` once into a temporary folder (``--quick``: the quick profile, about a
minute; otherwise the full one, about four) with every core, then reads the stage times it
records (``pipeline_timings.json``). Rows, each per env-step of the evaluation (the stage's wall
time over the env-steps it flew, µs; the name carries the wall seconds):

* every stage, with its share of the pipeline as the ratio (the report stage's target: ≤ 10 %);
* the evaluation's floor: the same env-steps at the cost of raw ``mj_step`` × substeps on one
  model (timed before and after the pipeline, median of the blocks) spread over the same cores;
  the evaluation row's ratio to it is what the controllers, the disturbances, the task step and
  the sweep engine add to the engine.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "pipeline"
REPORT_SHARE_TARGET = "report <= 10 % of the pipeline"


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.evaluation.bench.vector import Floor
    from residual_quad.evaluation.studies.pipeline import (
        BEYOND_STAGE,  # timed per env-step of its own sweeps
        QUICK,
        TIMINGS_FILE,
        PipelineConfig,
        run_pipeline,
    )

    cores = os.cpu_count() or 1
    floor = Floor().start(5)
    cfg = QUICK if quick else PipelineConfig()
    with tempfile.TemporaryDirectory() as out:
        run_pipeline(cfg, out)
        timings = json.loads((Path(out) / TIMINGS_FILE).read_text())
    for _ in range(5):
        floor()
    floor.env.close()
    floor_us = float(np.median(floor.times))
    env_steps = int(timings.pop("evaluate_env_steps"))
    steps = {BEYOND_STAGE: int(timings.pop("beyond_env_steps", 0))}  # its own env-steps
    total = sum(timings.values())
    per_step = {k: v / (steps.get(k) or env_steps) * 1e6 for k, v in timings.items()}
    floor_share = floor_us / cores  # µs per env-step with every core busy
    profile = "quick" if quick else "full"
    rows = [
        BenchRow(
            SECTION,
            f"evaluation floor: {env_steps} env-steps x raw mj_step / {cores} cores: "
            f"{floor_share * env_steps / 1e6:.1f} s",
            floor_share,
            1.0,
        )
    ]
    for stage, us in per_step.items():
        is_eval = stage in ("evaluate", BEYOND_STAGE)
        rows.append(
            BenchRow(
                SECTION,
                f"{profile} pipeline, {stage}: {timings[stage]:.1f} s of {total:.0f} s",
                us,
                us / floor_share if is_eval else timings[stage] / total,
                "floor" if is_eval else "pipeline",
                REPORT_SHARE_TARGET if stage == "report" else "",
            )
        )
    rows.append(
        BenchRow(
            SECTION,
            f"{profile} pipeline, report vs evaluate",
            per_step["report"],
            timings["report"] / timings["evaluate"],
            "evaluate",
        )
    )
    return rows
