"""Outer-loop INDI (``outer_indi_hz``): the filtered accelerometer residual a tracker's own
estimate misses. Known answers (the filter is scipy's Butterworth; a constant payload deficit is
cancelled to the millimetre), the commanded-axis rule behind lag, batch = single, clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import signal

from residual_quad.controllers import make_controller
from residual_quad.controllers.attitude import LAG_TUNED_GAINS
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.outer_indi import MAX_ACCEL, OuterIndi
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import control_context, run_episode

DT = 0.01  # s


def _obs(imu: np.ndarray, thrusts: np.ndarray) -> np.ndarray:
    obs = np.zeros(OBS_DIM)
    obs[L.imu] = imu
    obs[L.thrusts] = thrusts
    return obs


def test_the_estimate_is_scipys_butterworth_of_the_measured_residual_minus_the_model():
    """Known answer: with the tracker's own estimate ``m``, the loop's output is
    ``lfilter(butter(2, hz), r − m)`` of the measured residual ``r = R(f − e_z ΣT/m)``."""
    af = Airframe()
    loop = OuterIndi(af, DT, 2.0)
    rng = np.random.default_rng(0)
    n = 200
    imu = rng.normal([0.0, 0.0, 9.8], 0.5, (n, 3))
    thrusts = rng.uniform(2.0, 3.0, (n, 4))
    model = rng.normal(0.0, 0.3, (n, 3))
    yaw = 0.4
    R = np.array(
        [[math.cos(yaw), -math.sin(yaw), 0.0], [math.sin(yaw), math.cos(yaw), 0.0], [0, 0, 1]]
    )
    r = (imu - np.outer(thrusts.sum(1) / af.mass, [0.0, 0.0, 1.0])) @ R.T
    b, a = signal.butter(2, 2.0, fs=1.0 / DT)
    expected = signal.lfilter(b, a, r - model, axis=0)
    state = loop.init_state(1)
    got = []
    for k in range(n):
        state = loop.update(state, _obs(imu[k], thrusts[k])[None], R[None], model[k][None])
        got.append(state.estimate[0].copy())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_an_implausible_or_non_finite_period_leaves_the_filter_as_it_was():
    loop = OuterIndi(Airframe(), DT, 1.0)
    state = loop.init_state(2)
    good = _obs(np.array([0.5, 0.0, 9.0]), np.full(4, 2.3))
    state = loop.update(state, np.stack([good, good]), np.stack([np.eye(3)] * 2), np.zeros((2, 3)))
    before = state.estimate.copy()
    bad = np.stack([_obs(np.array([np.nan, 0.0, 9.0]), np.full(4, 2.3)),
                    _obs(np.array([0.0, 0.0, 9.0 + 2 * MAX_ACCEL]), np.full(4, 2.3))])  # fmt: skip
    state = loop.update(state, bad, np.stack([np.eye(3)] * 2), np.zeros((2, 3)))
    np.testing.assert_array_equal(state.estimate, before)
    assert state.rejected.tolist() == [1, 1]
    one = loop.update_one(
        loop.init_state(1)._replace(rejected=0), bad[0], np.eye(3), np.zeros(3)
    )  # the one-vehicle form counts it too
    assert one.rejected == 1


def test_a_payload_the_model_misses_is_cancelled_to_the_millimetre():
    """Known answer: ``geo`` holds a hover offset of Δa/kp under the heavy payload's deficit;
    with outer INDI the filtered residual cancels it, and the estimate is the true residual."""
    scenario = dict(payload="heavy", wind="calm", trajectory="hover", seed=0, episode_s=8.0)
    plain = run_episode("geo", **scenario)
    ctrl = make_controller("geo", outer_indi_hz=2.0)
    indi = run_episode(ctrl, **scenario)
    late = indi.t >= 5.0
    offset = np.abs(plain.pos[late, 2] - plain.ref[late, 2]).mean()
    true_dz = plain.residual_true[late, 2].mean()  # m/s², the deficit (negative: it sinks)
    assert offset == pytest.approx(abs(true_dz) / 20.0, rel=0.05)  # Δa / kp, kp = 20 1/s²
    assert np.abs(indi.pos[late] - indi.ref[late]).max() < 1e-3
    np.testing.assert_allclose(ctrl.state.outer.estimate[2], true_dz, rtol=0.01)


@pytest.mark.parametrize(("attitude", "ratio"), [(LAG_TUNED_GAINS, 3.0), (None, 1.5)])
def test_behind_lag_the_body_z_part_acts_along_the_commanded_axis(attitude, ratio):
    """Isolated: 60 ms rotors, the extra payload, gusts. Applied along the commanded thrust
    axis the estimate flies the hover; the same estimate applied as measured (along the
    achieved axis) feeds the payload's deficit back through the tilt and the vehicle orbits:
    at over 3× the error on the hand-tuned 10 rad/s loop, 2× on the scheduled 15 rad/s."""
    env = {"rotor_tau_s": 0.06}
    scenario = dict(payload="extra", wind="windy", trajectory="hover", seed=0, **env)
    ctx = control_context(env)
    gains = {} if attitude is None else {"attitude": attitude}
    commanded = run_episode(make_controller("geo", ctx, outer_indi_hz=1.0, **gains), **scenario)
    achieved = make_controller("geo", ctx, outer_indi_hz=1.0, **gains)
    achieved.law.outer.applied = lambda a_v, estimate, R: estimate
    orbit = run_episode(achieved, **scenario)
    assert not commanded.diverged and commanded.rmse < 0.08
    assert orbit.rmse > ratio * commanded.rmse


@pytest.mark.parametrize("name", ["pid", "geo_rls", "geo_rls_dob", "hnewton_rls"])
def test_batched_trackers_with_outer_indi_equal_the_single_ones(name, batch_flight):
    """On the realistic plant (rotor model, INDI, predictor) and the ideal one: the batch's
    actions equal the single trackers' flights (≤ 1e-9, the estimators' batch contract)."""
    for env in ({"preset": "realistic"}, {}):
        ctx = control_context(env)
        batch = make_batch_controller(name, 2, ctx, outer_indi_hz=1.0)
        singles = [make_controller(name, ctx, outer_indi_hz=1.0) for _ in range(2)]
        envs = [
            ResidualQuadEnv(payload=p, wind="windy", trajectory=t, **env)
            for p, t in (("extra", "helix"), ("none", "figure8"))
        ]
        batch_flight(batch, singles, envs, 60, atol=1e-9)
        assert singles[0].state.outer.estimate.any()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1.0, "outer_indi_hz"),
        (50.0, "outer_indi_hz"),
        (float("nan"), "outer_indi_hz"),
        ("fast", "outer_indi_hz"),
    ],
)
def test_a_bad_filter_frequency_is_an_error_naming_the_option(value, message):
    with pytest.raises(ValueError, match=message):
        make_controller("geo", outer_indi_hz=value)


def test_at_another_control_rate_the_bound_is_its_nyquist_frequency():
    from residual_quad.controllers.base import ControlContext

    slow = ControlContext(control_dt=0.02)  # 50 Hz: Nyquist 25 Hz
    assert make_controller("geo", slow, outer_indi_hz=20.0).law.outer.hz == 20.0
    with pytest.raises(ValueError, match=r"outer_indi_hz must be in \(0, 25\) Hz"):
        make_controller("geo", slow, outer_indi_hz=30.0)


def test_off_by_default_and_zero_is_off():
    assert make_controller("geo").law.outer is None
    assert make_controller("geo_rls", outer_indi_hz=0.0).law.outer is None
    assert make_controller("pid", outer_indi_hz=1.5).law.outer.hz == 1.5
