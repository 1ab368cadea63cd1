"""What every bench section measures with: the row of one measured figure, the median timer and
the table that prints the rows.

Timings are medians over repeated blocks so that a busy second core does not skew them; ratios are
always taken within one run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class BenchRow:
    """One measured figure."""

    section: str
    name: str
    median_us: float | None  # µs per call, median over blocks; None: a fact, not a timing
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


def format_rows(rows: list[BenchRow]) -> str:
    """Render rows as a fixed-width table."""
    lines = [f"{'section':<8} {'benchmark':<46} {'median':>11} {'ratio':>14}  target"]
    for r in rows:
        ratio = f"{r.ratio:6.2f}x {r.ratio_to}" if r.ratio is not None else ""
        median = f"{r.median_us:8.2f} us" if r.median_us is not None else ""
        lines.append(f"{r.section:<8} {r.name:<46} {median:>11} {ratio:>14}  {r.target}")
    return "\n".join(line.rstrip() for line in lines)
