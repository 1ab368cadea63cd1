"""The sweep engine: rows, resume after a kill, Ray parity, tables computed from rows only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.evaluation.report.tables import make_tables
from residual_quad.evaluation.sweep import SweepConfig, expand, read_rows, run_sweep

SMALL = dict(
    controllers=["pid", "geo"],
    payloads=["none", "heavy"],
    winds=["calm", "windy"],
    trajectories=["helix"],
    seeds=[0],
    episode_s=4.0,
)


def _strip(rows):
    """Rows without the wall-clock time, keyed by run id."""
    return {r["run_id"]: {k: v for k, v in r.items() if k != "wall_time"} for r in rows}


def test_rows_written_and_config_saved(tmp_path):
    cfg = SweepConfig(**SMALL)
    rows = run_sweep(cfg, tmp_path, workers=1, progress=False)
    assert len(rows) == len(expand(cfg)) == 8
    on_disk = read_rows(tmp_path)
    assert _strip(on_disk) == _strip(rows)
    saved = configs.load(SweepConfig, tmp_path / "sweep_config.yaml")
    assert saved == cfg
    with pytest.raises(ValueError, match="resume"):
        run_sweep(cfg, tmp_path, workers=1, progress=False)


def test_process_pool_matches_serial(tmp_path):
    cfg = SweepConfig(**SMALL)
    serial = run_sweep(cfg, tmp_path / "a", workers=1, progress=False)
    pooled = run_sweep(cfg, tmp_path / "b", workers=2, progress=False)
    assert _strip(serial) == _strip(pooled)


def test_ray_backend_gives_identical_rows(tmp_path):
    ray = pytest.importorskip("ray")
    cfg = SweepConfig(**SMALL)
    local = run_sweep(cfg, tmp_path / "local", backend="local", workers=1, progress=False)
    try:
        remote = run_sweep(cfg, tmp_path / "ray", backend="ray", workers=2, progress=False)
    finally:
        ray.shutdown()
    assert _strip(local) == _strip(remote)


def test_killed_sweep_resumes_to_the_uninterrupted_rows(tmp_path):
    cfg = SweepConfig(**{**SMALL, "seeds": [0, 1]})  # 16 runs
    full = run_sweep(cfg, tmp_path / "full", backend="local", workers=1, progress=False)
    cfg_path = configs.dump(cfg, tmp_path / "cfg.yaml")
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "residual_quad.cli",
        "sweep",
        str(cfg_path),
        "--out",
        str(out),
        "--workers",
        "1",
        "--backend",
        "local",
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows_file = out / "rows.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        if rows_file.exists() and len(read_rows(rows_file)) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = read_rows(rows_file)
    assert 3 <= len(partial) < 16, "the sweep should have been killed midway"
    resumed = run_sweep(cfg, out, resume=True, backend="local", workers=1, progress=False)
    assert _strip(resumed) == _strip(full)
    assert len(read_rows(rows_file)) == 16  # nothing duplicated


def test_incomplete_last_line_is_ignored_and_repaired(tmp_path):
    cfg = SweepConfig(**{**SMALL, "payloads": ["none"], "winds": ["calm"]})  # 2 runs
    rows = run_sweep(cfg, tmp_path, workers=1, progress=False)
    path = tmp_path / "rows.jsonl"
    text = path.read_text().splitlines()
    path.write_text(text[0] + "\n" + text[1][:25])  # a writer killed mid-line
    assert len(read_rows(path)) == 1
    again = run_sweep(cfg, tmp_path, resume=True, workers=1, progress=False)
    assert _strip(again) == _strip(rows)


def test_unknown_controller_and_keys_are_errors(tmp_path):
    with pytest.raises(ValueError, match="valid choices"):
        SweepConfig(controllers=["lqr"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("controllers: [geo]\nseed: [1]\n")
    with pytest.raises(ValueError, match="unknown key.*seed.*valid keys"):
        configs.load(SweepConfig, bad)


def _row(controller, payload, wind, trajectory, seed, rmse, cost, diverged=False):
    kg = {"none": 0.0, "light": 0.25, "heavy": 0.5, "extra": 0.75}[payload]
    return {
        "run_id": f"{controller}|{payload}|{wind}|{trajectory}|{seed}",
        "controller": controller,
        "payload": payload,
        "payload_kg": kg,
        "wind": wind,
        "trajectory": trajectory,
        "seed": seed,
        "rmse": rmse,
        "max_error": rmse,
        "diverged": diverged,
        "termination": "tilt" if diverged else None,
        "control_cost": cost,
        "residual_bias": None,
        "residual_bias_z": None,
    }


def test_tables_are_computed_from_rows_only(tmp_path):
    rows = [
        _row("geo", "heavy", "calm", "helix", 0, 0.10, 100.0),
        _row("geo", "heavy", "calm", "helix", 1, 0.20, 110.0),
        _row("geo", "heavy", "calm", "figure8", 0, 0.30, 120.0),
        _row("geo", "heavy", "calm", "hover", 0, 0.99, 999.0),  # not in the main table
        _row("pid", "heavy", "calm", "helix", 0, 0.05, 104.0),
        _row("pid", "heavy", "calm", "figure8", 0, 0.07, 106.0),
        _row("geo", "light", "calm", "hover", 0, 0.125, 50.0),
        _row("pid", "none", "windy", "helix", 0, 0.5, 1.0, diverged=True),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tables = make_tables(read_rows(path))
    main = {(r[0], r[1]): r[2:] for r in tables["main"].rows}
    assert tables["main"].headers == ["payload", "wind", "pid", "geo"]
    assert main[("heavy", "calm")] == [pytest.approx(0.06), pytest.approx(0.20)]
    assert "1/1 div." in main[("none", "windy")][0]
    hover = tables["hover_check"].rows[0]
    analytic = 9.81 * 0.25 / 0.95 / 20.0
    assert hover[2] == pytest.approx(analytic) and hover[4] == pytest.approx(0.125 / analytic)
    cost = {(r[0], r[1]): r for r in tables["control_cost"].rows}[("heavy", "calm")]
    assert cost[2] == pytest.approx(105.0) and cost[3] == pytest.approx(110.0)
    assert cost[4] == pytest.approx((110.0 - 105.0) / 105.0 * 100)  # the source's trackers
    assert cost[5] == pytest.approx((110.0 - 105.0) / 105.0 * 100)  # all (the same two here)
    div = {r[0]: r for r in tables["divergence"].rows}
    assert div["pid"][2] == 1 and div["geo"][2] == 0


def test_report_lists_targets_and_figures(tmp_path):
    from residual_quad.evaluation.report.document import write_report
    from residual_quad.evaluation.report.figures import make_figures

    cfg = SweepConfig(**{**SMALL, "series": [{"payload": "heavy", "wind": "windy"}]})
    rows = run_sweep(cfg, tmp_path, workers=1, progress=False)
    figs = make_figures(rows, tmp_path, tmp_path / "figures", animation=False)
    assert {"disturbance_models", "tracking_comparison", "payload_sweep", "wind_sweep"} <= set(figs)
    report = write_report(rows, tmp_path, figs).read_text()
    assert "| diverged runs | 0 | 0 / 8 | met |" in report
    assert "figures/tracking_comparison.png" in report
    assert Path(tmp_path / "tables" / "main.csv").exists()


def test_focus_tables_from_hand_made_rows():
    from residual_quad.evaluation.report.tables import focus_tables

    def row(c, p, w, t, rmse, diverged=False):
        return {
            "controller": c,
            "payload": p,
            "wind": w,
            "trajectory": t,
            "rmse": rmse,
            "diverged": diverged,
            "termination": "tilt" if diverged else None,
        }

    rows = [
        row("ppo", "none", "calm", "hover", 0.1),
        row("ppo", "none", "windy", "hover", 0.3),
        row("geo", "none", "calm", "hover", 0.02),
        row("geo", "none", "windy", "hover", None, diverged=True),
    ]
    md = focus_tables(rows, "ppo")
    assert "`ppo`: 0 crash(es) in 2 flights." in md
    assert "| none | 0.100 | 0.300 |" in md  # hover calm, hover windy
    assert "| none | hover | 0.200 | crash (tilt) |" in md  # mean over winds; geo crashed once
    with pytest.raises(ValueError, match="no rows"):
        focus_tables(rows, "pid")
