"""``rquad bench --sections scaling``: the section is registered, runs only when named, and its
quick run prints every row with the expected names and ratios (structure, not speed)."""

from __future__ import annotations

import math
import os
import re

import pytest

from residual_quad.evaluation.bench import scaling
from residual_quad.evaluation.bench.sections import ON_REQUEST, SECTIONS, run_bench
from residual_quad.evaluation.bench.timing import BenchRow, format_rows


def test_scaling_section_is_registered_and_runs_only_when_named(monkeypatch):
    assert SECTIONS["scaling"]() is scaling.run
    assert ON_REQUEST == {"scaling", "evaluation"}
    ran: list[str] = []

    def loader(name):
        def run(quick):
            ran.append(name)
            return [BenchRow(name, "stand-in", 1.0)]

        return lambda: run

    for name in SECTIONS:
        monkeypatch.setitem(SECTIONS, name, loader(name))
    run_bench(quick=True)
    assert ran == [n for n in SECTIONS if n not in ON_REQUEST]  # the default run is as it was
    ran.clear()
    assert run_bench(["scaling"], quick=True) == [BenchRow("scaling", "stand-in", 1.0)]
    assert ran == ["scaling"]


@pytest.mark.parametrize(
    ("cores", "counts"),
    [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (16, [1, 2, 4, 8, 16])],
)
def test_thread_counts_double_up_to_the_cores(cores, counts):
    assert scaling.thread_counts(cores) == counts


def test_a_fact_row_prints_without_a_timing():
    table = format_rows([BenchRow("scaling", "machine: 2 cores", None), BenchRow("s", "t", 2.5)])
    fact, timed = table.splitlines()[1:]
    assert fact == "scaling  machine: 2 cores"  # no median column, no trailing blanks
    assert "2.50 us" in timed


def _speedup(row: BenchRow) -> tuple[float, int]:
    m = re.fullmatch(r"speed-up (\d+\.\d\d)x \(ideal (\d+)\)", row.target)
    assert m, row.target
    return float(m.group(1)), int(m.group(2))


def _per_s(row: BenchRow) -> float:
    return float(row.name.rsplit(": ", 1)[1].removesuffix(" env-steps/s").replace(",", ""))


def test_quick_run_prints_each_figure_beside_its_floor_and_one_thread():
    cores = os.cpu_count() or 1
    counts = scaling.thread_counts(min(cores, 2))
    n = scaling.QUICK_N_ENVS
    rows = scaling.run(quick=True)
    assert all(r.section == "scaling" for r in rows)

    machine, numerics, *rows = rows
    assert machine.median_us is None and machine.name.startswith(f"machine: {cores} cores")
    assert numerics.median_us is None and numerics.name.startswith("numerics: OpenBLAS kernel")
    timed = rows
    assert all(math.isfinite(r.median_us) and r.median_us > 0 for r in timed)

    floors, rows = rows[: len(counts)], rows[len(counts) :]
    envs, rows = rows[: len(counts)], rows[len(counts) :]
    numpy_envs, rows = rows[: len(counts)], rows[len(counts) :]  # the numpy wrench, after
    for k, floor, env, np_env in zip(counts, floors, envs, numpy_envs, strict=True):
        threads = f"{k} thread{'s' if k > 1 else ''}"
        assert floor.name.startswith(f"rollout floor, N = {n}, {threads}: ")
        assert env.name.startswith(f"vector env.step, N = {n}, {threads}: ")
        assert np_env.name.startswith(f"vector env.step (numpy wrench), N = {n}, {threads}: ")
        for row in (floor, env, np_env):  # env-steps/s is the inverse of the µs per env-step
            assert _per_s(row) == pytest.approx(1e6 / row.median_us, rel=1e-3, abs=1.0)
        # the floor against the one-thread floor; its speed-up is that ratio's inverse (to the
        # printed two decimals, whatever the count of rounds)
        assert floor.ratio_to == "1 thread"
        speedup, ideal = _speedup(floor)
        assert ideal == k and speedup == pytest.approx(1.0 / floor.ratio, abs=0.006)
        for row in (env, np_env):
            assert row.ratio_to == "floor" and 0 < row.ratio < math.inf
            assert _speedup(row)[1] == k
    assert floors[0].ratio == 1.0 and _speedup(floors[0])[0] == 1.0
    assert _speedup(envs[0])[0] == 1.0 and _speedup(numpy_envs[0])[0] == 1.0

    floor, *matrix = rows
    assert floor.name.startswith("sweep floor: 1,600 env-steps x raw mj_step: ")  # 8 runs x 200
    assert floor.ratio == 1.0
    expected = [("vector", k) for k in counts] + [("local", counts[-1])]
    assert len(matrix) == len(expected)
    walls = {}
    for (backend, k), row in zip(expected, matrix, strict=True):
        workers = f"{k} worker{'s' if k > 1 else ''}"
        assert row.name.startswith(f"8-run matrix, {backend}, {workers}: ")
        walls[backend, k] = float(row.name.rsplit(": ", 1)[1].removesuffix(" s"))
        assert row.ratio_to == f"floor/{k}"
        assert row.ratio == pytest.approx(row.median_us / (floor.median_us / k))
    for (backend, k), row in zip(expected, matrix, strict=True):
        if backend == "vector":
            assert _speedup(row)[1] == k
        else:
            assert row.target.endswith("x the vector backend's time")
    assert _speedup(matrix[0])[0] == 1.0

    table = format_rows([machine, numerics, *timed]).splitlines()
    assert len(table) == 3 + len(timed)
