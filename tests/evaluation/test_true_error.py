"""The tracking metrics measure the true error, not the sensed one.

Behind sensor latency the observation's position is the one measured ``obs_delay_steps`` periods
earlier while its reference is current, so ``ref − pos`` of the observation carries an
along-track offset of about ``v·d·dt`` that no controller causes. The episode's error series, its
RMSE and its maximum come from ``info["position_error"]`` (the true state), for one vehicle and for
a batch alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers.batch import make_batch_controller
from residual_quad.episode import RunSpec, control_context, fly_batch, run_episode

DELAY = 3  # control periods of sensor latency: a 4.7 cm offset at the helix's 1.57 m/s
PLANT = {"obs_delay_steps": DELAY}


def test_single_flight_error_is_the_info_truth_not_the_sensed_offset():
    truth: list[float] = [float("nan")]  # step 0: the reset's, filled below

    def record(step, obs, action, info):
        truth.append(info["position_error"])

    r = run_episode("geo", trajectory="helix", episode_s=6.0, callback=record, **PLANT)
    truth[0] = r.error[0]
    np.testing.assert_array_equal(r.error, truth)
    steady = r.t >= 3.0
    sensed = np.linalg.norm(r.pos - r.ref, axis=1)[steady]
    # the sensed error is the true one plus the delay's offset along the 1.57 m/s path
    offset = 1.57 * DELAY * 0.01
    assert np.median(sensed - r.error[steady]) == pytest.approx(offset, rel=0.15)
    assert r.rmse == pytest.approx(float(np.sqrt(np.mean(r.error[steady] ** 2))), rel=1e-12)
    assert r.rmse < float(np.sqrt(np.mean(sensed**2))) - 0.5 * offset


def test_batch_flight_measures_the_same_truth_as_single_flights():
    specs = [RunSpec("geo", "none", "calm", "helix", seed, episode_s=6.0) for seed in (0, 1)]
    context = control_context(PLANT)
    batch = fly_batch(specs, make_batch_controller("geo", len(specs), context), PLANT)
    for spec, b in zip(specs, batch, strict=True):
        single = run_episode("geo", trajectory="helix", episode_s=6.0, seed=spec.seed, **PLANT)
        np.testing.assert_allclose(b.error, single.error, rtol=0, atol=1e-9)
        assert b.rmse == pytest.approx(single.rmse, abs=1e-9)


def test_without_sensor_latency_the_true_error_is_the_observations():
    """There the observation is the truth: the two agree to the last bit of the norm's formula
    (``√(Δx² + Δy² + Δz²)`` against ``np.linalg.norm``), so the ideal plant's rows stay put."""
    r = run_episode("pid", payload="heavy", wind="windy", trajectory="figure8", episode_s=5.0)
    np.testing.assert_allclose(r.error, np.linalg.norm(r.pos - r.ref, axis=1), rtol=1e-15, atol=0)
