"""One bad sample cannot poison the residual estimator: it is rejected, counted, and forgotten.

A NaN/inf or implausible sample in the observation (IMU, thrusts, velocity) must neither reach the
RLS (its weights would be NaN for good) nor the action; the estimator skips the update, keeps its
previous state, counts the sample, and the next clean sample is used as usual.

A controller's ``policy`` keeps non-finite observations from its estimator altogether
(``ObservationGuard``: ``tests/controllers/test_bad_observations.py``); the tests of the
estimator's own defence show it the bad sample through ``act``, the controller's law behind the
guard, as a controller without the guard would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residual_quad.controllers import ControlContext, make_controller
from residual_quad.controllers.residual.config import residual_config
from residual_quad.controllers.residual.estimator import ResidualEstimator, rejected_updates
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import run_episode

SCENARIO = dict(payload="heavy", wind="windy", trajectory="helix")


def _fly_with_fault(
    name: str,
    where: slice,
    value: float,
    k_bad: int = 150,
    steps: int = 400,
    scenario: dict | None = None,
    guarded: bool = False,
) -> tuple[object, dict, float, bool]:
    """Fly ``name`` for ``steps`` control periods, showing the controller ``value`` in the
    observation slice ``where`` once, at step ``k_bad`` (the env itself is untouched), through
    ``act`` (the estimator's own defence) or, ``guarded``, through ``policy``.

    Returns the controller, the last ``info``, the largest position error (m) and whether the
    episode was terminated (a crash)."""
    env = ResidualQuadEnv(**(scenario or SCENARIO))
    try:
        obs, info = env.reset(seed=0)
        ctrl = make_controller(name, env)
        ctrl.reset(0)
        worst = 0.0
        for k in range(steps):
            seen = obs.copy()
            if k == k_bad:
                seen[where] = value
            act = ctrl.act if k == k_bad and not guarded else ctrl.policy
            obs, _, terminated, truncated, info = env.step(act(seen))
            worst = max(worst, float(info["position_error"]))
            if terminated or truncated:
                return ctrl, info, worst, terminated
        return ctrl, info, worst, False
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf · 0
@pytest.mark.parametrize("name", ["geo_rls", "hnewton_rls"])
@pytest.mark.parametrize(
    ("where", "value"),
    [(L.imu, np.nan), (L.imu, np.inf), (L.thrusts, np.nan), (L.thrusts, -np.inf)],
    ids=["imu-nan", "imu-inf", "thrusts-nan", "thrusts-neginf"],
)
def test_a_non_finite_sample_is_rejected_and_the_flight_goes_on(name, where, value):
    ctrl, info, worst, ended = _fly_with_fault(name, where, value)
    est, rls = ctrl.state.estimator, ctrl.estimator.rls
    assert not ended, info.get("termination")
    clean_worst = _fly_with_fault(name, where, value, k_bad=-1)[2]
    assert worst < 1.2 * clean_worst  # the helix is flown as without the fault
    assert np.all(np.isfinite(est.rls.theta)) and np.all(np.isfinite(rls.covariance(est.rls)))
    assert np.isfinite(rls.trace(est.rls))
    assert 1 <= rejected_updates(est) <= 2  # the bad measurement (and a NaN regressor's update)


@pytest.mark.parametrize("name", ["geo_rls", "hnewton_rls"])
def test_through_policy_the_estimator_never_sees_a_non_finite_sample(name):
    ctrl, info, worst, ended = _fly_with_fault(name, L.imu, np.nan, guarded=True)
    assert not ended, info.get("termination")
    assert ctrl.nonfinite_observations == 1  # held by the guard
    est = ctrl.state.estimator
    assert rejected_updates(est) == 0 and est.nonfinite_estimates == 0


def test_an_imu_spike_is_rejected_and_does_not_crash_geo_rls():
    """A single 1e6 m/s² accelerometer spike used to be learned: geo_rls then hit the ground a
    second later (extra payload, hover), or flew the helix with 1 m errors."""
    for scenario in (dict(payload="extra", wind="windy", trajectory="hover"), SCENARIO):
        clean = _fly_with_fault("geo_rls", L.imu, 0.0, k_bad=-1, steps=2000, scenario=scenario)
        ctrl, info, worst, ended = _fly_with_fault(
            "geo_rls", L.imu, 1e6, steps=2000, scenario=scenario
        )
        assert not ended, info.get("termination")
        assert worst < 1.2 * clean[2]
        assert rejected_updates(ctrl.state.estimator) == 1
        assert rejected_updates(clean[0].state.estimator) == 0


def test_a_nan_velocity_gives_a_zero_estimate_once_then_the_estimator_recovers():
    """NaN velocity makes the regressor NaN: that step's estimate falls back to zero (counted),
    the update that would pair the NaN regressor with the next measurement is skipped, and the
    estimator's state stays finite, so the next clean observation is served as usual."""
    env = ResidualQuadEnv(**SCENARIO)
    obs, _ = env.reset(seed=0)
    ctrl = make_controller("geo_rls", env)
    twin = make_controller("geo_rls", env)  # never shown the bad sample
    ctrl.reset(0)
    twin.reset(0)
    for k in range(300):
        action = twin.policy(obs)
        if k == 150:
            bad = obs.copy()
            bad[L.vel] = np.nan
            ctrl.act(bad)  # geo's own feedback is NaN here; the estimator's must not be
            est = ctrl.state.estimator
            assert np.array_equal(est.last_estimate, np.zeros(3))
            assert est.nonfinite_estimates == 1
            assert np.all(np.isfinite(est.last_a_eff))
        else:
            mine = ctrl.policy(obs)
            assert np.all(np.isfinite(mine)), k
            if k < 150:
                assert np.array_equal(mine, action)
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated)
    env.close()
    est = ctrl.state.estimator
    assert rejected_updates(est) == 1 and est.nonfinite_estimates == 1
    assert np.all(np.isfinite(est.rls.theta))
    assert np.all(np.isfinite(ctrl.estimator.rls.covariance(est.rls)))
    # one skipped update among 299: the estimates stay close to the twin's
    assert np.linalg.norm(est.last_estimate - twin.state.estimator.last_estimate) < 0.5


def test_measured_residual_beyond_the_plausibility_bound_is_rejected():
    """``measurement.max_residual`` (m/s²) bounds what the RLS learns from; NaN is beyond any.
    One vehicle (``estimate_one``) and a batch of one (``estimate``) on the same samples."""
    assert residual_config().measurement.max_residual == 25.0  # the training data's threshold
    ctx = ControlContext()
    est = ResidualEstimator(ctx, residual_config(max_residual=5.0, warmup_steps=0))
    one, rows = est.init_one(), est.init_state(1)
    obs = np.zeros(OBS_DIM)
    obs[L.rot] = np.eye(3).ravel()
    obs[L.thrusts] = ctx.airframe.mass * ctx.airframe.gravity / 4  # N, hover
    obs[L.imu] = (0.0, 0.0, ctx.airframe.gravity)
    R, zero = np.eye(3), np.zeros(3)
    one, _ = est.estimate_one(one, obs, R, zero)  # primes the estimator (no previous period yet)
    rows, _ = est.estimate(rows, obs[None], R[None], zero[None])
    for imu_z, accepted in ((4.0, True), (6.0, False), (np.nan, False), (-4.5, True)):
        obs[L.imu] = (0.0, 0.0, ctx.airframe.gravity + imu_z)  # measured residual (m/s²)
        steps, rejected, theta = one.rls.steps, rejected_updates(one), one.rls.theta.copy()
        theta_rows = rows.rls.theta.copy()
        one, d = est.estimate_one(one, obs, R, zero)
        rows, d_rows = est.estimate(rows, obs[None], R[None], zero[None])
        assert np.all(np.isfinite(d)) and np.all(np.isfinite(d_rows))
        assert one.rls.steps == steps + accepted
        assert rejected_updates(one) == rejected + (not accepted)
        assert np.array_equal(one.rls.theta, theta) != accepted
        assert rows.rls.steps.tolist() == [one.rls.steps]
        assert rejected_updates(rows).tolist() == [rejected_updates(one)]
        assert np.array_equal(rows.rls.theta, theta_rows) != accepted
    assert rejected_updates(one) == 2
    for bad in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="max_residual"):
            residual_config(max_residual=bad)


def test_rejected_updates_are_a_tensorboard_curve(tmp_path: Path):
    from residual_quad.training.tb_logging import EpisodeLogger, read_scalars

    ctrl = make_controller("geo_rls", max_residual=1e-9)  # every measurement is implausible
    logger = EpisodeLogger(tmp_path / "run", ctrl)
    res = run_episode(ctrl, payload="extra", trajectory="hover", episode_s=1.0, callback=logger)
    logger.close()
    curve = [v for _, v in read_scalars(tmp_path / "run" / "rls")["rls/rejected"]]
    assert len(curve) == res.steps
    assert curve == [float(k) for k in range(res.steps)]  # the first call has no measurement
    est = ctrl.state.estimator
    assert rejected_updates(est) == res.steps - 1 and est.rls.steps == 0
