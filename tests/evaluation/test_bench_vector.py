"""The vector-env benchmark section runs and reports every row against the floor."""

from __future__ import annotations

import math

import pytest

from residual_quad.evaluation.bench_vector import run


def test_vector_bench_quick_rows():
    rows = run(quick=True)
    names = [r.name for r in rows]
    assert names[0].startswith("raw mj_step")
    assert any("N = 256, 1 thread" in n for n in names)
    assert names[-1].startswith("closed loop, batched geo_rls")
    assert all(math.isfinite(r.median_us) and r.median_us > 0 for r in rows)
    assert all(r.ratio == pytest.approx(r.median_us / rows[0].median_us) for r in rows)
