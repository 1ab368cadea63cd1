"""RL controllers over training seeds: pooling, intervals, the report section and targets."""

from __future__ import annotations

import math

import pytest

from residual_quad.evaluation.report.document import target_checks, write_report
from residual_quad.evaluation.report.rl_seeds import (
    bootstrap_mean,
    pool_training_seeds,
    rl_section,
    training_seed,
)
from residual_quad.evaluation.report.tables import make_tables


def test_training_seed_labels():
    assert training_seed("ppo") == ("ppo", 0)
    assert training_seed("ppo:training_seed=2") == ("ppo", 2)
    assert training_seed("ppo_res:training_seed=1") == ("ppo_res", 1)
    assert training_seed("ppo_res") == ("ppo_res", 0)
    for other in ("geo", "ppo:path=x.zip", "ppo:training_seed=1,path=x.zip", "my.mod:Make"):
        assert training_seed(other) is None, other


def _rows(values: dict[str, dict[tuple[str, str], float]], diverged: str | None = None):
    rows = []
    for label, cells in values.items():
        for (payload, wind), v in cells.items():
            for traj in ("hover", "helix", "figure8"):
                for seed in (0, 1):
                    rows.append(
                        {
                            "controller": label,
                            "run_id": f"{label}|{payload}|{wind}|{traj}|{seed}",
                            "payload": payload,
                            "wind": wind,
                            "trajectory": traj,
                            "seed": seed,
                            "rmse": v + 0.001 * seed,
                            "diverged": label == diverged and traj == "hover" and seed == 1,
                            "control_cost": 100.0,
                            "max_error": v,
                            "wall_time": 0.1,
                        }
                    )
    return rows


CELLS = [("none", "calm"), ("heavy", "windy")]


def test_pooled_tables_show_the_mean_over_training_seeds():
    rows = _rows(
        {
            "pid": {c: 0.05 for c in CELLS},
            "ppo": {c: 0.06 for c in CELLS},
            "ppo:training_seed=1": {c: 0.09 for c in CELLS},
            "ppo:training_seed=2": {c: 0.12 for c in CELLS},
            "ppo_res": {c: 0.04 for c in CELLS},
        }
    )
    pooled = pool_training_seeds(rows)
    assert {r["controller"] for r in pooled} == {"pid", "ppo", "ppo_res"}
    assert pool_training_seeds(pooled) == pooled  # idempotent
    main = make_tables(pooled)["main"]
    col = main.headers.index("ppo")
    assert all(math.isclose(r[col], 0.0905) for r in main.rows)  # (0.06+0.09+0.12)/3 + 0.0005


def test_rl_targets_are_checked_on_the_pooled_means():
    rows = _rows(
        {
            "pid": {CELLS[0]: 0.05, CELLS[1]: 0.03},
            "ppo": {c: 0.06 for c in CELLS},
            "ppo:training_seed=1": {c: 0.09 for c in CELLS},
            "ppo_res": {c: 0.04 for c in CELLS},
        },
        diverged="ppo_res",
    )
    pooled = pool_training_seeds(rows)
    checks = {c[0].split(" (")[0]: c for c in target_checks(make_tables(pooled), pooled)}
    ppo = checks["ppo RMSE in every payload × wind cell"]
    assert ppo[2] == "max 0.0755 m" and ppo[3] is True
    res = checks["ppo_res RMSE ≤ pid's in every payload × wind cell"]
    assert res[3] is False and "1 of 2 cells above" in res[2]
    assert checks["ppo_res crashes"][2] == "2 / 12" and checks["ppo_res crashes"][3] is False
    assert checks["ppo crashes"][3] is True


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    iv = bootstrap_mean([0.25, 0.5, 1.0])
    assert iv.estimate == pytest.approx(1.75 / 3) and iv.kind == "bootstrap"
    # three values: each all-equal resample has probability 1/27 > 2.5 %, so the 95 %
    # percentile interval is exactly the values' range
    assert (iv.low, iv.high) == (0.25, 1.0)
    assert bootstrap_mean([0.25, 0.5, 1.0]) == iv  # seeded
    assert bootstrap_mean([0.3]).kind == "single" and bootstrap_mean([0.3]).estimate == 0.3
    same = bootstrap_mean([0.3, 0.3, 0.3])
    assert same.kind == "constant" and same.low == same.high == same.estimate


def test_report_section_lists_seeds_intervals_and_budgets(tmp_path):
    rows = _rows(
        {
            "pid": {c: 0.05 for c in CELLS},
            "ppo": {c: 0.06 for c in CELLS},
            "ppo:training_seed=1": {c: 0.09 for c in CELLS},
            "ppo:training_seed=2": {c: 0.12 for c in CELLS},
        }
    )
    section = rl_section(rows)
    assert section is not None
    assert "training seeds 0, 1, 2" in section
    assert "seed 0: " in section and "M policy steps" in section  # the shipped budget
    assert "| none | calm | 0.0905 [" in section and "0.0605 / 0.0905 / 0.1205" in section
    assert rl_section(_rows({"pid": {c: 0.05 for c in CELLS}})) is None
    one = rl_section(_rows({"ppo": {c: 0.06 for c in CELLS}}))
    assert "| none | calm | 0.0605 ‡ |" in one and "‡: one training seed; no interval." in one
    same = rl_section(_rows({"ppo": {CELLS[0]: 0.06}, "ppo:training_seed=1": {CELLS[0]: 0.06}}))
    assert "| none | calm | 0.0605 † |" in same and "†: every training seed gives" in same
    report = write_report(rows, tmp_path).read_text()
    assert "## RL controllers over training seeds" in report
    if "No rliable statistics" not in report:  # with the rl extra: rliable's tables and figure
        assert "| ppo | 6 × 4 | 0 / 36 |" in report and "| ppo | 0.000 [" in report
        assert (tmp_path / "figures" / "rl_performance_profile.png").is_file()
        assert "](figures/rl_performance_profile.png)" in report
    assert "ppo:training_seed=1" not in report.split("## Tables")[1]  # pooled in the tables


def test_a_hover_only_sweep_with_rl_controllers_has_no_pooled_line_and_no_error():
    """The pooled line is over helix and figure-8 runs: a hover-only sweep (the payload-pickup
    recovery study) has none to pool, and the section is written without it."""
    rows = [
        r
        for r in _rows({"pid": {c: 0.05 for c in CELLS}, "ppo": {c: 0.06 for c in CELLS}})
        if r["trajectory"] == "hover"
    ]
    section = rl_section(rows)
    assert section is not None and "No rliable statistics" in section
    assert "| ppo | " not in section.split("No rliable statistics")[1]


def test_a_policy_whose_every_run_in_a_cell_diverged_shows_no_mean():
    """The per-seed value of a cell where every run of one policy diverged is named as such,
    and the cell's interval is over the seeds with a value."""
    rows = _rows(
        {
            "pid": {c: 0.05 for c in CELLS},
            "ppo": {c: 0.06 for c in CELLS},
            "ppo:training_seed=1": {c: 0.09 for c in CELLS},
            "ppo:training_seed=2": {c: 0.12 for c in CELLS},
        }
    )
    for r in rows:
        if r["controller"] == "ppo:training_seed=1" and r["payload"] == "none":
            r["diverged"], r["rmse"] = True, math.nan
    section = rl_section(rows)
    assert "nan" not in section
    line = next(ln for ln in section.splitlines() if ln.startswith("| none | calm |"))
    assert "(4/12 div.)" in line and "0.0605 / – (all 4 div.) / 0.1205" in line
    assert "With three seeds the interval is coarse" in section
