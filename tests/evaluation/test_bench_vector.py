"""The vector-env benchmark section runs and reports every row against the floor."""

from __future__ import annotations

import math

from residual_quad.evaluation.bench.vector import run


def test_vector_bench_quick_rows():
    rows = run(quick=True)
    names = [r.name for r in rows]
    assert names[0].startswith("raw mj_step")
    assert any("N = 256, 1 thread" in n for n in names)
    assert sum("calm, " in n for n in names) == 3  # lockstep; out of step: tabulated, per env
    assert names[-1].startswith("closed loop, batched geo_rls")
    assert all(math.isfinite(r.median_us) and r.median_us > 0 for r in rows)
    # each ratio is the median of block / neighbouring floor block: positive, finite, and the
    # floor row is the reference
    assert rows[0].ratio == 1.0 and rows[0].ratio_to == ""
    resets = [r for r in rows if "reset" in r.name]
    assert [r.name.split(",")[0] for r in resets] == [
        "autoreset of 32 of 64 envs",
        "the same 32 envs' single reset",
    ]
    # the batched reset against its one-by-one twin, measured in the same run
    assert all(r.ratio_to == "one by one" and 0 < r.ratio < math.inf for r in resets)
    assert resets[1].ratio == 1.0
    flights = [r for r in rows[1:] if r not in resets]
    assert all(r.ratio_to == "floor" and 0 < r.ratio < math.inf for r in flights)
