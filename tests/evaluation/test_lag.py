"""The lag sweep's grid, and its table and figure read from rows alone (no flight here: the
pipeline's beyond-stage tests fly a tiny one)."""

from __future__ import annotations

import json

import pytest

from residual_quad import configs
from residual_quad.evaluation.report.lag import (
    lag_extras,
    lag_rows,
    lag_sweeps,
    lag_table,
    plant_folder,
)
from residual_quad.evaluation.sweep.config import CONFIG_FILE, SweepConfig

MATRIX = SweepConfig(
    controllers=["pid", "geo_rls"],
    payloads=["extra"],
    winds=["windy"],
    trajectories=["helix", "figure8"],
    seeds=[0, 1],
    episode_s=20.0,
    env={"preset": "realistic"},
    series=[],
)


def test_the_grid_sets_the_rotors_and_both_latencies_over_the_matrixs_env():
    plants = lag_sweeps(MATRIX, [0.02, 0.08], [0, 2])
    assert [f for f, _ in plants] == [
        "tau020ms_delay0",
        "tau020ms_delay2",
        "tau080ms_delay0",
        "tau080ms_delay2",
    ]
    env = plants[-1][1].env
    assert env == {
        "preset": "realistic",
        "rotor_tau_s": 0.08,
        "action_delay_steps": 2,
        "obs_delay_steps": 2,
    }
    assert plants[0][1].controllers == MATRIX.controllers and MATRIX.env == {"preset": "realistic"}
    with pytest.raises(ValueError, match="rotor_tau_s"):
        lag_sweeps(MATRIX, [-0.01], [0])
    with pytest.raises(ValueError, match="action_delay_steps"):
        lag_sweeps(MATRIX, [0.06], [-1])


def _row(controller, trajectory, seed, rmse, diverged=False):
    run_id = f"{controller}|extra|windy|{trajectory}|{seed}"
    return {
        "run_id": run_id,
        "controller": controller,
        "payload": "extra",
        "payload_kg": 0.45,
        "wind": "windy",
        "trajectory": trajectory,
        "seed": seed,
        "rmse": float("inf") if diverged else rmse,
        "max_error": rmse,
        "diverged": diverged,
        "termination": "tilt" if diverged else None,
        "steps": 2000,
    }


def _plant(out, tau, delay, rows):
    """A plant folder as the pipeline leaves it: its saved config and its rows."""
    ((folder, cfg),) = lag_sweeps(MATRIX, [tau], [delay])
    d = out / "lag" / folder
    d.mkdir(parents=True)
    configs.dump(cfg, d / CONFIG_FILE)
    (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_table_reads_each_plant_from_its_saved_config_in_grid_order(tmp_path):
    out = tmp_path / "pipe"
    assert lag_rows(out) == [] and lag_table([]) is None and lag_extras(out).tables == []
    calm = [
        _row(c, t, s, 0.05 + 0.01 * s)
        for c in ("pid", "geo_rls")
        for t in ("helix", "figure8")
        for s in (0, 1)
    ]
    worse = [_row("pid", t, s, 0.10 + 0.02 * s) for t in ("helix", "figure8") for s in (0, 1)]
    worse += [_row("geo_rls", "helix", 0, 0.2), _row("geo_rls", "helix", 1, 0.0, diverged=True)]
    worse += [_row("geo_rls", "figure8", s, 0.3) for s in (0, 1)]
    _plant(out, 0.08, 2, worse)  # written first: the table still puts it last
    _plant(out, 0.02, 0, calm)
    rows = lag_rows(out)
    assert [r["plant"] for r in rows][:1] == ["τ 20 ms, latency 0"]
    assert {(r["rotor_tau_s"], r["delay_steps"]) for r in rows} == {(0.02, 0), (0.08, 2)}
    table = lag_table(rows)
    assert table.headers == ["plant", "pid", "geo_rls"]
    first, last = table.rows
    assert first[0] == "τ 20 ms, latency 0" and last[0] == "τ 80 ms, latency 2"
    assert first[1] == pytest.approx(0.055) and last[1] == pytest.approx(0.11)
    # a crash is counted next to the mean of the runs that flew, never averaged in
    assert last[2] == f"{(0.2 + 0.3 + 0.3) / 3:.4f} (1/4 div.)"
    ivs = table.intervals["pid"]
    assert ivs[0].kind == "bootstrap" and ivs[0].low <= 0.055 <= ivs[0].high
    extras = lag_extras(out)
    assert extras.tables[0].name == "lag" and "`lag/<plant>/rows.jsonl`" in extras.tables[0].note
    assert extras.figures["lag sweep"] == out / "figures" / "lag.png"
    assert (out / "figures" / "lag.png").stat().st_size > 0


def test_a_plant_folder_with_a_failed_run_keeps_the_others(tmp_path):
    out = tmp_path / "pipe"
    failed = {"run_id": "pid|extra|windy|helix|1", "controller": "pid", "failed": True}
    flown = [_row("pid", t, s, 0.1) for t in ("helix", "figure8") for s in (0, 1)]
    _plant(out, 0.06, 1, [*flown[:1], failed, *flown[2:]])
    rows = lag_rows(out)
    assert len(rows) == 3 and not any(r.get("failed") for r in rows)
    assert plant_folder(0.06, 1) == "tau060ms_delay1"
