"""Bootstrap intervals for the report: a mean with its 95 % interval over seeds, from rows.

Every interval here is a stratified percentile bootstrap computed by :func:`scipy.stats.bootstrap`
[BOOT], [SCIPYBOOT]. A *stratum* is one scenario (payload, wind, trajectory, plant): a fixed part
of the experiment's design, never resampled. The values inside a stratum are its seeds' runs,
drawn with replacement within the stratum; the statistic is the mean over every run of the cell,
so the point estimate is the table's number. A stratum whose seeds all repeat one run (a calm
scenario: the seed moves only the wind) contributes no spread, and a cell made only of such
strata has an interval of zero width: :attr:`Interval.kind` says ``"constant"`` and the tables
mark the cell instead of printing ``[x, x]``.

Why percentile and not BCa: with three seeds per stratum a resample takes only ten distinct
values, BCa's bias correction and its jackknife acceleration are estimated from that handful
and swing wildly, and scipy's BCa returns NaN for degenerate strata; the percentile interval
stays inside the data's range and needs no such estimate [BOOT §13]. Cells are computed in one
vectorized call per stratum layout, with a fresh generator from the same seed per call, and
scipy draws one set of resampling indices for the whole batch: a cell's interval depends only on
its own values, the seed and its layout — never on which other cells share the call.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # every interval in the report is reproducible
KINDS = ("bootstrap", "constant", "single", "empty")
# a cell in a bootstrap call: (index, varying strata, sum of the fixed values, runs, estimate)
_Member = tuple[int, list[np.ndarray], float, int, float]


@dataclass(frozen=True)
class Interval:
    """A mean over runs and its bootstrap interval over seeds.

    ``kind``: ``"bootstrap"`` (a proper interval), ``"constant"`` (every stratum's seeds repeat
    one value: zero width), ``"single"`` (no stratum has two seeds: no interval; bounds NaN),
    ``"empty"`` (no values; everything NaN)."""

    estimate: float
    low: float
    high: float
    runs: int
    kind: str = "bootstrap"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")

    @property
    def width(self) -> float:
        """``high − low`` (0 for a constant cell, NaN without an interval)."""
        return self.high - self.low

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or below zero (a clear sign)."""
        return self.kind in ("bootstrap", "constant") and (self.low > 0 or self.high < 0)

    def suffix(self, digits: int = 4) -> str:
        """What a table prints after the point estimate: `` [low, high]`` for an interval,
        ``†`` for a constant cell, ``‡`` when there is no second seed, nothing when empty."""
        if self.kind == "bootstrap":
            return f" [{self.low:.{digits}f}, {self.high:.{digits}f}]"
        return {"constant": " †", "single": " ‡"}.get(self.kind, "")


#: table notes for the marks of :meth:`Interval.suffix`
MARK_NOTES = {
    "bootstrap": (
        "[low, high]: 95 % stratified percentile-bootstrap interval over seeds (runs resampled "
        "within each scenario, 10,000 resamples, seeded; docs/statistics.md)."
    ),
    "constant": (
        "†: every seed gives the same value in each scenario of this cell (in a calm scenario the "
        "seed moves only the wind, so every seed flies the identical run); the interval over "
        "seeds has zero width and is not shown."
    ),
    "single": "‡: one seed per scenario; no interval.",
}


def _check_finite(cells: Sequence[Sequence[Sequence[float]]]) -> None:
    for i, cell in enumerate(cells):
        for stratum in cell:
            if not all(math.isfinite(v) for v in stratum):
                raise ValueError(
                    f"cells[{i}] holds a non-finite value; leave diverged runs out (the tables "
                    "count them beside the cell)"
                )


def stratified_mean_intervals(
    cells: Sequence[Sequence[Sequence[float]]],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[Interval]:
    """One :class:`Interval` per cell. A cell is a list of strata, a stratum the finite values of
    one scenario's seeds; the estimate is the mean over all of a cell's values."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1); got {confidence!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1; got {resamples!r}")
    _check_finite(cells)
    out: list[Interval | None] = [None] * len(cells)
    # cells whose varying strata have the same sizes share one vectorized bootstrap call
    layouts: dict[tuple[int, ...], list[_Member]] = defaultdict(list)
    for i, cell in enumerate(cells):
        strata = [np.asarray(s, dtype=float) for s in cell if len(s)]
        n = sum(len(s) for s in strata)
        if n == 0:
            out[i] = Interval(math.nan, math.nan, math.nan, 0, "empty")
            continue
        estimate = float(np.mean(np.concatenate(strata)))
        varying = sorted((s for s in strata if len(s) > 1 and np.ptp(s) > 0), key=len)
        if not varying:
            kind = "constant" if any(len(s) > 1 for s in strata) else "single"
            bound = estimate if kind == "constant" else math.nan
            out[i] = Interval(estimate, bound, bound, n, kind)
            continue
        fixed = float(sum(s.sum() for s in strata if not (len(s) > 1 and np.ptp(s) > 0)))
        layouts[tuple(len(s) for s in varying)].append((i, varying, fixed, n, estimate))
    for members in layouts.values():
        lows, highs = _bootstrap_layout(members, confidence, resamples, seed)
        for (i, _, _, n, estimate), lo, hi in zip(members, lows, highs, strict=True):
            out[i] = Interval(estimate, float(lo), float(hi), n, "bootstrap")
    return [iv for iv in out if iv is not None]


def _bootstrap_layout(
    members: list[_Member],
    confidence: float,
    resamples: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bounds for cells of one layout: strata resampled independently (scipy's
    multi-sample bootstrap), the statistic the mean over the resampled and the fixed strata."""
    from scipy.stats import bootstrap

    k = len(members[0][1])
    data = tuple(np.stack([m[1][j] for m in members]) for j in range(k))  # k × (cells, size)
    fixed = np.array([m[2] for m in members])
    total = np.array([m[3] for m in members], dtype=float)

    def mean_of_runs(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        s = sum(x.sum(axis=axis) for x in samples)
        extra = s.ndim - 1  # scipy adds a resample axis after the cell axis
        return (s + fixed.reshape(fixed.shape + (1,) * extra)) / total.reshape(
            total.shape + (1,) * extra
        )

    res = bootstrap(
        data,
        mean_of_runs,
        n_resamples=resamples,
        vectorized=True,
        axis=-1,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return np.atleast_1d(res.confidence_interval.low), np.atleast_1d(res.confidence_interval.high)


def scenario_of(row: dict) -> str:
    """The scenario a row flew: its ``run_id`` without the controller and the seed
    (``pid|heavy|windy|helix|2`` → ``heavy|windy|helix``), so named scenarios and any field a
    sweep adds to the ``run_id`` count as their own strata."""
    return "|".join(str(row["run_id"]).split("|")[1:-1])


def usable(row: dict, metric: str) -> bool:
    """Whether a row's ``metric`` enters a mean: flown, not diverged, a finite number."""
    v = row.get(metric)
    return not row.get("diverged") and isinstance(v, int | float) and math.isfinite(v)


def strata_of(runs: Sequence[dict], metric: str) -> list[list[float]]:
    """The values of ``metric`` grouped by scenario (first-seen order), diverged runs left out."""
    groups: dict[str, list[float]] = {}
    for r in runs:
        if usable(r, metric):
            groups.setdefault(scenario_of(r), []).append(float(r[metric]))
    return list(groups.values())
