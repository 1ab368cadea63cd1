"""``rquad bench --sections period``: the quick form runs and prints the period (compiled and
numpy wrench) beside its one-call bound (structure only, never speed)."""

from __future__ import annotations

from residual_quad.evaluation.bench.period import run


def test_period_bench_quick_rows():
    rows = run(quick=True)
    names = [r.name for r in rows]
    assert any("the period: those calls + the compiled wrench" in n for n in names), names
    assert any("the period with the numpy wrench" in n for n in names), names
    assert any("one-call bound" in n for n in names), names
    assert all(r.median_us is None or r.median_us == r.median_us for r in rows)  # no NaN
