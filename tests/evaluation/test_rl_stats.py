"""RL statistics with rliable: seeded intervals, IQM, probability of improvement, profiles.

The legacy global generator (``np.random.seed``/``get_state``) is used on purpose: the tests
show rliable's bootstrap reads it and ours leaves it alone."""

# ruff: noqa: NPY002

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("rliable")
from residual_quad.evaluation.report import rl_stats  # noqa: E402

try:
    rl_stats.import_rliable()
except ImportError as exc:  # rliable present but its arch does not import (arch < 8, pandas 3)
    pytest.skip(str(exc), allow_module_level=True)


def _scores(seed: int = 0, runs: int = 5, tasks: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).random((runs, tasks))


def test_rliables_own_stratified_bootstrap_draws_from_numpys_global_state():
    """The upstream defect: its indices depend on np.random's global state, not on the
    bootstrap's generator, and drawing them moves that global state."""
    from rliable.library import StratifiedBootstrap

    stratified, _ = rl_stats.seeded_bootstraps()
    a = stratified(_scores(), seed=1)
    b = stratified(_scores(), seed=2)
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    ia = StratifiedBootstrap.update_indices(a)[0]
    assert not np.array_equal(np.random.get_state()[1], before)  # global state moved
    np.random.seed(7)
    ib = StratifiedBootstrap.update_indices(b)[0]
    assert np.array_equal(ia, ib)  # the bootstraps' own seeds 1 and 2 were ignored


def test_seeded_intervals_are_reproducible_and_leave_the_global_state_alone():
    s = {"a": _scores()}
    np.random.seed(3)
    state = np.random.get_state()
    p1, ci1 = rl_stats.interval_estimates(s, rl_stats.iqm, seed=0, reps=300)
    after = np.random.get_state()
    assert all(np.array_equal(x, y) for x, y in zip(state[1:3], after[1:3], strict=True))
    np.random.seed(99)  # a different global state changes nothing
    p2, ci2 = rl_stats.interval_estimates(s, rl_stats.iqm, seed=0, reps=300)
    assert np.array_equal(ci1["a"], ci2["a"]) and p1["a"] == p2["a"]
    _, ci3 = rl_stats.interval_estimates(s, rl_stats.iqm, seed=1, reps=300)
    assert not np.array_equal(ci1["a"], ci3["a"])
    lo, hi = ci1["a"][:, 0]
    assert lo <= p1["a"][0] <= hi


def test_independent_bootstrap_is_seeded_too():
    pair = {"x|y": (_scores(0, runs=6), _scores(1, runs=3))}
    f = rl_stats.probability_of_improvement
    _, c1 = rl_stats.interval_estimates(pair, f, seed=0, reps=200)
    np.random.seed(5)
    _, c2 = rl_stats.interval_estimates(pair, f, seed=0, reps=200)
    _, c3 = rl_stats.interval_estimates(pair, f, seed=4, reps=200)
    assert np.array_equal(c1["x|y"], c2["x|y"]) and not np.array_equal(c1["x|y"], c3["x|y"])


def test_iqm_equals_rliables():
    from rliable import metrics

    rng = np.random.default_rng(2)
    for n in range(1, 30):
        x = rng.integers(0, 5, (n, 3)).astype(float) * rng.random()
        assert rl_stats.iqm(x)[0] == pytest.approx(metrics.aggregate_iqm(x), abs=1e-12)


def test_iqm_of_a_known_array():
    # 8 runs x 1 task: the middle 50 % are 1.0, 1.5, 2.0, 2.5 -> 1.75
    x = np.array([[0.0], [1.0], [2.0], [3.0], [100.0], [-100.0], [1.5], [2.5]])
    assert rl_stats.iqm(x)[0] == pytest.approx(1.75)
    assert rl_stats.mean(np.array([[1.0, 3.0]]))[0] == 2.0


def test_probability_of_improvement_equals_rliables_and_of_a_clearly_better_sample_is_one():
    from rliable import metrics

    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 4, (int(rng.integers(1, 6)), 3)).astype(float)
        y = rng.integers(0, 4, (int(rng.integers(1, 6)), 3)).astype(float)
        ours = rl_stats.probability_of_improvement(x, y)[0]
        assert ours == pytest.approx(metrics.probability_of_improvement(x, y), abs=1e-12)
    better = _scores(1) + 10.0
    assert rl_stats.probability_of_improvement(better, _scores(2))[0] == pytest.approx(1.0)
    assert rl_stats.probability_of_improvement(_scores(2), better)[0] == pytest.approx(0.0)


def test_score_distribution_equals_rliables_profile():
    from rliable import library

    x, taus = _scores(3) * 3.0, np.linspace(0.0, 3.0, 13)
    assert np.allclose(rl_stats.score_distribution(x, taus), library.score_distributions(x, taus))


def _row(ctrl, payload, traj, seed, rmse, ts=0, diverged=False):
    return {
        "controller": ctrl,
        "payload": payload,
        "wind": "calm",
        "trajectory": traj,
        "seed": seed,
        "training_seed": ts,
        "rmse": rmse,
        "diverged": diverged,
    }


def _rows():
    rows = []
    for p, base in (("none", 0.02), ("heavy", 0.08)):
        for traj in ("helix", "figure8", "hover"):
            for s in range(2):
                rows.append(_row("pid", p, traj, s, base))
                rows.append(_row("geo_rls", p, traj, s, base / 4))
                for ts in range(2):
                    rows.append(_row("ppo", p, traj, s, base * 2, ts, diverged=(s, ts) == (1, 1)))
    return rows


def test_normalized_score_is_pid_mean_over_rmse_and_a_crash_scores_zero():
    ss = rl_stats.normalized_scores(_rows())
    assert ss.tasks == [(p, "calm", t) for p in ("none", "heavy") for t in ("helix", "figure8")]
    assert np.allclose(ss.scores["pid"], 1.0) and np.allclose(ss.scores["geo_rls"], 4.0)
    ppo = ss.scores["ppo"]  # runs ordered by (training seed, env seed): the last run crashed
    assert ppo.shape == (4, 4) and np.allclose(ppo[:3], 0.5) and np.all(ppo[3] == 0.0)
    assert rl_stats.normalized_scores([r for r in _rows() if r["controller"] != "pid"]) is None
    exact = rl_stats.normalized_scores([*_rows(), _row("geo", "none", "helix", 0, 0.0)])
    assert exact.left_out == {"geo": "flew 1 of the 4 scenarios"} and len(exact.tasks) == 4
    ones = [_row("pid", "none", "helix", 0, 0.02), _row("geo", "none", "helix", 0, 0.0)]
    assert rl_stats.normalized_scores(ones).scores["geo"][0, 0] == math.inf


def test_rl_statistics_on_rows_and_the_profile_figure(tmp_path):
    st = rl_stats.rl_statistics(_rows(), ["ppo"], reps=200)
    assert st.iqm["geo_rls"][0] == pytest.approx(4.0)
    assert set(st.improvement) == {("ppo", "pid"), ("ppo", "geo_rls")}
    assert st.improvement[("ppo", "pid")][0] < 0.5
    assert st.profiles["pid"][0] == 1.0 and st.profiles["pid"][-1] == 0.0
    assert math.isclose(st.profiles["ppo"][0], 0.75)
    path = rl_stats.profile_figure(st, tmp_path / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_without_rliable_the_error_carries_the_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "rliable", None)
    with pytest.raises(ImportError, match=r"\.\[rl\]"):
        rl_stats.import_rliable()
