"""Paired comparisons: controller A against B on the same scenarios and seeds, from rows.

For every scenario and seed both flew (diverged runs left out, counted), the difference
``d = metric(A) − metric(B)``; negative means A's error is lower. The table gives the mean of
``d`` over every matched run with its 95 % stratified bootstrap interval (the seeds' differences
resampled within each scenario:
:func:`residual_quad.evaluation.report.stats.stratified_mean_intervals`),
the probability that A is lower on a matched run (ties count one half, as the probability of
improvement of [RLIQM]) and a verdict that names the lower controller only when the interval
excludes zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from residual_quad.evaluation.report.stats import (
    Interval,
    scenario_of,
    stratified_mean_intervals,
    usable,
)
from residual_quad.evaluation.report.tables import TRACKING, Table

#: the adaptive controllers compared, and the fixed-gain baselines they are compared with
ADAPTIVE = ("geo_rls", "geo_rls_dob", "hnewton_rls")
BASELINES = ("geo", "pid")
#: how a table names a row metric (any other metric by its key)
METRIC_NAMES = {
    "rmse": "steady-state RMSE",
    "max_error": "max error",
    "control_cost": "control cost",
}


def default_pairs(controllers: Iterable[str]) -> list[tuple[str, str]]:
    """Each adaptive controller against each baseline and each adaptive one listed before it,
    restricted to ``controllers``."""
    have = set(controllers)
    pairs = []
    for i, a in enumerate(ADAPTIVE):
        for b in (*BASELINES, *ADAPTIVE[:i]):
            if a in have and b in have:
                pairs.append((a, b))
    return pairs


def _pair_key(r: dict[str, Any]) -> tuple[str, Any, Any]:
    return scenario_of(r), r.get("seed"), r.get("training_seed")


def paired_differences(
    rows: Sequence[dict[str, Any]], a: str, b: str, metric: str = "rmse"
) -> tuple[list[list[float]], list[tuple[float, float]], int]:
    """``(strata, pairs, left_out)``: the differences A − B grouped by scenario, every matched
    ``(A, B)`` value pair, and the matched runs left out because one of them diverged."""
    mine = {_pair_key(r): r for r in rows if r["controller"] == a}
    theirs = {_pair_key(r): r for r in rows if r["controller"] == b}
    strata: dict[str, list[float]] = {}
    pairs: list[tuple[float, float]] = []
    left_out = 0
    for key, ra in mine.items():
        rb = theirs.get(key)
        if rb is None:
            continue
        if not (usable(ra, metric) and usable(rb, metric)):
            left_out += 1
            continue
        va, vb = float(ra[metric]), float(rb[metric])
        strata.setdefault(key[0], []).append(va - vb)
        pairs.append((va, vb))
    return list(strata.values()), pairs, left_out


def probability_lower(pairs: Sequence[tuple[float, float]]) -> float:
    """Share of the matched runs where A's value is below B's, ties counted one half."""
    if not pairs:
        return math.nan
    return sum(1.0 if x < y else 0.5 if x == y else 0.0 for x, y in pairs) / len(pairs)


def verdict(a: str, b: str, iv: Interval) -> str:
    """Which controller is lower, when the interval says so."""
    if iv.kind == "empty":
        return "no matched runs"
    if iv.excludes_zero():
        lower = a if iv.estimate < 0 else b
        return f"`{lower}` lower" + (" (every seed alike)" if iv.kind == "constant" else "")
    if iv.kind == "single":
        return "one seed: no interval"
    return "no clear difference (interval contains 0)"


def paired_table(
    rows: Sequence[dict[str, Any]],
    pairs: Sequence[tuple[str, str]] | None = None,
    metric: str = "rmse",
    trajectories: Iterable[str] | None = TRACKING,
    name: str = "paired",
    scale: float = 1000.0,
    unit: str = "mm",
) -> Table | None:
    """The paired comparisons of ``pairs`` (default :func:`default_pairs`) on the runs of
    ``trajectories`` (``None``: every trajectory), or ``None`` when no pair was flown. The
    differences are shown times ``scale`` in ``unit`` (default: RMSE in m shown in mm)."""
    trajs = None if trajectories is None else list(dict.fromkeys(trajectories))
    rows = [r for r in rows if trajs is None or r["trajectory"] in trajs]
    controllers = list(dict.fromkeys(r["controller"] for r in rows))
    pairs = default_pairs(controllers) if pairs is None else list(pairs)
    for a, b in pairs:
        for label in (a, b):
            if label not in controllers:
                raise ValueError(
                    f"pairs names {label!r}, which no row flies; choose from "
                    + ", ".join(controllers)
                )
    if not pairs:
        return None
    found = [paired_differences(rows, a, b, metric) for a, b in pairs]
    cells = [[[scale * d for d in s] for s in strata] for strata, _, _ in found]
    intervals = stratified_mean_intervals(cells)
    body = []
    for (a, b), (_, matched, left_out), iv in zip(pairs, found, intervals, strict=True):
        base = scale * sum(y for _, y in matched) / len(matched) if matched else math.nan
        rel = 100 * iv.estimate / base if base else math.nan
        lower = sum(x < y for x, y in matched)
        ties = sum(x == y for x, y in matched)
        body.append(
            [
                a,
                b,
                len(matched),
                left_out,
                iv.estimate,
                rel,
                probability_lower(matched),
                f"{lower} / {ties} / {len(matched) - lower - ties}",
                verdict(a, b, iv),
            ]
        )
    shown = [t.replace("figure8", "figure-8") for t in trajs or []]
    where = "every trajectory" if trajs is None else " and ".join(shown)
    return Table(
        name,
        f"Paired comparisons: {METRIC_NAMES.get(metric, metric)}, A − B on the same scenarios "
        f"and seeds ({where})",
        [
            "A",
            "B",
            "matched runs",
            "left out (diverged)",
            f"mean A − B ({unit})",
            "A − B, % of B",
            "P(A lower)",
            "A lower / tie / B lower",
            "verdict",
        ],
        body,
        "A − B < 0: A's error is lower. The interval resamples the seeds' differences within "
        "each scenario (docs/statistics.md); P(A lower): share of matched runs where A's value "
        "is below B's, ties counted one half. Calm scenarios repeat one run per seed, so their "
        "ties and differences recur once per seed.",
        intervals={f"mean A − B ({unit})": intervals},
    )


def plant_change_table(
    rows: Sequence[dict[str, Any]],
    baseline: Sequence[dict[str, Any]],
    metric: str = "rmse",
    trajectories: Iterable[str] | None = TRACKING,
    scale: float = 1000.0,
    unit: str = "mm",
) -> Table | None:
    """Per controller, ``metric`` in ``rows`` minus ``metric`` in ``baseline`` on the runs both
    flew (same label, scenario and seed): what flying under another plant changes. ``None``
    when no run matches."""
    trajs = None if trajectories is None else set(trajectories)

    def keep(r: dict[str, Any]) -> bool:
        return trajs is None or r["trajectory"] in trajs

    before = "\0baseline"  # a label no controller has
    found = []
    for c in dict.fromkeys(r["controller"] for r in rows if keep(r)):
        merged = [r for r in rows if r["controller"] == c and keep(r)]
        merged += [{**r, "controller": before} for r in baseline if r["controller"] == c]
        strata, matched, left_out = paired_differences(merged, c, before, metric)
        if matched or left_out:
            found.append((c, strata, matched, left_out))
    if not found:
        return None
    intervals = stratified_mean_intervals([[[scale * d for d in s] for s in f[1]] for f in found])
    body = []
    for (c, _, matched, left_out), iv in zip(found, intervals, strict=True):
        base = scale * sum(y for _, y in matched) / len(matched) if matched else math.nan
        worse = sum(x > y for x, y in matched)
        same = sum(x == y for x, y in matched)
        if iv.excludes_zero():
            word = "higher" if iv.estimate > 0 else "lower"
        else:
            word = "no clear change" if iv.kind != "empty" else "no matched runs"
        body.append(
            [
                c,
                len(matched),
                left_out,
                iv.estimate,
                100 * iv.estimate / base if base else math.nan,
                f"{worse} / {same} / {len(matched) - worse - same}",
                word,
            ]
        )
    column = f"mean change ({unit})"
    return Table(
        "plant_change",
        f"Change of {METRIC_NAMES.get(metric, metric)} from the main matrix, same controller, "
        "scenarios and seeds",
        [
            "controller",
            "matched runs",
            "left out (diverged)",
            column,
            "change, % of before",
            "higher / same / lower",
            "verdict",
        ],
        body,
        "Change = this plant's value − the main matrix's value on the same run; > 0: higher "
        "error under this plant. Interval: the seeds' changes resampled within each scenario.",
        intervals={column: intervals},
    )
