"""``hnewton`` / ``hnewton_rls`` on N envs equal N single flights fed the same observations.

One law each: N envs run the batch algorithm of the solvers (every env's first candidate at
once, the single cycle on the rows it leaves), one vehicle the single cycle. N single envs
(payloads, winds, trajectories) are stacked into a batch flown on the batched actions; N single
controllers see the same observations. ``hnewton`` must agree bit for bit (the array path
evaluates the single cycle's formulas in the same order, the rows it leaves run the single
cycle); ``hnewton_rls`` to 1e-9 (its batched RLS sums in another order). Cases where the
thrust/tilt box and the rates bind, so the Newton levels are augmented and the horizontal level
gives way, are flown with tight limits; bad input gives the single controller's errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.driver import LawBatch
from residual_quad.controllers.prioritized.box_hlsp import BatchedBoxHLSP, BoxHLSP
from residual_quad.controllers.prioritized.quad import HNewtonRLSTracker, HNewtonTracker
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv

TOL = 1e-9
SCENARIOS = (
    ("extra", "windy", "helix"),
    ("none", "calm", "hover"),
    ("heavy", "breezy", "figure8"),
    ("light", "windy", "figure8"),
)
#: limits that bind in flight: the box and the rates cut the square solution, the GN slack of
#: the horizontal level is nonzero and the Newton levels are augmented
TIGHT = {"max_tilt": 0.12, "rate_tilt": 1.5, "thrust_max_frac": 0.45}


def fly_side_by_side(name, steps, scenarios=SCENARIOS, reset_at=None, nan_at=(), **overrides):
    """Closed loop on the batched actions beside N singles; returns the worst action
    difference, the batch, the singles and, of the cycles the batch left to the single cycle,
    how many were augmented and how many gave the horizontal level way (slack > 1e-6 m/s²).

    ``nan_at`` lists ``(step, env)`` where that env's observation is replaced by NaNs (both
    sides see it)."""
    envs = [ResidualQuadEnv(payload=p, wind=w, trajectory=t) for p, w, t in scenarios]
    n = len(envs)
    batch = make_batch_controller(name, n, **overrides)
    singles = [make_controller(name, **overrides) for _ in range(n)]
    batch.reset_batch(list(range(n)))
    for i, c in enumerate(singles):
        c.reset(i)
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    counts = {"augmented": 0, "gave_way": 0}
    single_cycle = batch.law.newton  # the cycle of the rows the batch algorithm leaves

    def counting_step(q, a_des, _step=single_cycle.step):
        x = _step(q, a_des)
        counts["augmented"] += any(single_cycle.augmented)
        counts["gave_way"] += float(np.linalg.norm(single_cycle.last.slacks[1])) > 1e-6
        return x

    single_cycle.step = counting_step
    worst, next_seed = 0.0, 100
    for k in range(steps):
        seen = obs.copy()
        for step, i in nan_at:
            if step == k:
                seen[i, L.vel] = np.nan
        actions = batch.policy_batch(seen)
        expected = np.stack([c.policy(o) for c, o in zip(singles, seen, strict=True)])
        worst = max(worst, float(np.abs(actions - expected).max()))
        for i, env in enumerate(envs):
            o, _, terminated, truncated, _ = env.step(actions[i])
            if terminated or truncated or (k == reset_at and i == 1):
                o, _ = env.reset(seed=next_seed)
                batch.reset_env(i, next_seed)
                singles[i].reset(next_seed)
                next_seed += 1
            obs[i] = o
    for env in envs:
        env.close()
    return worst, batch, singles, counts


def assert_state_equal(batch, singles, tol=0.0):
    """Thrust vectors, multipliers, BFGS matrices, previous steps and warm faces equal the
    singles' (each env's row of the batch's ``prioritized`` state against one vehicle's)."""
    part = batch.state.prioritized
    for i, c in enumerate(singles):
        one = c.state.prioritized
        assert np.abs(part.q[i] - one.q).max() <= tol
        assert np.abs(part.qdot[i] - one.qdot).max() <= tol
        nw, s = part.newton, one.newton
        assert bool(nw.has_lam[i]) == bool(s.has_lam)
        if s.has_lam:
            assert np.abs(nw.lam[i] - s.lam).max() <= tol
        assert bool(nw.has_prev[i]) == bool(s.has_prev)
        if s.has_prev:
            assert np.abs(nw.prev_q[i] - s.prev_q).max() <= tol
            assert np.abs(nw.prev_J[i] - s.prev_J).max() <= tol
        assert np.abs(nw.B[i] - s.B).max() <= tol
        assert np.array_equal(nw.face[i], s.face)
        assert np.array_equal(nw.gn_face[i], s.gn_face)
        assert np.array_equal(part.alloc_face[i], one.alloc_face)


def test_one_vehicle_state_is_the_single_cycles_memory():
    """The one-vehicle state holds what the single cycle remembers between steps: loaded before
    each cycle and written back after it, so a vehicle flown from it equals the cycle flown on
    its own memory (multipliers, BFGS matrices, previous step, warm faces)."""
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="figure8")
    ctrl = make_controller("hnewton", env, method="bfgs", **TIGHT)
    ref = make_controller("hnewton", env, method="bfgs", **TIGHT).law.newton  # own memory
    ref.reset()
    obs, _ = env.reset(seed=2)
    ctrl.reset(2)
    steps = augmented = 0
    for steps in range(1, 151):  # noqa: B007 (the count is read after the loop)
        q = ctrl.state.prioritized.q.copy()
        action = ctrl.policy(obs)
        cycle = ctrl.law.newton
        np.testing.assert_array_equal(ctrl.state.prioritized.qdot, cycle.last.x)
        assert ref.p == cycle.p
        x = ref.step(q, _heading_target(ctrl, obs))
        np.testing.assert_array_equal(x, ctrl.state.prioritized.qdot)
        mem = ctrl.state.prioritized.newton
        assert bool(mem.has_lam) == (ref.lam is not None)
        if ref.lam is not None:
            np.testing.assert_array_equal(
                mem.lam, np.concatenate([ref.lam[0][0], ref.lam[1][0], ref.lam[1][1]])
            )
        np.testing.assert_array_equal(mem.B, np.stack(ref.B))
        np.testing.assert_array_equal(mem.prev_q, ref.prev_q)
        np.testing.assert_array_equal(mem.face, ref.solver._last_face)
        augmented += any(ref.augmented)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    env.close()
    assert steps > 50 and augmented > 10  # the augmented HLSP ran on the loaded memory


def _heading_target(ctrl, obs):
    """The heading-frame acceleration target ``hnewton`` handed its cycle for ``obs`` (its
    last command, ``hnewton`` has no residual)."""
    ax, ay, az = ctrl.state.last_a_cmd.tolist()
    yaw = float(obs[L.ref_yaw])
    cy, sy = np.cos(yaw), np.sin(yaw)
    return np.array([cy * ax + sy * ay, -sy * ax + cy * ay, az])


@pytest.mark.parametrize("method", ["newton", "gn", "lm", "bfgs"])
def test_batched_hnewton_equals_single_bit_for_bit(method):
    worst, batch, singles, _ = fly_side_by_side("hnewton", 300, reset_at=120, method=method)
    assert isinstance(batch, LawBatch) and type(batch.law) is HNewtonTracker
    assert worst == 0.0
    assert_state_equal(batch, singles)


@pytest.mark.parametrize("method", ["newton", "bfgs", "lm", "gn"])
def test_saturated_hierarchy_gives_way_identically(method):
    """Tight limits: the box binds, the horizontal level gives way (nonzero slack) and the
    Newton levels are augmented in the rows the single cycle solves -- still bit for bit."""
    worst, batch, singles, counts = fly_side_by_side(
        "hnewton", 250, reset_at=100, method=method, **TIGHT
    )
    assert worst == 0.0
    assert counts["gave_way"] > 20  # the hierarchy saturated: the lower level gave way
    if method != "gn":
        assert counts["augmented"] > 20  # the augmented HLSP ran, not only the square path
    assert_state_equal(batch, singles)


@pytest.mark.parametrize(
    "steps", [300, pytest.param(2000, marks=pytest.mark.slow)], ids=["300-steps", "full-episode"]
)
def test_batched_hnewton_rls_equals_single(steps):
    """hnewton_rls, up to 2000 steps (the 20 s episode), payloads and winds, an autoreset."""
    worst, batch, singles, _ = fly_side_by_side("hnewton_rls", steps, reset_at=steps // 3)
    assert isinstance(batch, LawBatch) and type(batch.law) is HNewtonRLSTracker
    assert worst <= TOL
    est = batch.state.estimator
    theta = np.stack([c.state.estimator.rls.theta for c in singles])
    assert np.abs(est.rls.theta - theta).max() <= TOL
    assert np.any(theta != singles[0].estimator.rls.theta0)  # it learned
    assert est.steps.tolist() == [c.state.estimator.steps for c in singles]
    assert_state_equal(batch, singles, tol=TOL)


def test_batched_hnewton_rls_saturated_with_residual_settings():
    worst, batch, singles, counts = fly_side_by_side(
        "hnewton_rls", 250, method="bfgs", residual={"rls": {"forgetting": 0.99}}, **TIGHT
    )
    assert worst <= TOL and counts["augmented"] > 0
    assert batch.config.rls.forgetting == 0.99


def test_nan_rows_are_held_as_the_single_controller_holds_them():
    """A bad sample of one env: its held action, its state untouched (the next clean steps
    still agree bit for bit); the other rows as if it had been clean."""
    worst, batch, singles, _ = fly_side_by_side(
        "hnewton", 120, nan_at=[(10, 0), (11, 0), (50, 2), (80, 1), (80, 3)], **TIGHT
    )
    assert worst == 0.0
    assert batch.nonfinite_observations.tolist() == [c.nonfinite_observations for c in singles]
    assert batch.nonfinite_observations.sum() >= 3  # (an env that crashes later resets it)
    assert_state_equal(batch, singles)


def test_square_path_is_the_single_solvers_first_candidate():
    """Rows that :meth:`BatchedBoxHLSP.square` marks done equal the single solver's answer bit
    for bit (it stopped at its first candidate); the others are left to it."""
    rng = np.random.default_rng(7)
    n = 400
    A = rng.normal(size=(n, 3, 3))
    b = rng.normal(size=(n, 3))
    lo = -rng.uniform(0.2, 3.0, size=(n, 3))
    up = rng.uniform(0.2, 3.0, size=(n, 3))
    up[:5] = lo[:5]  # pinned variables: never the square path
    batch = BatchedBoxHLSP(BoxHLSP(3, multipliers=True))
    levels = [(A[:, :1], b[:, :1]), (A[:, 1:], b[:, 1:])]
    x, slacks, done = batch.square(lo, up, levels, np.linalg.inv(A))
    assert 50 < done.sum() < n - 50 and not done[:5].any()
    single = BoxHLSP(3, multipliers=True)
    for i in np.flatnonzero(done):
        res = single.solve(lo[i], up[i], [(A[i, :1], b[i, :1]), (A[i, 1:], b[i, 1:])],
                           inverse=np.linalg.inv(A[i]))  # fmt: skip
        assert res.candidates == 1 and not res.face.any()
        assert np.array_equal(res.x, x[i])
        assert all(np.array_equal(w, s[i]) for w, s in zip(res.slacks, slacks, strict=True))


@pytest.mark.parametrize("name", ["hnewton", "hnewton_rls"])
def test_bad_input_gives_the_single_controllers_errors(name):
    for bad in ({"method": "newtonish"}, {"rate_tilt": 0}, {"bogus": 1}):
        with pytest.raises(ValueError) as single:
            make_controller(name, **bad)
        with pytest.raises(ValueError) as batched:
            make_batch_controller(name, 3, **bad)
        assert str(batched.value) == str(single.value)
    ctrl = make_batch_controller(name, 3)
    for shape in ((2, 36), (3, 35), (36,)):
        with pytest.raises(ValueError, match=r"shape \(3, 36 \+ 6K\)"):
            ctrl.policy_batch(np.zeros(shape))


@pytest.mark.parametrize("name", ["hnewton", "hnewton_rls"])
def test_switch_always_runs_every_row_on_the_single_cycle(name):
    """``switch="always"`` augments every level at every step, which only the single cycle
    solves: the law's batch runs it row by row -- still the single flights' actions (bit for
    bit for ``hnewton``), and every row was left to the single cycle and augmented."""
    worst, batch, singles, counts = fly_side_by_side(
        name, 60, reset_at=30, method="lm", switch="always"
    )
    assert isinstance(batch, LawBatch)
    assert worst <= (0.0 if name == "hnewton" else TOL)
    assert counts["augmented"] == 60 * len(SCENARIOS)
    assert_state_equal(batch, singles, tol=0.0 if name == "hnewton" else TOL)


def test_the_trackers_attitude_loop_options_reach_hnewton():
    """``hnewton`` is a tracker law: the tracker's INDI attitude loop (``attitude_loop="indi"``)
    adds its torque to the prioritized stage's attitude torque — a different flight from the
    PD's — and N envs equal one vehicle's (the INDI batch sums in another order)."""
    worst, batch, singles, _ = fly_side_by_side(
        "hnewton", 120, reset_at=60, nan_at=[(10, 0)], attitude_loop="indi"
    )
    assert worst <= TOL and batch.law.indi is not None
    indi_q = np.stack([c.state.prioritized.q for c in singles])
    _, _, pd_singles, _ = fly_side_by_side("hnewton", 120, reset_at=60, nan_at=[(10, 0)])
    assert not np.array_equal(indi_q, np.stack([c.state.prioritized.q for c in pd_singles]))
