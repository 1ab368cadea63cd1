"""``rquad bench``: micro-benchmarks that print medians and ratios measured side by side.

Sections are registered in ``SECTIONS`` as ``"module:function"``; each function takes
``quick: bool`` and returns a list of :class:`BenchRow`. Timings are medians over repeated blocks so
that a busy second core does not skew them; ratios are always taken within one run.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass

SECTIONS: dict[str, str] = {
    "plant": "residual_quad.evaluation.bench_plant:run",
    "residual": "residual_quad.evaluation.bench_residual:run",
    "hlsp": "residual_quad.evaluation.bench_hlsp:run",
    "hnewton": "residual_quad.evaluation.bench_hnewton:run",
    "controllers": "residual_quad.evaluation.bench_batch:run",
    "vector": "residual_quad.evaluation.bench_vector:run",
    "remote": "residual_quad.remote.bench:run",
    "sweep": "residual_quad.evaluation.bench_sweep:run",
    "rl": "residual_quad.evaluation.bench_rl:run",
    "period": "residual_quad.evaluation.bench_period:run",
    "pipeline": "residual_quad.evaluation.bench_pipeline:run",
}


@dataclass
class BenchRow:
    """One measured figure."""

    section: str
    name: str
    median_us: float  # µs per call, median over blocks
    ratio: float | None = None  # to the section's reference row, same run
    ratio_to: str = ""
    target: str = ""  # human-readable target, e.g. "<= 40 us"


def median_time_us(fn: Callable[[], object], *, calls: int = 200, blocks: int = 15) -> float:
    """Median over ``blocks`` of the mean time per call of ``fn`` (µs)."""
    import numpy as np

    for _ in range(min(calls, 50)):  # warm-up
        fn()
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return float(np.median(per_call))


def _load(spec: str) -> Callable[..., list[BenchRow]]:
    module, func = spec.split(":")
    return getattr(importlib.import_module(module), func)


def run_bench(sections: list[str] | None = None, quick: bool = False) -> list[BenchRow]:
    """Run the named sections (all by default) and return their rows."""
    names = sections or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown bench section(s) {unknown}; valid: {sorted(SECTIONS)}")
    rows: list[BenchRow] = []
    for name in names:
        rows.extend(_load(SECTIONS[name])(quick=quick))
    return rows


def format_rows(rows: list[BenchRow]) -> str:
    """Render rows as a fixed-width table."""
    lines = [f"{'section':<8} {'benchmark':<46} {'median':>11} {'ratio':>14}  target"]
    for r in rows:
        ratio = f"{r.ratio:6.2f}x {r.ratio_to}" if r.ratio is not None else ""
        lines.append(f"{r.section:<8} {r.name:<46} {r.median_us:8.2f} us {ratio:>14}  {r.target}")
    return "\n".join(lines)
