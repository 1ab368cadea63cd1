"""The committed recovery rows (``docs/recovery/``) re-fly: a sample of runs flown again with the
shipped configs gives the committed recovery columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.evaluation.sweep import SweepConfig, expand, read_rows
from residual_quad.evaluation.sweep.engine import run_one
from residual_quad.evaluation.sweep.recovery import RECOVERY_COLUMNS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recovery"
SAMPLE = [
    ("payload", "pid|none|breezy|hover|3"),
    ("rotor", "geo|none|breezy|helix|7"),
]


@pytest.mark.parametrize(("study", "run_id"), SAMPLE)
def test_committed_recovery_rows_reproduce(study, run_id):
    committed = {r["run_id"]: r for r in read_rows(DOCS / study)}[run_id]
    cfg = configs.load(SweepConfig, DOCS / study / "sweep_config.yaml", controllers=["pid", "geo"])
    spec = next(s for s in expand(cfg) if s.run_id == run_id)
    row = run_one(spec, cfg)
    for key in (*RECOVERY_COLUMNS, "rmse", "max_error", "diverged"):
        u, v = row[key], committed[key]
        assert u == pytest.approx(v, rel=1e-9, abs=1e-12) if isinstance(v, float) else u == v, key


def test_the_committed_studies_are_the_shipped_configs():
    pytest.importorskip("stable_baselines3")  # the configs list ppo and ppo_res
    for study in ("payload", "rotor"):
        committed = configs.to_dict(configs.load(SweepConfig, DOCS / study / "sweep_config.yaml"))
        shipped = configs.to_dict(configs.load(SweepConfig, f"recovery_{study}"))
        assert committed == shipped, study
        assert len(read_rows(DOCS / study)) == len(expand(SweepConfig(**shipped)))
