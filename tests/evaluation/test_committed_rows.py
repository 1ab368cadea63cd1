"""The committed result rows reproduce, on this machine and on others.

``docs/results/sweep/rows.jsonl`` (the full pipeline matrix) and ``docs/stress/rows.jsonl`` (the
stress study) are the project's published numbers. A refactor must not move them: this re-flies a
fixed sample of both files (every controller, every scenario group; ``reproduce.SWEEP_SAMPLE`` and
``STRESS_SAMPLE``) with the current code and compares every column.

On the numerics that produced the rows (``numerics.json`` next to them: the OpenBLAS kernel family
and library versions) the comparison is bit for bit. Elsewhere each numeric metric must agree
within ``max(1e-9 relative, 10 × its spread under one-ulp action jitter)`` — the spread measured
per row and committed in ``docs/results/reproducibility/sensitivity.json`` — and every discrete
column (crash flags, termination, steps) exactly. The other tests here show that this tolerance
still catches a real change, that it holds for flights under jitter seeds the spread was not
measured with, and under other OpenBLAS kernels this processor can run.
"""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.evaluation.studies import reproduce as r
from residual_quad.numerics import blas_core

SENSITIVITY = r.read_sensitivity()
SAMPLE = [(kind, run_id) for kind in r.KINDS for run_id in r.sample(kind)]
IDS = [f"{k}:{run_id}" for k, run_id in SAMPLE]


def _needs_extras(run_id: str) -> None:
    if run_id.startswith("ppo"):
        pytest.importorskip("stable_baselines3")


@pytest.mark.parametrize(("kind", "run_id"), SAMPLE, ids=IDS)
def test_committed_rows_reproduce(kind, run_id):
    _needs_extras(run_id)
    exact = r.same_numerics(kind)
    row = r.refly(kind, run_id)
    sens = SENSITIVITY[f"{kind}|{run_id}"]
    assert r.compare(row, r.committed_row(kind, run_id), sens, exact) == []


def test_the_sweep_sample_holds_every_controller_row_of_the_matrix():
    """One sampled row per controller row (an RL row by any of its training seeds), so a change
    to any shipped controller or policy file moves a sampled row."""
    from residual_quad.evaluation.sweep.rows import read_rows

    rows = read_rows(r._require_docs("sweep"))
    committed = {row["controller"].split(":")[0] for row in rows}
    sampled = {run_id.split("|")[0].split(":")[0] for run_id in r.SWEEP_SAMPLE}
    assert committed - sampled == set()
    for run_id in r.SWEEP_SAMPLE:
        assert r.committed_row("sweep", run_id)["run_id"] == run_id


def test_every_sampled_row_has_a_measured_sensitivity_with_stable_outcomes():
    assert set(SENSITIVITY) == {f"{k}|{run_id}" for k, run_id in SAMPLE}
    for key, sens in SENSITIVITY.items():
        # discrete outcomes are compared exactly, which is sound only if jitter never moves them
        assert sens["flipped"] == [], key
        assert sens["flights"] >= 8, key
        assert all(v is None or v >= 0 for v in sens["spread"].values()), key


@pytest.mark.parametrize(("kind", "run_id"), SAMPLE, ids=IDS)
def test_rows_under_unseen_jitter_stay_within_tolerance(kind, run_id):
    """A stand-in for another machine that every machine can run: one-ulp jitter drawn with a
    seed the spread was not measured with; the tolerance must hold (not bit for bit)."""
    _needs_extras(run_id)
    row = r.refly(kind, run_id, jitter_seed=1000)
    sens = SENSITIVITY[f"{kind}|{run_id}"]
    assert r.compare(row, r.committed_row(kind, run_id), sens, exact=False) == []


@pytest.mark.parametrize(
    ("kind", "run_id", "options"),
    [
        ("sweep", "geo|extra|breezy|helix|2", {"kp": 20.00002}),  # one part in a million
        ("sweep", "pid|light|windy|figure8|1", {"kd": 8.000008}),
        ("stress", "hnewton|yaw180_hover_heavy_windy|1", {"kp": 20.00002}),
        ("stress", "hnewton_rls|gust10_helix|1", {"kd": 8.000008}),
    ],
)
def test_a_real_change_is_caught_on_any_numerics(kind, run_id, options):
    """A gain moved by one part in a million fails the tolerance check. (The most sensitive row,
    ``hnewton:bfgs|fig8_3x_extra|0``, allows 3.6° of max tilt: on foreign numerics it guards only
    its crash outcome and its rough numbers; the insensitive rows guard the code.)"""
    row = r.refly(kind, run_id, **options)
    sens = SENSITIVITY[f"{kind}|{run_id}"]
    assert r.compare(row, r.committed_row(kind, run_id), sens, exact=False) != []


def test_tolerance_is_the_floor_for_an_insensitive_metric_and_scales_with_the_spread():
    assert r.tolerance(2.0, 0.0) == pytest.approx(2e-9 + 1e-12)
    assert r.tolerance(2.0, None) == pytest.approx(2e-9 + 1e-12)
    assert r.tolerance(2.0, 1e-3) == pytest.approx(r.FACTOR * 1e-3)
    committed = {"run_id": "x", "rmse": 1.0, "diverged": False}
    assert (
        r.compare({"run_id": "x", "rmse": 1.0 + 5e-10, "diverged": False}, committed, {}, False)
        == []
    )
    assert r.compare({"run_id": "x", "rmse": 1.0 + 5e-10, "diverged": False}, committed, {}, True)
    assert r.compare({"run_id": "x", "rmse": 1.0, "diverged": True}, committed, {}, False)
    assert r.compare({"run_id": "x", "rmse": 1.0}, committed, {}, False)  # a column missing


def test_ulp_jitter_moves_actions_by_at_most_one_ulp_and_replays_after_reset():
    inner = make_controller("geo")
    jit = r.UlpJitter(make_controller("geo"), seed=3)
    obs = np.zeros(36)
    obs[2], obs[14] = 1.4, 1.5  # z and reference z: the tracker pushes up
    obs[6:15] = np.eye(3).ravel()
    jit.reset(0)
    inner.reset(0)
    first = [jit.policy(obs) for _ in range(50)]
    plain = [inner.policy(obs) for _ in range(50)]
    for a, b in zip(first, plain, strict=True):
        assert np.all(np.abs(a - b) <= np.spacing(np.abs(b)))
    assert any(np.any(a != b) for a, b in zip(first, plain, strict=True))
    jit.reset(0)
    assert all(np.array_equal(a, jit.policy(obs)) for a in first)
    assert jit.action_mode == inner.action_mode


@pytest.mark.skipif(
    not r.same_numerics("stress", processor=False), reason="spreads differ on other numerics"
)
def test_committed_sensitivity_matches_the_code():
    """The spread over the first two jitter seeds never exceeds the committed spread over eight
    (same numerics, so the same flights): the sensitivity file is in step with the code."""
    key = "hnewton:bfgs|fig8_3x_extra|0"
    now = r.measure_sensitivity("stress", key, flights=2)
    committed = SENSITIVITY[f"stress|{key}"]["spread"]
    for metric, spread in now["spread"].items():
        assert spread is not None and committed[metric] is not None
        assert spread <= committed[metric], metric
    assert committed["max_tilt_deg"] > 0  # this row is sensitive: the check means something


@pytest.mark.skipif(
    blas_core() not in ("SkylakeX", "Haswell", "Zen", "Cooperlake", "SapphireRapids"),
    reason="needs an AVX2 processor with a known OpenBLAS kernel",
)
@pytest.mark.parametrize(
    "env_extra",
    [
        {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": r.NPY_AVX512},
        {"OPENBLAS_CORETYPE": "Sandybridge"},
    ],
    ids=["haswell-avx2-numpy", "sandybridge"],
)
def test_sampled_rows_reproduce_under_other_openblas_kernels(env_extra):
    """The sample re-flown in a subprocess with another OpenBLAS kernel family (and numpy's AVX-512
    loops off): what a user's machine of another kind computes. Within tolerance, every row."""
    pytest.importorskip("stable_baselines3")
    numerics, rows = r.fly_sample_under(env_extra)
    assert numerics["blas_core"] == env_extra["OPENBLAS_CORETYPE"]
    bad = {}
    for key, row in rows.items():
        kind, run_id = key.split("|", 1)
        exact = numerics == r.committed_numerics(kind)
        mismatches = r.compare(row, r.committed_row(kind, run_id), SENSITIVITY[key], exact)
        if mismatches:
            bad[key] = mismatches
    assert bad == {}


BATCHED_SAMPLE = [(k, run_id) for k, run_id in SAMPLE if run_id.startswith("hnewton")]


@pytest.mark.parametrize(
    ("kind", "run_id"), BATCHED_SAMPLE, ids=[f"{k}:{run_id}" for k, run_id in BATCHED_SAMPLE]
)
def test_sampled_hnewton_rows_reproduce_on_the_batched_path(kind, run_id):
    """The sampled ``hnewton``/``hnewton_rls`` rows flown by their batched twins on the vector
    env (what sweeps, the stress study and the nominal comparison fly) stay within the
    tolerance (the vector env and the batched RLS are not bit for bit the single ones)."""
    from residual_quad import configs
    from residual_quad.episode import RunSpec
    from residual_quad.evaluation.studies.stress import StressConfig, stress_batch
    from residual_quad.evaluation.sweep.config import SweepConfig
    from residual_quad.evaluation.sweep.engine import run_batch

    if kind == "sweep":
        controller, payload, wind, trajectory, seed = run_id.split("|")
        cfg = configs.load(SweepConfig, {"controllers": [controller], "episode_s": 20.0})
        spec = RunSpec(controller, payload, wind, trajectory, int(seed))
        (row,) = run_batch([spec], cfg, [None])
    else:
        label, scenario, seed = run_id.split("|")
        full = configs.load(StressConfig, r.STRESS_DIR / "stress_config.yaml")
        cfg = StressConfig([label], [int(seed)], full.episode_s, {}, full.scenarios)
        (scn,) = [s for s in full.scenarios if s.name == scenario]
        (row,) = stress_batch([scn.spec(label, int(seed), full.episode_s)], cfg, [None])
    sens = SENSITIVITY[f"{kind}|{run_id}"]
    assert r.compare(row, r.committed_row(kind, run_id), sens, exact=False) == []
