"""The ``remote`` bench section's measurements run end to end (short flights)."""

from __future__ import annotations

import math

from residual_quad.evaluation.bench import remote as remote_bench
from residual_quad.evaluation.bench.remote import lockstep_round_trip, realtime_flight
from residual_quad.evaluation.bench.sections import SECTIONS, run_bench
from residual_quad.evaluation.bench.timing import BenchRow


def test_remote_section_is_registered(monkeypatch):
    """``rquad bench --sections remote`` runs the server's benchmark (a plain import, no string)."""
    assert SECTIONS["remote"]() is remote_bench.run
    rows = [BenchRow("remote", "stand-in", 1.0)]
    monkeypatch.setattr(remote_bench, "run", lambda quick: rows)
    assert run_bench(["remote"], quick=True) == rows


def test_lockstep_round_trip_measures_both_paths():
    figures = lockstep_round_trip(episodes=1, episode_s=0.3)
    assert figures["steps"] == 30
    for key in ("local_median", "local_p99", "remote_median", "remote_p99"):
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert figures["remote_p99"] >= figures["remote_median"]


def test_realtime_flight_keeps_the_wall_clock():
    result, clock, wall = realtime_flight(0.5, control_hz=50.0)
    assert clock["periods"] == 25 and result.steps + clock["late"] >= 25
    assert wall >= 0.45  # 25 periods of 20 ms cannot run faster than the clock
