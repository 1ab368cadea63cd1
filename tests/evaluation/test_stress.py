"""hnewton stress study: strict stress config and the ``rquad stress`` command."""

from __future__ import annotations

import json

import pytest


# ------------------------------------------------------------------------------ stress set
def test_stress_config_is_strict_and_complete() -> None:
    from residual_quad import configs
    from residual_quad.episode import parse_label
    from residual_quad.evaluation.stress import StressConfig

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
    from residual_quad.evaluation.stress import survival_check

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
