"""The commanded tilt's thrust budget (``AttitudeGains.budget_tilt``, ``thrust_budget``): known
answers, no budget on the source's gains, one formula for one vehicle and a batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.attitude import (
    LAG_TUNED_GAINS,
    AttitudeGains,
    TiltBudget,
    attitude_gains,
    tilt_limited_force,
)
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.xp import ARRAYS, FLOATS

FRAME = Airframe()
BUDGET = TiltBudget.of(FRAME, LAG_TUNED_GAINS)
TAN = math.tan(LAG_TUNED_GAINS.max_tilt)


def _tilt(fx: float, fy: float, fz: float) -> float:
    return math.atan2(math.hypot(fx, fy), fz)


def test_the_source_gains_have_no_budget_and_the_lag_set_widens_to_35_degrees():
    assert TiltBudget.of(FRAME, AttitudeGains()) is None
    assert LAG_TUNED_GAINS.max_tilt == 0.44 and BUDGET is not None
    assert BUDGET.force == pytest.approx(0.77 * 4.0 * FRAME.max_rotor_thrust)
    assert BUDGET.tan_tilt == pytest.approx(math.tan(math.radians(35.0)))


@pytest.mark.parametrize(
    ("az", "expected_deg"),
    [
        (0.0, 35.0),  # hover: the budget has room for the full 35°
        (5.0, 35.0),  # climbing: room for 40°, capped at 35°
        (6.5, None),  # the budget binds between the two limits
        (8.0, math.degrees(0.44)),  # little room: never below max_tilt
    ],
)
def test_known_tilts_for_a_large_horizontal_demand(az, expected_deg):
    fx, fy, fz, saturated = tilt_limited_force(FLOATS, FRAME, 40.0, 0.0, az, TAN, BUDGET)
    assert saturated and fy == 0.0
    assert fz == pytest.approx(FRAME.mass * (az + FRAME.gravity))
    if expected_deg is None:  # the collective is exactly the budget's
        assert math.hypot(fx, fz) == pytest.approx(BUDGET.force, rel=1e-12)
        assert math.radians(25.2) < _tilt(fx, fy, fz) < math.radians(35.0)
    else:
        assert math.degrees(_tilt(fx, fy, fz)) == pytest.approx(expected_deg, rel=1e-12)


def test_a_demand_inside_the_limits_is_untouched():
    a = (2.0, -1.0, 0.5)
    for budget in (None, BUDGET):
        fx, fy, fz, saturated = tilt_limited_force(FLOATS, FRAME, *a, TAN, budget)
        assert not saturated
        assert (fx, fy, fz) == (FRAME.mass * 2.0, FRAME.mass * -1.0, FRAME.mass * (0.5 + 9.81))


def test_the_budget_fields_are_checked():
    with pytest.raises(ValueError, match="thrust_budget"):
        attitude_gains({"thrust_budget": 1.2})
    with pytest.raises(ValueError, match="budget_tilt"):
        attitude_gains({"budget_tilt": 1.6})
    with pytest.raises(ValueError, match="budget_tilt"):
        attitude_gains({"budget_tilt": -0.1})
    # a budget tilt at or below max_tilt widens nothing; gains given without one have none
    assert TiltBudget.of(FRAME, attitude_gains({"max_tilt": 0.7, "budget_tilt": 0.6})) is None
    assert TiltBudget.of(FRAME, attitude_gains({"max_tilt": 0.44})) is None


ACCEL = st.floats(-60.0, 60.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(ACCEL, ACCEL, ACCEL), min_size=1, max_size=16))
def test_one_vehicle_and_a_batch_give_the_same_bits(rows):
    ax, ay, az = (np.array(c) for c in zip(*rows, strict=True))
    got = tilt_limited_force(ARRAYS, FRAME, ax, ay, az, TAN, BUDGET)
    for k, row in enumerate(rows):
        one = tilt_limited_force(FLOATS, FRAME, *row, TAN, BUDGET)
        assert [float(g[k]) for g in got[:3]] == list(one[:3]) and bool(got[3][k]) == one[3]
        fx, fy, fz = one[:3]
        tilt = _tilt(fx, fy, fz)
        assert tilt <= math.radians(35.0) + 1e-12
        # beyond max_tilt only within the budget's collective
        if tilt > LAG_TUNED_GAINS.max_tilt + 1e-12:
            assert math.sqrt(fx * fx + fy * fy + fz * fz) <= BUDGET.force * (1 + 1e-12)
