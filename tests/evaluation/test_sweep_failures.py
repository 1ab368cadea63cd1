"""A failing run never takes a sweep down: a controller that raises or acts non-finite in one run
gives that run a failure row (reason, label, scenario, seed, step and time) and the other runs
fly on, on every backend; the CLI exits with ``FAILED_RUNS_EXIT`` and a summary; ``--resume``
keeps recorded failures unless ``--retry-failed``; tables, figures and the report read them."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.controllers.driver import LawBatch, LawController
from residual_quad.evaluation.report.document import write_report
from residual_quad.evaluation.report.figures import make_figures
from residual_quad.evaluation.report.tables import focus_tables, make_tables
from residual_quad.evaluation.studies.stress import (
    StressConfig,
    format_table,
    run_stress,
    summarize,
)
from residual_quad.evaluation.sweep import (
    FAILED_RUNS_EXIT,
    SweepConfig,
    failed_rows,
    failure_summary,
    read_rows,
    run_sweep,
)

FAIL_STEP = 50  # the control step at which the flaky run fails (0.5 s at 100 Hz)
FLAKY = '''
"""A ``geo`` that fails in the run of seed ``fail_seed`` at control step ``fail_step``: a NaN
action (``mode=nan``) or an exception (``mode=raise``); ``FLAKY_OFF=1`` disables the failure."""

import os

import numpy as np

from residual_quad.controllers.specs import parse_spec


class Flaky:
    label = "flaky"
    action_mode = "rotor"

    def __init__(self, context, *, mode="nan", fail_seed=1, fail_step=50):
        self.geo = parse_spec("geo").build(context)
        self.mode, self.fail_seed, self.fail_step = mode, fail_seed, fail_step
        self.seed, self.k = None, 0

    def reset(self, seed=None):
        self.geo.reset(seed)
        self.seed, self.k = seed, 0

    def policy(self, obs):
        action = self.geo.policy(obs)
        failing = self.seed == self.fail_seed and self.k == self.fail_step
        self.k += 1
        if failing and os.environ.get("FLAKY_OFF") != "1":
            if self.mode == "raise":
                raise RuntimeError(f"flaky gave up at step {self.k - 1}")
            return np.full(4, np.nan)
        return action
'''
MATRIX = dict(
    payloads=["heavy"],
    winds=["windy"],
    trajectories=["helix"],
    seeds=[0, 1],
    episode_s=2.0,
    series=[],
)


@pytest.fixture
def flaky(tmp_path, monkeypatch):
    """``flaky_ctrl`` importable here and in spawned workers (``PYTHONPATH``)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "flaky_ctrl.py").write_text(textwrap.dedent(FLAKY))
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("PYTHONPATH", str(lib))
    monkeypatch.delenv("FLAKY_OFF", raising=False)
    yield lib
    sys.modules.pop("flaky_ctrl", None)


def _strip(rows):
    """Rows without the wall-clock time, keyed by run id."""
    return {r["run_id"]: {k: v for k, v in r.items() if k != "wall_time"} for r in rows}


def _cfg(controllers, **kw):
    return configs.load(SweepConfig, {**MATRIX, "controllers": controllers, **kw})


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "pool"])
def test_a_nan_action_is_a_failure_row_and_the_sweep_goes_on(flaky, tmp_path, workers):
    cfg = _cfg(["geo", {"spec": "flaky_ctrl:Flaky", "label": "flaky"}])
    rows = run_sweep(cfg, tmp_path / "out", backend="local", workers=workers, progress=False)
    assert len(rows) == 4 and len(read_rows(tmp_path / "out")) == 4
    (bad,) = failed_rows(rows)
    assert bad["run_id"] == "flaky|heavy|windy|helix|1"
    assert (bad["controller"], bad["payload"], bad["wind"], bad["trajectory"], bad["seed"]) == (
        "flaky",
        "heavy",
        "windy",
        "helix",
        1,
    )
    assert bad["failed"] is True and bad["error_type"] == "ValueError"
    assert bad["error"].startswith("ValueError: action must be finite")
    assert bad["failed_step"] == FAIL_STEP and bad["failed_t"] == pytest.approx(FAIL_STEP * 0.01)
    # the runs that did not fail are today's rows bit for bit (no new key)
    clean = run_sweep(_cfg(["geo"]), tmp_path / "clean", backend="local", workers=1, progress=False)
    got = _strip(rows)
    for run_id, row in _strip(clean).items():
        assert got[run_id] == row
    flaky_ok = got["flaky|heavy|windy|helix|0"]
    assert {k: v for k, v in flaky_ok.items() if k not in ("run_id", "controller")} == {
        k: v
        for k, v in _strip(clean)["geo|heavy|windy|helix|0"].items()
        if k not in ("run_id", "controller")
    }
    assert "failed" not in flaky_ok


def test_a_raising_controller_names_the_exception_and_where(flaky, tmp_path):
    cfg = _cfg([{"spec": "flaky_ctrl:Flaky", "options": {"mode": "raise"}, "label": "flaky"}])
    rows = run_sweep(cfg, tmp_path, backend="local", workers=1, progress=False)
    (bad,) = failed_rows(rows)
    assert bad["error"] == f"RuntimeError: flaky gave up at step {FAIL_STEP}"
    assert "flaky_ctrl.py" in bad["error_at"] and "in policy" in bad["error_at"]
    summary = failure_summary(rows)
    assert summary.startswith("1 of 2 runs failed")
    assert "flaky|heavy|windy|helix|1 at step 50: RuntimeError: flaky gave up" in summary


def _fail_geo_seed_1(monkeypatch):
    """``geo`` (one vehicle and a batch) acts NaN in the run of seed 1 at step ``FAIL_STEP``;
    every other law flies as it does."""
    batch_reset, batch_policy = LawBatch.reset_batch, LawBatch.policy_batch
    one_reset, one_policy = LawController.reset, LawController.policy

    def failing_batch_reset(self, seeds=None):
        batch_reset(self, seeds)
        self._seeds, self._k = list(seeds) if seeds is not None else [], 0

    def failing_batch_policy(self, obs):
        action = batch_policy(self, obs)
        if self.law.name == "geo" and self._k == FAIL_STEP and 1 in self._seeds:
            action[self._seeds.index(1)] = np.nan
        self._k += 1
        return action

    def failing_reset(self, seed=None):
        one_reset(self, seed)
        self._seed, self._k = seed, 0

    def failing_policy(self, obs):
        action = one_policy(self, obs)
        if self.law.name == "geo" and self._k == FAIL_STEP and self._seed == 1:
            action = np.full(4, np.nan)
        self._k += 1
        return action

    monkeypatch.setattr(LawBatch, "reset_batch", failing_batch_reset)
    monkeypatch.setattr(LawBatch, "policy_batch", failing_batch_policy)
    monkeypatch.setattr(LawController, "reset", failing_reset)
    monkeypatch.setattr(LawController, "policy", failing_policy)


def test_a_failure_inside_a_vector_batch_keeps_the_batch_s_other_runs(tmp_path, monkeypatch):
    cfg = _cfg(["pid", "geo"], payloads=["none", "heavy"])
    clean = run_sweep(cfg, tmp_path / "clean", backend="vector", workers=1, progress=False)
    _fail_geo_seed_1(monkeypatch)  # in-process: one worker flies its jobs itself
    rows = run_sweep(cfg, tmp_path / "out", backend="vector", workers=1, progress=False)
    assert len(rows) == 8
    bad = failed_rows(rows)
    assert [r["run_id"] for r in bad] == ["geo|none|windy|helix|1", "geo|heavy|windy|helix|1"]
    assert all(r["failed_step"] == FAIL_STEP and "finite" in r["error"] for r in bad)
    got, want = _strip(rows), _strip(clean)
    for run_id, row in want.items():
        if run_id not in {r["run_id"] for r in bad}:
            assert got[run_id] == row, run_id  # re-flown per label: the same numbers


def test_a_failed_stress_run_is_a_row_and_the_summary_counts_it(flaky, tmp_path):
    shipped = configs.load(StressConfig, "stress")
    cfg = configs.load(
        StressConfig,
        {
            "controllers": ["geo", {"spec": "flaky_ctrl:Flaky", "label": "flaky"}],
            "seeds": [0, 1],
            "episode_s": 1.0,
            "scenarios": [configs.to_dict(shipped)["scenarios"][0]],
        },
    )
    rows, _ = run_stress(cfg, tmp_path, workers=1)
    assert len(rows) == 4
    (bad,) = failed_rows(rows)
    assert (bad["scenario"], bad["group"], bad["seed"]) == ("yaw90_helix", "yaw", 1)
    assert bad["failed_step"] == FAIL_STEP
    summary = {s["controller"]: s for s in summarize(rows)}
    assert summary["flaky"]["failed"] == 1 and summary["flaky"]["runs"] == 2
    assert "failed" not in summary["geo"]
    assert "controller failed" in format_table(list(summary.values()))


def _write_cfg(tmp_path, controllers):
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps({**MATRIX, "controllers": controllers}))
    return str(path)


def test_the_cli_exits_3_with_a_summary_and_resume_keeps_the_failure(flaky, tmp_path, capsys):
    cfg = _write_cfg(tmp_path, ["geo", "flaky_ctrl:Flaky"])
    out = tmp_path / "out"
    argv = ["sweep", cfg, "--out", str(out), "--backend", "local", "--workers", "1"]
    assert main([*argv, "--no-report"]) == FAILED_RUNS_EXIT == 3
    err = capsys.readouterr().err
    assert "1 of 4 runs failed" in err and "flaky|heavy|windy|helix|1 at step 50" in err
    assert "--retry-failed" in err
    before = (out / "rows.jsonl").read_bytes()
    # --resume flies nothing: the failure is recorded, not forgotten
    assert main(["--debug", *argv, "--resume"]) == FAILED_RUNS_EXIT
    assert (out / "rows.jsonl").read_bytes() == before
    assert "Failed runs" in (out / "report.md").read_text()


def test_retry_failed_flies_the_failures_again(flaky, tmp_path, monkeypatch, capsys):
    cfg = _write_cfg(tmp_path, ["geo", "flaky_ctrl:Flaky"])
    out = tmp_path / "out"
    argv = ["sweep", cfg, "--out", str(out), "--backend", "local", "--workers", "1", "--no-report"]
    assert main(argv) == FAILED_RUNS_EXIT
    monkeypatch.setenv("FLAKY_OFF", "1")  # the controller is fixed
    assert main([*argv, "--retry-failed"]) == 0
    rows = read_rows(out)
    assert len(rows) == 4 and not failed_rows(rows)
    assert len((out / "rows.jsonl").read_text().splitlines()) == 4
    retried = _strip(rows)["flaky|heavy|windy|helix|1"]
    assert retried["steps"] == 200 and not retried["diverged"] and "failed" not in retried
    with pytest.raises(ValueError, match="needs resume=True"):
        run_sweep(_cfg(["geo"]), tmp_path / "x", retry_failed=True, progress=False)


def test_stress_and_pipeline_exit_3_on_failed_runs(flaky, tmp_path, monkeypatch, capsys):
    shipped = configs.to_dict(configs.load(StressConfig, "stress"))
    stress_cfg = tmp_path / "stress.yaml"
    stress_cfg.write_text(
        json.dumps(
            {
                "controllers": ["flaky_ctrl:Flaky"],
                "seeds": [1],
                "episode_s": 1.0,
                "scenarios": shipped["scenarios"][:1],
            }
        )
    )
    argv = ["stress", str(stress_cfg), "--out", str(tmp_path / "s"), "--workers", "1"]
    assert main([*argv, "--no-plot", "--quiet"]) == FAILED_RUNS_EXIT
    assert "flaky|yaw90_helix|1 at step 50" in capsys.readouterr().err

    import residual_quad.commands.pipeline as pipeline_cmd

    def fake_pipeline(cfg, out_dir, *, resume=False, retry_failed=False):
        rows = run_sweep(_cfg(["flaky_ctrl:Flaky"]), Path(out_dir) / "sweep", workers=1)
        return Path(out_dir) / "report.md" if rows else None

    monkeypatch.setattr(pipeline_cmd, "run_pipeline", fake_pipeline)
    assert main(["pipeline", "--out", str(tmp_path / "p")]) == FAILED_RUNS_EXIT
    assert "flaky|heavy|windy|helix|1" in capsys.readouterr().err


def test_tables_figures_and_report_read_failure_rows(flaky, tmp_path):
    cfg = _cfg(
        ["geo", "pid", "flaky_ctrl:Flaky"], trajectories=["helix", "hover"], episode_s=4.0
    )  # RMSE after 3 s
    rows = run_sweep(cfg, tmp_path, backend="local", workers=1, progress=False)
    assert len(failed_rows(rows)) == 2
    tables = make_tables(rows)
    main_table = tables["main"]
    flaky_col = main_table.headers.index("flaky")
    geo_col = main_table.headers.index("geo")
    # the mean is over the flaky run that flew (seed 0), equal to geo's seed-0 run
    geo0 = next(r for r in rows if r["run_id"] == "geo|heavy|windy|helix|0")
    assert main_table.rows[0][flaky_col] == pytest.approx(geo0["rmse"])
    assert main_table.rows[0][geo_col] != main_table.rows[0][flaky_col]
    fails = tables["failures"]
    assert fails.rows[0][:3] == ["flaky", 4, 2]
    assert "flaky|heavy|windy|helix|1: ValueError: action must be finite" in fails.rows[0][3]
    assert "(2 more run(s) failed" in focus_tables(rows, "flaky")
    report = write_report(rows, tmp_path / "report").read_text()
    assert "**2 more run(s) failed**" in report and "Failed runs" in report
    figs = make_figures(rows, tmp_path, tmp_path / "figures", animation=False)
    assert figs
    every_failed = [r for r in rows if r["controller"] != "flaky" or r.get("failed")]
    with pytest.raises(ValueError, match="every run of controller 'flaky' failed"):
        focus_tables([r for r in every_failed if r["controller"] == "flaky"], "flaky")
