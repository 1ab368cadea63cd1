"""What the figures draw per controller: the time series saved for a flight, and the series a
controller label is — the training seeds of a shipped RL policy pooled into one series (its
runs' mean, the spread over its training seeds), every other label its own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.evaluation.report.rl_seeds import training_seed
from residual_quad.evaluation.report.style import paired_order
from residual_quad.evaluation.report.tables import controller_order
from residual_quad.evaluation.sweep.rows import series_stem


def series_path(series_dir: Path, run_id: str) -> Path:
    """The file of the time series a sweep saved for run ``run_id``."""
    return series_dir / (series_stem(run_id) + ".npz")


#: the arrays of a saved series the figures plot (the others are not decompressed)
PLOTTED = ("t", "pos", "ref", "residual_est", "residual_true")


def load_series(series_dir: Path, run_id: str) -> dict[str, np.ndarray] | None:
    """The :data:`PLOTTED` arrays of run ``run_id``'s saved series; ``None`` when not saved."""
    p = series_path(series_dir, run_id)
    if not p.exists():
        return None
    with np.load(p) as z:
        return {k: z[k] for k in PLOTTED if k in z.files}


def has_estimate(residual_est: np.ndarray) -> bool:
    """Whether a stored ``residual_est`` series (T, 3) holds a residual estimate to draw: finite
    after row 0 (NaN by construction: no estimate before the first step) and not all zero (the
    trackers without a residual estimate store zeros)."""
    est = np.asarray(residual_est, dtype=float)[1:]
    return bool(est.size) and bool(np.isfinite(est).all()) and bool(np.abs(est).max() > 0)


def series_label(name: str, seeds: list[tuple[int, str]]) -> str:
    """A series' legend entry: its name, with the count of training seeds it pools when more
    than one (``ppo (5 training seeds)``)."""
    return name if len(seeds) <= 1 else f"{name} ({len(seeds)} training seeds)"


def series_of(label: str) -> tuple[str, int]:
    """(the series a flown label belongs to in the figures, its training seed): the training
    seeds of a shipped RL policy are one series (``ppo:training_seed=2`` → ``("ppo", 2)``,
    :func:`~residual_quad.evaluation.report.rl_seeds.training_seed`); any other label is its own
    series, seed 0."""
    return training_seed(label) or (label, 0)


def figure_series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, str]]]:
    """Series name → its ``(training seed, flown label)`` pairs, seed-ordered; the series in
    the tables' controller order with each tuned variant right after its default
    (:func:`~residual_quad.evaluation.report.style.paired_order`)."""
    flown: dict[str, dict[int, str]] = defaultdict(dict)
    for r in rows:
        name, seed = series_of(r["controller"])
        flown[name][seed] = r["controller"]
    order = paired_order(controller_order([{"controller": n} for n in flown]))
    return {n: sorted(flown[n].items()) for n in order}


def run_stats(rows: list[dict[str, Any]], metric: str) -> tuple[float, float, float, int]:
    """``(mean, low, high, diverged)`` of ``metric`` over one series' ``rows``: the mean over
    every run that did not diverge (all training seeds together, as the tables), the lowest and
    highest of the per-training-seed means (equal to the mean for one seed) and the number of
    diverged runs; NaN where no run counts."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if not r["diverged"] and r.get(metric) is not None:
            by_seed[series_of(r["controller"])[1]].append(float(r[metric]))
    diverged = sum(bool(r["diverged"]) for r in rows)
    values = [v for vs in by_seed.values() for v in vs]
    if not values:
        return math.nan, math.nan, math.nan, diverged
    means = [float(np.mean(vs)) for vs in by_seed.values()]
    return float(np.mean(values)), min(means), max(means), diverged


def seed_band(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """``(t, low, high)`` over curves of different lengths (a crashed flight's series ends
    early): the lowest and highest value at each time over the curves that reach it."""
    n = max(len(t) for t, _ in curves)
    t = next(t for t, _ in curves if len(t) == n)
    block = np.full((len(curves), n), np.nan)
    for k, (_, y) in enumerate(curves):
        block[k, : len(y)] = y
    return t, np.nanmin(block, axis=0), np.nanmax(block, axis=0)


def median_flight(flights: list[tuple[float, int, dict]]) -> dict[str, np.ndarray]:
    """The series of the median flight of ``(rmse, training seed, series)`` triples (a crash
    counts as an infinite RMSE; the lower median of an even count; ties by training seed)."""
    ordered = sorted(flights, key=lambda f: (f[0], f[1]))
    return ordered[(len(ordered) - 1) // 2][2]


#: how a figure draws an RL policy flown with several training seeds (a note in its legend)
SEEDS_FLIGHT = (
    "RL policy with several training seeds = one series: line = its training seed whose flight "
    "has the median RMSE, band = min–max over its training seeds; whiskers = range of its "
    "per-seed means"
)
SEEDS_MEAN = (
    "RL policy with several training seeds = one series: line = the mean over all its runs, "
    "band = min–max of its per-training-seed means"
)
