"""``rquad bench --sections evaluation`` splits the evaluation stage row by row: its arithmetic
against known answers, the matrix's rows, and a clocked flight that flies as the sweep does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from residual_quad import configs
from residual_quad.evaluation.bench import evaluation as bench_eval
from residual_quad.evaluation.bench.sections import ON_REQUEST, SECTIONS
from residual_quad.evaluation.sweep.config import SweepConfig, expand


def test_the_section_runs_only_when_named():
    assert "evaluation" in SECTIONS and "evaluation" in ON_REQUEST


def test_budget_rows_weight_each_row_by_its_matrix_runs():
    floor = 10.0  # µs per env-step
    costs = [  # 1e6 env-steps each: seconds read as µs per env-step
        bench_eval.RowCost("pid", 108, 1_000_000, 20.0, 2.0, 1.0, 108),
        bench_eval.RowCost("ppo", 108, 1_000_000, 30.0, 8.0, 3.0, 540),
    ]
    rows = {r.name: r for r in bench_eval.budget_rows(costs, floor)}
    assert rows["pid: 108 runs, one batch"].ratio == pytest.approx(2.0)
    assert rows["ppo: its controller"].median_us == pytest.approx(8.0)
    total = (20.0 * 108 + 30.0 * 540) / 648
    ctrl = (2.0 * 108 + 8.0 * 540) / 648
    assert rows["matrix (648 runs), estimated: all"].median_us == pytest.approx(total)
    assert rows["matrix, estimated: the env"].median_us == pytest.approx(total - ctrl)
    assert rows["... of which building and reset"].median_us == pytest.approx(
        (1.0 * 108 + 3.0 * 540) / 648
    )
    assert rows["matrix, estimated: the controllers"].ratio == pytest.approx(ctrl / floor)
    left = rows["left for the controllers under 2x"]
    assert left.median_us == pytest.approx(2 * floor - (total - ctrl))  # negative here
    assert left.ratio is None  # nothing is left: no share of today's controllers to give


def test_what_the_target_leaves_is_a_share_of_the_controllers_cost():
    costs = [bench_eval.RowCost("pid", 1, 1_000_000, 16.0, 4.0, 0.5, 1)]
    left = bench_eval.budget_rows(costs, 10.0)[-1]
    assert left.median_us == pytest.approx(20.0 - 12.0)
    assert left.ratio == pytest.approx(8.0 / 4.0)


def test_matrix_rows_gather_every_training_seed_of_a_row():
    cfg = configs.load(SweepConfig, "sweep")
    rows = bench_eval.matrix_rows(cfg)
    assert sum(len(v) for v in rows.values()) == len(cfg.labels)
    assert rows["ppo"][0] == "ppo" and len(rows["ppo"]) >= 2
    assert all(label.startswith("ppo") for label in rows["ppo"])
    assert "pid_tuned" in rows and rows["pid"] == ["pid"]


def test_a_clocked_flight_flies_as_the_sweep_does():
    """The clock wraps the controller and changes nothing the runs fly: the same errors, bit for
    bit, as the controller flown unwrapped."""
    from residual_quad.controllers.batch import make_batch_controller
    from residual_quad.episode import fly_batch

    cfg = configs.load(SweepConfig, "sweep")
    specs = [replace(s, episode_s=0.3) for s in expand(cfg) if s.controller == "geo_rls"][:3]
    cost = bench_eval.fly_row(cfg, "geo_rls", specs, matrix_runs=108)
    assert cost.runs == 3 and cost.env_steps == 3 * 30 and cost.matrix_runs == 108
    assert 0.0 < cost.controller_s < cost.total_s and 0.0 < cost.setup_s < cost.total_s
    plain = fly_batch(specs, make_batch_controller("geo_rls", 3))
    clocked = bench_eval._Clocked(make_batch_controller("geo_rls", 3))
    timed = fly_batch(specs, clocked)
    assert clocked.seconds > 0.0 and clocked.first is not None
    for a, b in zip(plain, timed, strict=True):
        np.testing.assert_array_equal(a.error, b.error)
