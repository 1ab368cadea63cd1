"""``rquad bench --sections pipeline`` reads the stage times a pipeline run records and sets the
report stage against the pipeline and the evaluation against its MuJoCo floor."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from residual_quad.evaluation.bench import pipeline as bench_pipeline
from residual_quad.evaluation.studies import pipeline


def test_rows_give_the_report_share_and_the_evaluation_over_its_floor(monkeypatch):
    stages = {"collect": 10.0, "train": 5.0, "evaluate": 170.0, "report": 15.0}
    flown = []

    def fake_pipeline(cfg, out):
        flown.append(cfg)
        record = {**stages, "evaluate_env_steps": 2_000_000}
        (Path(out) / pipeline.TIMINGS_FILE).write_text(json.dumps(record))

    monkeypatch.setattr(pipeline, "run_pipeline", fake_pipeline)
    rows = {r.name.split(":")[0]: r for r in bench_pipeline.run(quick=True)}
    assert flown == [pipeline.QUICK]
    floor = rows["evaluation floor"]
    cores = os.cpu_count() or 1
    assert floor.ratio == 1.0 and f"/ {cores} cores" in floor.name
    report = rows["quick pipeline, report"]
    assert report.ratio == pytest.approx(15.0 / 200.0) and report.ratio_to == "pipeline"
    assert report.median_us == pytest.approx(15.0 / 2e6 * 1e6)
    assert "<= 10 %" in report.target
    evaluate = rows["quick pipeline, evaluate"]
    assert evaluate.ratio == pytest.approx(evaluate.median_us / floor.median_us)
    assert rows["quick pipeline, report vs evaluate"].ratio == pytest.approx(15.0 / 170.0)


def test_the_beyond_stage_is_timed_per_its_own_env_steps(monkeypatch):
    stages = {"collect": 10.0, "train": 5.0, "evaluate": 170.0, "report": 15.0}
    stages = {**stages, pipeline.BEYOND_STAGE: 50.0}

    def fake_pipeline(cfg, out):
        record = {**stages, "evaluate_env_steps": 2_000_000, "beyond_env_steps": 500_000}
        (Path(out) / pipeline.TIMINGS_FILE).write_text(json.dumps(record))

    monkeypatch.setattr(pipeline, "run_pipeline", fake_pipeline)
    rows = {r.name.split(":")[0]: r for r in bench_pipeline.run(quick=True)}
    beyond = rows[f"quick pipeline, {pipeline.BEYOND_STAGE}"]
    assert beyond.median_us == pytest.approx(50.0 / 500_000 * 1e6)
    assert beyond.ratio_to == "floor"
    assert "of 250 s" in beyond.name  # the env-step counts are no stage
    assert rows["quick pipeline, report"].ratio == pytest.approx(15.0 / 250.0)
