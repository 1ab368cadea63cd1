"""hnewton stress study: strict stress config and the ``rquad stress`` command."""

from __future__ import annotations

import json

import numpy as np
import pytest


# ------------------------------------------------------------------------------ stress set
def test_stress_config_is_strict_and_complete() -> None:
    from residual_quad import configs
    from residual_quad.episode import parse_label
    from residual_quad.evaluation.studies.stress import StressConfig

    def load_stress_config(source):
        return configs.load(StressConfig, source)

    cfg = load_stress_config("stress")
    groups = {s.group for s in cfg.scenarios}
    assert groups == {"yaw", "envelope", "gust"}
    gusts = [s for s in cfg.scenarios if s.group == "gust"]
    assert all(s.wind[0] >= 6.0 and s.wind[1] >= 3.0 for s in gusts)
    assert parse_label("hnewton:lm") == ("hnewton", {"method": "lm"})
    with pytest.raises(ValueError, match="valid keys"):
        load_stress_config({"scenarios": [{"name": "x", "group": "yaw", "yaw_ofset_deg": 90}]})
    with pytest.raises(ValueError):
        parse_label("geo:lm")
    with pytest.raises(ValueError):
        load_stress_config({"scenarios": [{"name": "x", "group": "yaw", "trajectory": "loop"}]})


def test_stress_cli_runs_and_summarizes(tmp_path) -> None:
    from residual_quad.cli import main
    from residual_quad.evaluation.studies.stress import survival_check

    args = ["stress", "--controllers", "geo,hnewton", "--scenarios", "yaw90_fig8fast_extra"]
    args += ["--seeds", "0", "--episode-s", "3", "--out", str(tmp_path), "--no-plot", "--quiet"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["controller"] for r in rows] == ["geo", "hnewton"]
    geo, hn = rows
    assert geo["crashed"] and not geo["survived"]  # the 90° start drives geo into the floor
    assert hn["survived"] and hn["max_tilt_deg"] < 70.0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert survival_check(summary) == {"crashed_or_flipped": [], "lost": []}
    assert "| yaw90_fig8fast_extra | hnewton | 1/1 |" in (tmp_path / "stress.md").read_text()


def test_stress_and_nominal_fly_hnewton_batched_with_the_single_flights_rows(tmp_path) -> None:
    """The vector backend (the default) flies hnewton/hnewton_rls batched on the vector env; its
    rows and saved tilt series equal one flight per run to 1e-9, discrete columns exactly."""
    from residual_quad import configs
    from residual_quad.evaluation.studies.stress import StressConfig, nominal_comparison, run_stress

    full = configs.load(StressConfig, "stress")
    cfg = StressConfig(
        ["hnewton_rls", "hnewton:bfgs"],
        [0, 1],
        1.5,
        {},
        [s for s in full.scenarios if s.name == "yaw90_fig8fast_extra"],  # limits bind
    )
    vec, vec_series = run_stress(cfg, tmp_path / "vector", workers=1)
    loc, loc_series = run_stress(cfg, tmp_path / "local", workers=1, backend="local")
    assert [r["run_id"] for r in vec] == [r["run_id"] for r in loc]
    for a, b in zip(vec, loc, strict=True):
        for key, value in b.items():
            if key == "wall_time":
                continue
            if isinstance(value, float):
                assert abs(a[key] - value) <= 1e-9 * max(1.0, abs(value)), (a["run_id"], key)
            else:
                assert a[key] == value, (a["run_id"], key)
    assert set(vec_series) == set(loc_series) and len(vec_series) == 2
    for key, series in loc_series.items():
        assert np.abs(vec_series[key] - series).max() <= 1e-9
    with pytest.raises(ValueError, match="valid choices: local, vector"):
        run_stress(cfg, backend="ray")
    cells = nominal_comparison(
        payloads=("heavy",),
        winds=("windy",),
        trajectories=("figure8",),
        seeds=(0,),
        episode_s=3.5,
        workers=1,
    )  # fmt: skip (metrics start at 3 s)
    assert len(cells) == 1 and np.isfinite(cells[0]["ratio"])
