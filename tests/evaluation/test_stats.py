"""Bootstrap intervals over seeds and paired comparisons, against known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from residual_quad.evaluation.report.paired import (
    default_pairs,
    paired_differences,
    paired_table,
    plant_change_table,
    probability_lower,
)
from residual_quad.evaluation.report.stats import (
    Interval,
    scenario_of,
    strata_of,
    stratified_mean_intervals,
)
from residual_quad.evaluation.report.tables import make_tables


def test_constant_cells_have_zero_width_and_are_marked():
    iv = stratified_mean_intervals([[[0.5, 0.5, 0.5], [0.25, 0.25, 0.25]]])[0]
    assert iv.kind == "constant" and iv.width == 0.0
    assert iv.low == iv.high == iv.estimate == pytest.approx(0.375)
    assert iv.suffix() == " †"


def test_fewer_than_two_seeds_give_no_interval_and_empty_cells_nothing():
    single, empty = stratified_mean_intervals([[[0.5], [0.25]], []])
    assert single.kind == "single" and single.estimate == 0.375 and math.isnan(single.low)
    assert single.suffix() == " ‡"
    assert empty.kind == "empty" and math.isnan(empty.estimate) and empty.suffix() == ""


def test_three_values_give_their_range_and_the_estimate_is_the_mean_of_all_runs():
    # each all-equal resample of three values has probability 1/27 > 2.5 %
    iv = stratified_mean_intervals([[[0.25, 0.5, 1.0]]])[0]
    assert (iv.low, iv.high) == (0.25, 1.0) and iv.estimate == pytest.approx(1.75 / 3)
    # a constant stratum is fixed and only shifts the mean: bounds (x + 1.5) / 6 for x in range
    iv = stratified_mean_intervals([[[0.25, 0.5, 1.0], [0.5, 0.5, 0.5]]])[0]
    assert iv.estimate == pytest.approx(3.25 / 6)
    assert iv.low == pytest.approx((0.75 + 1.5) / 6) and iv.high == pytest.approx((3 + 1.5) / 6)


def test_the_interval_contains_the_estimate_and_is_seeded():
    rng = np.random.default_rng(7)
    cells = [[list(rng.normal(1, 0.2, n)) for n in sizes] for sizes in ([3, 3], [5], [3, 3])]
    first = stratified_mean_intervals(cells)
    for iv, cell in zip(first, cells, strict=True):
        assert iv.kind == "bootstrap" and iv.low < iv.estimate < iv.high
        assert iv.estimate == pytest.approx(np.mean(np.concatenate(cell)), rel=1e-15)
    assert stratified_mean_intervals(cells) == first
    assert stratified_mean_intervals(cells, seed=1) != first


def test_a_cells_interval_does_not_depend_on_the_other_cells():
    """One vectorized call per layout, scipy draws one set of indices for the whole batch."""
    cells = [[[0.1, 0.3, 0.2], [1.0, 1.4, 1.1]], [[2.0, 2.5, 2.1], [0.4, 0.5, 0.9]]]
    together = stratified_mean_intervals(cells)
    assert together == [stratified_mean_intervals([c])[0] for c in cells]


def test_stratified_resampling_keeps_each_scenario():
    """Helix all 1, figure-8 all 3: every stratified resample has mean 2 (zero width); a
    bootstrap that pooled the strata would not."""
    iv = stratified_mean_intervals([[[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]]])[0]
    assert (iv.estimate, iv.width, iv.kind) == (2.0, 0.0, "constant")


def test_bad_arguments_are_value_errors_naming_them():
    with pytest.raises(ValueError, match="non-finite"):
        stratified_mean_intervals([[[1.0, math.inf]]])
    with pytest.raises(ValueError, match="confidence"):
        stratified_mean_intervals([[[1.0, 2.0]]], confidence=1.5)
    with pytest.raises(ValueError, match="resamples"):
        stratified_mean_intervals([[[1.0, 2.0]]], resamples=0)
    with pytest.raises(ValueError, match="kind must be one of bootstrap, constant"):
        Interval(1.0, 1.0, 1.0, 1, "wide")


# ------------------------------------------------------------------------- rows and tables
def _row(ctrl, payload, wind, traj, seed, rmse, diverged=False):
    return {
        "run_id": f"{ctrl}|{payload}|{wind}|{traj}|{seed}",
        "controller": ctrl,
        "payload": payload,
        "payload_kg": 0.0,
        "wind": wind,
        "trajectory": traj,
        "seed": seed,
        "rmse": None if diverged else rmse,
        "max_error": 1.0,
        "diverged": diverged,
        "termination": "crash" if diverged else None,
        "control_cost": 100.0,
        "wall_time": 0.1,
    }


def _matrix(values):
    """Rows from ``{controller: f(payload, wind, traj, seed)}`` over a small matrix."""
    rows = []
    for ctrl, f in values.items():
        for p, w, t, s in itertools.product(
            ("none", "heavy"), ("calm", "windy"), ("helix", "figure8"), (0, 1, 2)
        ):
            rows.append(_row(ctrl, p, w, t, s, f(p, w, t, s)))
    return rows


def _noisy(base):
    """Calm runs repeat one value per seed (deterministic); windy ones move with the seed."""

    def f(p, w, t, s):
        return base * (2 if p == "heavy" else 1) + (
            0.001 * s * (1 + (t == "helix")) if w == "windy" else 0
        )

    return f


def test_scenario_and_strata_come_from_the_run_id():
    r = _row("geo", "heavy", "windy", "helix", 2, 0.1)
    assert scenario_of(r) == "heavy|windy|helix"
    rows = [
        r,
        _row("geo", "heavy", "windy", "helix", 1, 0.3),
        _row("geo", "heavy", "windy", "figure8", 1, 0.2),
    ]
    rows.append(_row("geo", "heavy", "windy", "figure8", 2, 0.0, diverged=True))
    assert strata_of(rows, "rmse") == [[0.1, 0.3], [0.2]]


def test_main_table_marks_calm_cells_and_gives_windy_cells_an_interval(tmp_path):
    rows = _matrix({"geo": _noisy(0.1), "geo_rls": _noisy(0.01)})
    main = make_tables(rows)["main"]
    col = main.headers.index("geo")
    text = main.markdown()
    for i, r in enumerate(main.rows):
        iv = main.intervals["geo"][i]
        assert iv.estimate == pytest.approx(r[col])
        if r[1] == "calm":
            assert iv.kind == "constant" and f"| {r[col]:.4f} † |" in text
        else:
            assert iv.kind == "bootstrap" and iv.low < r[col] < iv.high
    assert "†: every seed gives the same value in each scenario of this cell" in text
    main.to_csv(tmp_path / "main.csv")
    head, first = (tmp_path / "main.csv").read_text().splitlines()[:2]
    assert head.endswith("geo low,geo high,geo_rls low,geo_rls high")
    assert head.startswith("payload,wind,geo,geo_rls,")  # the columns before keep their places
    calm = first.split(",")
    assert calm[4] == calm[5] == calm[2]  # a constant cell: low = high = the mean


def test_paired_difference_matches_a_brute_force_mean():
    rows = _matrix({"geo": _noisy(0.1), "geo_rls": _noisy(0.01), "pid": _noisy(0.05)})
    rows[5] = {**rows[5], "rmse": rows[5]["rmse"] + 0.5}  # one geo run much worse
    table = paired_table(rows, [("geo_rls", "geo")], scale=1.0, unit="m")
    by = {(r["controller"], r["run_id"].split("|", 1)[1]): r["rmse"] for r in rows}
    diffs = [
        by[("geo_rls", k)] - by[("geo", k)]
        for (c, k) in by
        if c == "geo_rls" and k.split("|")[2] in ("helix", "figure8")
    ]
    iv = table.intervals["mean A − B (m)"][0]
    assert iv.estimate == pytest.approx(sum(diffs) / len(diffs), rel=1e-12)
    line = table.rows[0]
    assert line[:4] == ["geo_rls", "geo", len(diffs), 0]
    assert line[6] == sum(d < 0 for d in diffs) / len(diffs) == 1.0
    assert iv.high < 0 and line[-1] == "`geo_rls` lower"


def test_paired_comparisons_leave_out_diverged_pairs_and_count_ties():
    rows = _matrix({"geo": _noisy(0.1), "geo_rls": _noisy(0.1)})
    rows = [
        r if r["run_id"] != "geo|none|windy|helix|1" else {**r, "diverged": True, "rmse": None}
        for r in rows
    ]
    strata, pairs, left_out = paired_differences(rows, "geo_rls", "geo")
    assert left_out == 1 and len(pairs) == 23 and sum(map(len, strata)) == 23
    assert all(d == 0.0 for s in strata for d in s)
    assert probability_lower(pairs) == 0.5  # all ties: one half each
    table = paired_table(rows, [("geo_rls", "geo")])
    assert table.rows[0][-1] == "no clear difference (interval contains 0)"
    assert table.rows[0][7] == "0 / 23 / 0"


def test_default_pairs_and_unknown_labels():
    assert default_pairs(["pid", "geo", "geo_rls", "geo_rls_dob"]) == [
        ("geo_rls", "geo"),
        ("geo_rls", "pid"),
        ("geo_rls_dob", "geo"),
        ("geo_rls_dob", "pid"),
        ("geo_rls_dob", "geo_rls"),
    ]
    rows = _matrix({"geo": _noisy(0.1)})
    assert paired_table(rows) is None
    with pytest.raises(ValueError, match="pairs names 'pid'.*choose from geo"):
        paired_table(rows, [("pid", "geo")])


def test_plant_change_is_the_brute_force_mean_of_matched_runs():
    base = _matrix({"geo": _noisy(0.1), "pid": _noisy(0.05)})
    moved = [
        {**r, "rmse": r["rmse"] + (0.002 * (1 + r["seed"]) if r["wind"] == "windy" else 0.0)}
        for r in base
        if r["controller"] == "geo"
    ]
    moved[0] = {**moved[0], "diverged": True, "rmse": None}  # none|calm|helix|0 crashed
    table = plant_change_table(moved, base)
    assert [r[0] for r in table.rows] == ["geo"]  # pid was not flown under the new plant
    geo = table.rows[0]
    # 23 matched runs: 12 windy ones moved by 2, 4 or 6 mm, 11 calm ones unchanged
    assert geo[1:3] == [23, 1]
    iv = table.intervals["mean change (mm)"][0]
    assert iv.estimate == pytest.approx(4 * (2 + 4 + 6) / 23, rel=1e-9)
    assert iv.low > 0 and geo[-1] == "higher" and geo[5] == "12 / 11 / 0"
    assert plant_change_table(moved, _matrix({"pid": _noisy(0.05)})) is None
