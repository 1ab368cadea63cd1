"""Batched controllers equal N single controllers fed the same closed-loop observations.

N single ``ResidualQuad-v0`` envs with different payloads, winds and trajectories are stacked
into an (N, 36) batch and stepped with the batched actions; N single controllers see the same
observations. Every action must agree to 1e-9, also across an autoreset of one env (a crashed
flight, or a forced reset halfway) and with the RLS settings that exercise the low-pass filter,
the velocity measurement, the leak and the trace cap. (An RLS without an effective trace cap
amplifies rounding like ``λ⁻ᵏ`` in its unexcited directions — any two float implementations part
ways there, so the fold of the scale into P is checked on well-excited data in
``test_batch_rls.py``.)
"""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.driver import LawBatch
from residual_quad.controllers.residual.estimator import rejected_updates
from residual_quad.envs.residual_quad_env import ResidualQuadEnv

TOL = 1e-9
SCENARIOS = (
    ("none", "calm", "hover"),
    ("heavy", "windy", "helix"),
    ("extra", "breezy", "figure8"),
    ("light", "windy", "hover"),
)


#: rows where the OOD guard of ``geo_rls_dob`` acts (extra payload, windy helix) beside rows
#: where it does not, four payloads in one batch
GUARD_SCENARIOS = (
    ("extra", "windy", "helix"),
    ("none", "calm", "hover"),
    ("heavy", "breezy", "figure8"),
    ("light", "windy", "helix"),
)


def fly_side_by_side(name, steps=300, reset_at=150, scenarios=SCENARIOS, **overrides):
    """Closed loop on the batched actions; returns the worst action difference, the batch, the
    singles and the number of autoresets."""
    envs = [ResidualQuadEnv(payload=p, wind=w, trajectory=t) for p, w, t in scenarios]
    n = len(envs)
    batch = make_batch_controller(name, n, **overrides)
    singles = [make_controller(name, **overrides) for _ in range(n)]
    seeds = list(range(n))
    batch.reset_batch(seeds)
    for c, s in zip(singles, seeds, strict=True):
        c.reset(s)
    obs = np.stack([e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)])
    worst, resets, next_seed = 0.0, 0, 100
    for k in range(steps):
        actions = batch.policy_batch(obs)
        expected = np.stack([c.policy(o) for c, o in zip(singles, obs, strict=True)])
        worst = max(worst, float(np.abs(actions - expected).max()))
        for i, env in enumerate(envs):
            o, _, terminated, truncated, _ = env.step(actions[i])
            if terminated or truncated or (k == reset_at and i == 2):
                o, _ = env.reset(seed=next_seed)  # autoreset of env i only
                batch.reset_env(i, next_seed)
                singles[i].reset(next_seed)
                next_seed += 1
                resets += 1
            obs[i] = o
    for env in envs:
        env.close()
    return worst, batch, singles, resets


@pytest.mark.parametrize("name", ["pid", "geo", "geo_res", "geo_rls"])
def test_batched_actions_equal_single_controllers(name):
    worst, batch, singles, resets = fly_side_by_side(name)
    assert resets >= 1
    assert worst <= TOL
    if name == "pid":
        integrals = np.stack([c.state.integral for c in singles])
        assert np.abs(batch.state.integral - integrals).max() <= TOL
        assert np.any(integrals != 0.0)
    if name == "geo_rls":
        est = batch.state.estimator
        ests = [c.state.estimator for c in singles]
        theta = np.stack([e.rls.theta for e in ests])
        assert np.abs(est.rls.theta - theta).max() <= TOL
        assert np.any(theta != batch.estimator.rls.theta0)  # it learned
        assert est.rls.steps.tolist() == [e.rls.steps for e in ests]
        assert est.steps.tolist() == [e.steps for e in ests]
        assert est.warmup_end_step.tolist() == [e.warmup_end_step for e in ests]
        assert_same_covariance(batch, singles)


def covariance(ctrl) -> np.ndarray:
    """The RLS covariance P of a residual tracker's driver: (p, p) one vehicle, (n, p, p) a
    batch."""
    return ctrl.estimator.rls.covariance(ctrl.state.estimator.rls)


def assert_same_covariance(batch, singles) -> None:
    P = np.stack([covariance(c) for c in singles])
    assert np.abs(covariance(batch) - P).max() <= TOL * max(1.0, np.abs(P).max())


@pytest.mark.parametrize(
    "overrides",
    [
        {"measurement": {"source": "velocity", "lowpass_tau": 0.05}},
        {"rls": {"trace_cap": 1.0, "leak": 0.01, "warmup_steps": 0}},
        {"rls": {"forgetting": 0.95, "p0": 0.1, "trace_cap": 10.0, "warmup_steps": 10}},
    ],
    ids=["velocity-lowpass", "cap-leak-no-warmup", "short-memory"],
)
def test_batched_rls_settings_equal_single(overrides):
    worst, batch, singles, _ = fly_side_by_side("geo_rls", steps=200, reset_at=80, **overrides)
    assert worst <= TOL
    rls = batch.state.estimator.rls
    ests = [c.state.estimator for c in singles]
    assert rls.cap_hits.tolist() == [e.rls.cap_hits for e in ests]
    assert rejected_updates(batch.state.estimator).tolist() == [rejected_updates(e) for e in ests]
    assert np.abs(rls.theta - np.stack([e.rls.theta for e in ests])).max() <= TOL


def test_switch_always_equals_single_hnewton():
    """``switch="always"`` augments every level at every step: the law's batch runs every row
    on the single cycle, bit for bit the single controllers."""
    worst, batch, _, _ = fly_side_by_side("hnewton", steps=60, reset_at=30, switch="always")
    assert isinstance(batch, LawBatch)
    assert worst == 0.0


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("geo_rls_dob", {}),
        ("geo_rls", {"enabled": True}),
        ("geo_rls", {"covariance": "efra"}),
        ("geo_rls", {"enabled": True, "covariance": "efra"}),
        ("geo_res", {"enabled": True}),
        ("geo_rls_dob", {"thrust_axis": "commanded"}),
        ("geo_res", {"thrust_axis": "commanded"}),
    ],
    ids=["geo_rls_dob", "guard", "efra", "guard-efra", "geo_res-guard", "dob-cmd", "res-cmd"],
)
def test_guarded_efra_and_observer_batches_equal_single(name, overrides):
    """The OOD guard (switching in the extra/windy helix row), EFRA and the angular disturbance
    observer, vectorized: every action equal to the single controller's to 1e-9 across an
    autoreset, and the guard's, the RLS's and the observer's state with it."""
    worst, batch, singles, resets = fly_side_by_side(name, scenarios=GUARD_SCENARIOS, **overrides)
    assert resets >= 1
    assert worst <= TOL
    assert isinstance(batch, LawBatch) and type(batch.law) is type(singles[0].law)
    est = batch.state.estimator
    ests = [c.state.estimator for c in singles]
    ood_steps = [e.ood_steps for e in ests]
    assert est.ood_steps.tolist() == ood_steps
    if batch.config.ood.enabled:
        assert ood_steps[0] > 0  # the guard switched in the extra/windy helix row
        weights = [e.ood_weight for e in ests]
        np.testing.assert_allclose(est.ood_weight, weights, rtol=0, atol=TOL)
    if est.rls is not None:
        theta = np.stack([e.rls.theta for e in ests])
        assert np.abs(est.rls.theta - theta).max() <= TOL
        assert est.rls.steps.tolist() == [e.rls.steps for e in ests]
        assert_same_covariance(batch, singles)
    if name == "geo_rls_dob":
        torque = np.stack([c.disturbance_torque(c.state) for c in singles])
        assert np.abs(batch.disturbance_torque(batch.state) - torque).max() <= TOL
        assert np.any(torque != 0.0)
        rejected = [c.state.observer.rejected for c in singles]
        assert batch.state.observer.rejected.tolist() == rejected


def test_geo_rls_dob_without_the_observer_or_with_indi_equals_single():
    for overrides in ({"observer": False}, {"observer_tau": 0.0}):
        worst, batch, _, _ = fly_side_by_side(
            "geo_rls_dob", steps=150, reset_at=60, scenarios=GUARD_SCENARIOS, **overrides
        )
        assert worst <= TOL
        assert isinstance(batch, LawBatch)
