"""``rquad bench --sections controllers``: the hnewton_rls flight rows run end to end."""

from __future__ import annotations

import math

import pytest


@pytest.mark.slow
def test_flight_rows_time_single_and_batched_flights() -> None:
    from residual_quad.evaluation.bench.batch import flight_rows

    single, batched = flight_rows(quick=True)
    assert single.name.startswith("hnewton_rls flights: single")
    assert batched.name == "hnewton_rls flights: batched + vector env, N = 64"
    assert batched.target == ">= 5x throughput" and single.ratio is None
    assert math.isclose(batched.ratio, single.median_us / batched.median_us)
    assert batched.median_us > 0.0
