"""``rquad bench --sections hnewton``: the closed-loop step median flies a real episode."""

from __future__ import annotations

import math

from residual_quad.evaluation.bench.hnewton import closed_loop_median_us
from residual_quad.evaluation.bench.sections import SECTIONS


def test_closed_loop_median_times_every_control_step():
    """The episode runner is imported from the root package (the section's relative import of a
    missing ``evaluation.episode`` made the section fail before measuring anything)."""
    median = closed_loop_median_us("geo", 0.2, trajectory="hover")
    assert math.isfinite(median) and median > 0
    assert SECTIONS["hnewton"]().__module__ == "residual_quad.evaluation.bench.hnewton"
