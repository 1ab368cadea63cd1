"""User controllers in sweeps, stress studies, tables, figures and the report: labels, ordering,
colours, and the worked example of ``docs/examples`` run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.evaluation.report.document import order_rows
from residual_quad.evaluation.report.figures import COLORS, color_of
from residual_quad.evaluation.report.tables import controller_order, focus_tables, make_tables
from residual_quad.evaluation.studies.stress import StressConfig
from residual_quad.evaluation.sweep import CONFIG_FILE, SweepConfig, expand

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield
    sys.modules.pop("my_controller", None)


def _cfg(controllers, **kw):
    base = {"payloads": ["none"], "winds": ["calm"], "trajectories": ["hover"], "seeds": [0]}
    return configs.load(SweepConfig, {**base, "series": [], "controllers": controllers, **kw})


def test_labels_are_the_controller_column_and_built_ins_keep_their_names(examples_on_path):
    cfg = _cfg(
        [
            "geo",
            "hnewton:lm",
            {"spec": "my_controller:PIDFeedForward", "options": {"ki": 2.0}, "label": "mine"},
            "my_controller:PIDFeedForward",
        ]
    )
    assert cfg.labels == ["geo", "hnewton:lm", "mine", "pid_ff"]
    assert [s.controller for s in expand(cfg)] == cfg.labels
    assert cfg.controller_spec("mine").options == {"ki": 2.0}
    assert cfg.controller_spec("hnewton:lm").options == {"method": "lm"}
    # the saved config records every user label, so --resume and the report see the same ones
    again = configs.load(SweepConfig, configs.to_dict(cfg))
    assert again.labels == cfg.labels


def test_duplicate_labels_and_bad_user_specs_fail_at_load(examples_on_path):
    with pytest.raises(ValueError, match="'geo' is listed twice"):
        _cfg(["geo", {"spec": "my_controller:PIDFeedForward", "label": "geo"}])
    with pytest.raises(ValueError, match="importable from every worker"):
        _cfg(["geo", "no_such_user_module:Make"])
    with pytest.raises(ValueError, match="kq"):
        _cfg([{"spec": "my_controller:PIDFeedForward", "options": {"kq": 1.0}}])
    with pytest.raises(ValueError, match="not a finite number"):
        _cfg([{"spec": "geo", "options": {"kp": float("nan")}}])
    with pytest.raises(ValueError, match="given twice"):
        _cfg([{"spec": "geo:kp=3", "options": {"kp": 4.0}}])
    with pytest.raises(ValueError, match="'mine' is listed twice"):
        configs.load(
            StressConfig,
            {"controllers": [{"spec": "geo", "label": "mine"}, {"spec": "pid", "label": "mine"}]},
        )


def _rows(labels):
    rows = []
    for c in labels:
        for traj in ("helix", "figure8"):
            rows.append(
                {
                    "run_id": f"{c}|heavy|windy|{traj}|0",
                    "controller": c,
                    "payload": "heavy",
                    "wind": "windy",
                    "trajectory": traj,
                    "seed": 0,
                    "rmse": 0.1,
                    "max_error": 0.2,
                    "diverged": False,
                    "termination": None,
                    "control_cost": 500.0,
                    "residual_bias": None,
                }
            )
    return rows


def test_tables_put_built_ins_first_then_user_labels_in_config_order(tmp_path):
    rows = _rows(["zeta_user", "geo", "alpha_user", "pid"])
    assert controller_order(rows) == ["pid", "geo", "zeta_user", "alpha_user"]
    main = make_tables(rows)["main"]
    assert main.headers == ["payload", "wind", "pid", "geo", "zeta_user", "alpha_user"]
    focus = focus_tables(rows, "alpha_user")
    assert "`alpha_user`" in focus and "| `alpha_user` | `pid` | `geo` | `zeta_user` |" in focus
    # the report reorders completion-order rows by the saved config's labels
    (tmp_path / CONFIG_FILE).write_text(
        "controllers: [geo, {spec: 'x.y:Z', label: alpha_user},"
        " {spec: 'x.y:W', label: zeta_user}]\n"
    )
    assert controller_order(order_rows(rows, tmp_path)) == ["pid", "geo", "alpha_user", "zeta_user"]


def test_figure_colours_never_fail_on_unknown_labels():
    assert color_of("geo") == COLORS["geo"]
    assert color_of("mine") == color_of("mine") and color_of("mine").startswith("#")
    assert color_of("") and color_of("a:b=1")


def test_the_worked_example_flies_against_geo_rls(tmp_path):
    """``rquad sweep docs/examples/sweep_my_controller.yaml`` with ``PYTHONPATH=docs/examples``."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES), "MUJOCO_GL": "egl"}
    cmd = [sys.executable, "-m", "residual_quad.cli", "sweep"]
    cmd += [str(EXAMPLES / "sweep_my_controller.yaml"), "--out", str(out), "--workers", "2"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["controller"] for r in rows) == ["geo_rls", "mine"]
    mine = next(r for r in rows if r["controller"] == "mine")
    assert not mine["diverged"] and mine["rmse"] < 0.2  # it flies the helix with the payload
    report = (out / "report.md").read_text()
    assert "| payload | wind | geo_rls | mine |" in report
    focus = subprocess.run(
        [sys.executable, "-m", "residual_quad.cli", "report", str(out), "--focus", "mine"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert focus.returncode == 0 and "| `mine` | `geo_rls` |" in focus.stdout, focus.stderr
