"""Property-based test of the residual estimator on observation streams with injected faults.

A clean 3-s ``geo_rls`` flight is recorded once (observations and commanded accelerations); each
example replays it through a fresh estimator with NaN/inf/huge values written into the IMU,
velocity or thrust slices at random steps. Whatever the faults: every estimate is finite and
bounded by the network's output clip, the RLS state stays finite with ``tr P`` within its cap,
and the counters count exactly the samples that had to be skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers import ControlContext, make_controller
from residual_quad.controllers.residual.config import residual_config
from residual_quad.controllers.residual.estimator import ResidualEstimator, rejected_updates
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv

STEPS = 300
SLICES = {"imu": L.imu, "vel": L.vel, "thrusts": L.thrusts}
# what each slice may be corrupted with (huge finite values only where they are implausible
# measurements; a huge finite velocity is a valid, if saturating, regressor)
VALUES = {
    "imu": [np.nan, np.inf, -np.inf, 1e6, -3e4],
    "vel": [np.nan],
    "thrusts": [np.nan],
}


@pytest.fixture(scope="module")
def stream() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observations, rotations and commanded accelerations of a clean geo_rls flight."""
    env = ResidualQuadEnv(payload="extra", wind="windy", trajectory="helix")
    obs, _ = env.reset(seed=3)
    ctrl = make_controller("geo_rls", env)
    ctrl.reset(3)
    O, R, A = [], [], []
    for _ in range(STEPS):
        action = ctrl.policy(obs)
        O.append(obs.copy())
        R.append(L.rotation(obs).copy())
        A.append(np.array(ctrl.state.last_a_cmd, dtype=float))
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated)
    env.close()
    return np.array(O), np.array(R), np.array(A)


fault = st.tuples(
    st.integers(0, STEPS - 1),
    st.sampled_from(sorted(SLICES)),
    st.integers(0, 3),  # component (modulo the slice's size)
    st.integers(0, 4),  # value index (modulo the slice's list)
)


@settings(max_examples=60, deadline=None)
@given(
    faults=st.lists(fault, max_size=8),
    source=st.sampled_from(["imu", "velocity"]),
    lowpass_tau=st.sampled_from([0.0, 0.05]),  # s
)
def test_faulty_streams_keep_the_estimator_finite_and_counted(stream, faults, source, lowpass_tau):
    O, R, A = stream
    O = O.copy()
    bad_meas, bad_regressor = set(), set()  # steps whose measurement / regressor is non-finite
    for k, name, i, v in faults:
        sl = SLICES[name]
        O[k, sl.start + i % (sl.stop - sl.start)] = VALUES[name][v % len(VALUES[name])]
        if name in ("vel", "thrusts"):
            bad_regressor.add(k)
        if name == "thrusts" or (name == "imu" and source == "imu"):
            bad_meas.add(k)  # both sources use the thrusts; only "imu" reads the IMU
        if name == "vel" and source == "velocity":
            bad_meas.update({k, k + 1})  # a velocity difference uses two observations
    cfg = residual_config(
        measurement={"source": source, "lowpass_tau": lowpass_tau}, rls={"warmup_steps": 20}
    )
    est = ResidualEstimator(ControlContext(), cfg)
    one, rows = est.init_one(), est.init_state(1)  # one vehicle, and a batch of one beside it
    clip = est.net.clip * np.sqrt(3.0)  # m/s², bound on a rotated clipped estimate
    for k in range(STEPS):
        one, delta = est.estimate_one(one, O[k], R[k], A[k])
        rows, deltas = est.estimate(rows, O[k : k + 1], R[k : k + 1], A[k : k + 1])
        for d in (delta, deltas[0]):
            assert np.all(np.isfinite(d)) and np.linalg.norm(d) <= clip + 1e-9, k
        assert np.all(np.isfinite(one.last_a_eff)) and np.all(np.isfinite(rows.last_a_eff)), k
    # an update at step k pairs the measurement of period k with the regressor of step k - 1
    skipped = {k for k in range(1, STEPS) if k in bad_meas or k - 1 in bad_regressor}
    for state in (one, rows):
        rls = state.rls
        trace = np.max(est.rls.trace(rls))
        assert np.all(np.isfinite(rls.theta)) and np.all(np.isfinite(est.rls.covariance(rls)))
        assert np.isfinite(trace) and trace <= cfg.rls.trace_cap * (1 + 1e-9)
        assert np.all(np.isfinite(state.phi_f)) and np.all(np.isfinite(state.y_f))  # low-pass
        assert np.all(state.nonfinite_estimates == len(bad_regressor))
        assert np.all(rejected_updates(state) == len(skipped))
        assert np.all(rls.steps == STEPS - 1 - len(skipped))
