"""Recovery metrics: known answers on synthetic errors, the rows of runs with and without events,
the two sweep backends alike, and the table and figure read from rows only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.evaluation.report.recovery import recovery_figure, recovery_table
from residual_quad.evaluation.sweep import SERIES_DIR, SweepConfig, expand
from residual_quad.evaluation.sweep.engine import run_batch, run_one
from residual_quad.evaluation.sweep.recovery import (
    RECOVERY_COLUMNS,
    RecoverySpec,
    events_label,
    recovery_metrics,
    recovery_spec,
)

DT = 0.01  # s
T = np.arange(0, 2001) * DT  # s, a 20 s episode's time stamps
SPEC = RecoverySpec("payload@5s:mass_kg=0.5", 5.0, 0.05)


def _triangle(peak: float, t_peak: float, t_back: float) -> np.ndarray:
    """0 before 5 s, rising linearly to ``peak`` at ``5 + t_peak``, back to 0 at ``5 + t_back``."""
    e = np.interp(T, [0, 5, 5 + t_peak, 5 + t_back, 20], [0, 0, peak, 0, 0])
    return e


def test_peak_time_and_integral_of_a_triangle_are_the_analytic_ones():
    e = _triangle(0.3, 0.5, 2.5)
    m = recovery_metrics(T, e, SPEC, diverged=False)
    assert m["recovery_peak_m"] == pytest.approx(0.3, abs=1e-12)
    # back below 0.05 m on the way down: 2.5 − (2.5 − 0.5)·0.05/0.3 s after the event
    t_in = 2.5 - 2.0 * 0.05 / 0.3
    assert m["recovery_time_s"] == pytest.approx(math.ceil(t_in / DT - 1e-9) * DT, abs=1e-9)
    assert m["recovered"] is True
    # the triangle's area, to the rectangle rule's O(dt) error
    assert m["recovery_iae_m_s"] == pytest.approx(0.5 * 0.3 * 2.5, abs=0.3 * DT)
    assert tuple(m) == RECOVERY_COLUMNS


def test_an_error_that_never_leaves_the_band_recovers_in_zero_seconds():
    m = recovery_metrics(T, _triangle(0.04, 0.5, 1.0), SPEC, diverged=False)
    assert (m["recovery_time_s"], m["recovered"]) == (0.0, True)


def test_an_error_outside_the_band_at_the_end_never_recovers():
    e = _triangle(0.3, 0.5, 2.5) + np.where(T >= 5.0, 0.06, 0.0)  # settles at 6 cm
    m = recovery_metrics(T, e, SPEC, diverged=False)
    assert (m["recovery_time_s"], m["recovered"]) == (None, False)
    assert m["recovery_iae_m_s"] is not None


def test_a_crash_never_recovers_and_has_no_full_window():
    t, e = T[:700], _triangle(0.3, 0.5, 2.5)[:700]  # crashed at 7 s
    m = recovery_metrics(t, e, SPEC, diverged=True)
    assert (m["recovery_time_s"], m["recovered"], m["recovery_iae_m_s"]) == (None, False, None)
    assert m["recovery_peak_m"] == pytest.approx(0.3, abs=1e-12)


def test_a_wider_band_recovers_sooner():
    e = _triangle(0.3, 0.5, 2.5)
    narrow = recovery_metrics(T, e, SPEC, diverged=False)
    wide = recovery_metrics(T, e, RecoverySpec(SPEC.events, 5.0, 0.2), diverged=False)
    assert wide["recovery_time_s"] < narrow["recovery_time_s"]


def test_recovery_spec_fires_at_a_control_period_start_and_is_none_without_events():
    assert recovery_spec({}, 20.0) is None
    spec = recovery_spec({"events": [{"kind": "wind", "t_s": 2.004, "mean_mps": [1, 0, 0]}]}, 20.0)
    assert spec.event_t_s == pytest.approx(2.01)  # the next 100 Hz period start
    assert spec.events == "wind@2.004s:mean_mps=1/0/0,rise_s=1"
    with pytest.raises(ValueError, match="recovery_band_m"):
        recovery_spec({}, 20.0, band_m=0.0)
    assert events_label([{"kind": "rotor", "t_s": 5, "rotor": 0, "efficiency": 0.7}], 20.0) == (
        "rotor@5s:rotor=0,efficiency=0.7"
    )


EVENTS = [{"kind": "payload", "t_s": 1.0, "mass_kg": 0.5}]


@pytest.mark.slow
def test_rows_carry_recovery_columns_only_with_events_and_the_batch_path_agrees(tmp_path):
    matrix = dict(
        controllers=["pid", "geo_rls"],
        payloads=["none"],
        winds=["breezy"],
        trajectories=["hover"],
        seeds=[0],
        episode_s=6.5,
        series=[{}],
    )
    plain_cfg = SweepConfig(**matrix)
    plain = [run_one(s, plain_cfg) for s in expand(plain_cfg)]
    assert not any(set(RECOVERY_COLUMNS) & set(r) for r in plain)
    cfg = SweepConfig(**matrix, env={"events": EVENTS}, recovery_band_m=0.05)
    specs = expand(cfg)
    series = tmp_path / SERIES_DIR
    series.mkdir()
    local = [run_one(s, cfg, str(series)) for s in specs]
    batch = run_batch(specs, cfg, [None] * len(specs))
    for a, b in zip(local, batch, strict=True):
        for key in RECOVERY_COLUMNS:
            u, v = a[key], b[key]
            assert u == pytest.approx(v, rel=1e-9, abs=1e-12) if isinstance(u, float) else u == v
    pid, rls = local
    assert pid["recovered"] and pid["recovery_peak_m"] > 0.1 and pid["recovery_time_s"] > 1.0
    assert rls["recovery_peak_m"] < 0.05 and rls["recovery_time_s"] == 0.0
    table = recovery_table(local)
    assert [row[3] for row in table.rows] == ["pid", "geo_rls"]
    assert table.rows[0][4:7] == [1, 0, 1]
    assert recovery_table(plain) is None
    fig = recovery_figure(local, series, tmp_path / "fig")
    assert fig is not None and fig.stat().st_size > 0


def test_rows_without_recovery_columns_read_as_nan_in_the_table():
    rows = [
        {"run_id": "a", "controller": "geo", "trajectory": "hover", "payload": "none",
         "wind": "calm", "diverged": True, "events": "x", "event_t_s": 1.0,
         "recovery_band_m": 0.05, "recovered": False},
    ]  # fmt: skip
    table = recovery_table(rows)
    assert table.rows[0][5:] == [1, 0, "–", "–", "–"]


def test_bad_events_in_a_sweep_config_are_errors_at_load():
    with pytest.raises(ValueError, match="valid choices: payload, wind, rotor"):
        SweepConfig(controllers=["geo"], env={"events": [{"kind": "gust", "t_s": 1.0}]})
    with pytest.raises(ValueError, match="outside the episode"):
        SweepConfig(
            controllers=["geo"],
            episode_s=5.0,
            env={"events": [{"kind": "payload", "t_s": 6.0, "mass_kg": 0.1}]},
        )
