"""`rquad pipeline --quick` produces every artifact (slower: second CI step)."""

from __future__ import annotations

import json

import pytest

from residual_quad.cli import main
from residual_quad.evaluation.sweep import read_rows


@pytest.mark.slow
def test_quick_pipeline_produces_every_artifact(tmp_path):
    out = tmp_path / "pipe"
    assert main(["pipeline", "--quick", "--out", str(out), "--workers", "2"]) == 0
    for rel in (
        "pipeline_config.yaml",
        "data/dataset.npz",
        "data/dataset.yaml",
        "model/residual.npz",
        "sweep/rows.jsonl",
        "sweep/sweep_config.yaml",
        "tables/main.csv",
        "tables/tables.md",
        "figures/disturbance_models.png",
        "figures/residual_learning.png",
        "figures/tracking_comparison.png",
        "figures/payload_sweep.png",
        "figures/wind_sweep.png",
        "figures/rls_adaptation.png",
        "report.md",
        "pipeline_timings.json",
        "beyond/rows.jsonl",
        "beyond/sweep_config.yaml",
        "recovery/recovery_payload/rows.jsonl",
        "recovery/recovery_rotor/sweep_config.yaml",
        "figures/recovery/recovery_payload.png",
        "figures/recovery/recovery_rotor.png",
        "tables/beyond_matrix.csv",
        "tables/beyond_recovery.csv",
        "lag/tau030ms_delay1/rows.jsonl",
        "lag/tau060ms_delay1/sweep_config.yaml",
        "figures/lag.png",
        "tables/beyond_lag.csv",
    ):
        assert (out / rel).exists(), rel
    timings = json.loads((out / "pipeline_timings.json").read_text())
    assert list(timings) == [
        "collect",
        "train",
        "evaluate",
        "evaluate, beyond the source",
        "report",
        "evaluate_env_steps",
        "beyond_env_steps",
    ]
    assert timings["evaluate_env_steps"] == sum(r["steps"] for r in read_rows(out / "sweep"))
    beyond_dirs = (
        "beyond",
        "recovery/recovery_payload",
        "recovery/recovery_rotor",
        "lag/tau030ms_delay1",
        "lag/tau060ms_delay1",
    )
    assert timings["beyond_env_steps"] == sum(
        r["steps"] for d in beyond_dirs for r in read_rows(out / d)
    )
    assert any((out / "tensorboard" / "residual_train").iterdir())
    report = (out / "report.md").read_text()
    assert "## Targets from the source [RES §9]" in report
    assert "figures/rls_adaptation.png" in report
    beyond = report[report.index("## Beyond the source: sweep_realistic") :]
    assert "**Recovery after the first event" in beyond
    assert "![recovery, recovery_rotor](figures/recovery/recovery_rotor.png)" in beyond
    outcome = json.loads((out / "outcome.json").read_text())
    assert set(outcome["beyond"]) == {
        "sweep_realistic",
        "recovery_payload",
        "recovery_rotor",
        "lag/tau030ms_delay1",
        "lag/tau060ms_delay1",
    }
    assert "![lag sweep](figures/lag.png)" in beyond
    # ppo flies its policy retrained on the realistic plant: not among the expected crashes
    assert outcome["beyond"]["sweep_realistic"]["retrained"] == ["ppo"]
    assert "not expected" not in beyond
    # resume reuses every finished stage and run
    assert main(["pipeline", "--quick", "--out", str(out), "--resume", "--workers", "1"]) == 0
    assert (out / "report.md").read_text().count("## Beyond the source") == 1
