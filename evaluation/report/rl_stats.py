"""RL statistics with rliable [RLIABLE]: IQM, mean, probability of improvement and performance
profiles of a normalized score, with seeded stratified bootstrap intervals.

**Score.** Lower RMSE is better; rliable assumes higher is better. The score of one run is its
*pid-normalized accuracy*: ``s = RMSE_ref(task) / RMSE(run)``, where ``RMSE_ref(task)`` is the
mean RMSE of the reference controller (``pid``) over its runs of the task that did not
diverge. ``s = 1``: as accurate as pid's mean; ``s = 2``: half pid's error; a crashed run (an
infinite error) scores 0, an exact run (zero error) +inf. A *task* is one scenario of the main
table — payload × wind × trajectory (helix, figure-8); the *runs* of a task are its training
seeds × env seeds (for a model-based controller: its env seeds). Every controller is scored on
the same tasks, so the scores are comparable across tasks and controllers.

**Seeded bootstrap.** rliable 1.2.0's ``StratifiedBootstrap.update_indices`` draws with
``np.random.choice`` — NumPy's global state — whatever ``random_state`` it is given, so its
intervals are not reproducible from a seed and the call moves the caller's global generator
(``tests/evaluation/test_rl_stats.py`` shows both). :func:`seeded_bootstraps` subclasses both of
its bootstraps to draw from the bootstrap's own generator (arch's ``IIDBootstrap`` keeps one,
seeded by ``seed=``), and :func:`interval_estimates` is ``rliable.library.get_interval_estimates``
on them. rliable 1.2.0 also passes arch the deprecated ``random_state=`` (arch 8 refuses it, which
is why rliable requires arch < 8): the subclasses call arch with ``seed=``.

rliable (with arch, statsmodels, pandas, seaborn) is the ``rl`` extra, imported lazily
(:func:`import_rliable`); without it the report's RL section says how to install it.
"""

from __future__ import annotations

import functools
import math
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.evaluation.report.stats import BOOTSTRAP_SEED, CONFIDENCE

#: how to get rliable and the arch it needs (arch ≥ 8 imports under pandas 3)
RLIABLE_HINT = 'pip install -c constraints.txt -e ".[rl]"'
#: bootstrap resamples of every rliable interval (rliable's default for profiles; 10 000 would
#: cost ~5× more for probability of improvement, a Mann–Whitney test per task per resample)
RL_RESAMPLES = 2_000
REFERENCE = "pid"  # the controller whose mean RMSE per task normalizes the score
#: the controllers every RL controller's probability of improvement is taken over
PI_BASELINES: tuple[str, ...] = ("pid", "geo_rls")
TRACKING = ("helix", "figure8")  # the main table's trajectories
PROFILE_FILE = "rl_performance_profile.png"

Task = tuple[str, str, str]  # (payload, wind, trajectory)


def import_rliable() -> tuple[Any, Any]:
    """``(rliable.library, rliable.metrics)``, or ``ImportError`` with the install hint."""
    try:
        from rliable import library, metrics
    except Exception as exc:  # noqa: BLE001 - arch < 8 fails with a TypeError under pandas 3
        raise ImportError(
            f"the report's RL statistics need rliable 1.2.0 and arch >= 8 ({type(exc).__name__}: "
            f"{exc}); install them with: {RLIABLE_HINT}"
        ) from exc
    return library, metrics


@functools.cache
def seeded_bootstraps() -> tuple[type, type]:
    """rliable's ``StratifiedBootstrap`` and ``StratifiedIndependentBootstrap`` drawing from
    their own generator (``seed``: an int or a ``np.random.Generator``), never from NumPy's
    global state. Same data and seed → the same resamples."""
    import arch.bootstrap as arch_bs

    library, _ = import_rliable()

    class SeededStratifiedBootstrap(library.StratifiedBootstrap):
        """Runs resampled with replacement within each task, from ``self.generator``."""

        def __init__(self, *args: np.ndarray, seed: Any = None, task_bootstrap: bool = False):
            arch_bs.IIDBootstrap.__init__(self, *args, seed=seed)
            self._args_shape = args[0].shape
            self._num_tasks = self._args_shape[1]
            self._parameters = [self._num_tasks, task_bootstrap]
            self._task_bootstrap = task_bootstrap
            self._strata_indices = self._get_strata_indices()

        def update_indices(self) -> tuple[np.ndarray, ...]:
            indices = self.generator.choice(self._num_items, self._args_shape, replace=True)
            if self._task_bootstrap:
                tasks = self.generator.choice(
                    self._num_tasks, self._strata_indices[0].shape, replace=True
                )
                return (indices, tasks, *self._strata_indices[1:])
            return (indices, *self._strata_indices)

    class SeededStratifiedIndependentBootstrap(library.StratifiedIndependentBootstrap):
        """Each input (own run count) resampled within each task, from ``self.generator``."""

        def __init__(self, *args: np.ndarray, seed: Any = None):
            arch_bs.IndependentSamplesBootstrap.__init__(self, *args, seed=seed)
            self._args_shapes = [a.shape for a in args]
            self._kwargs_shapes: dict[str, tuple[int, ...]] = {}
            self._args_strata_indices = [self._get_strata_indices(s) for s in self._args_shapes]
            self._kwargs_strata_indices: dict[str, list[np.ndarray]] = {}

        def _get_indices(
            self, num_runs: int, array_shape: tuple[int, ...], strata: list[np.ndarray]
        ) -> tuple[np.ndarray, ...]:
            return (self.generator.choice(num_runs, array_shape, replace=True), *strata)

    return SeededStratifiedBootstrap, SeededStratifiedIndependentBootstrap


def interval_estimates(
    score_dict: Mapping[str, np.ndarray | Sequence[np.ndarray]],
    func: Callable[..., np.ndarray],
    seed: int = BOOTSTRAP_SEED,
    reps: int = RL_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``rliable.library.get_interval_estimates`` (percentile method) on the seeded bootstraps:
    point estimates and ``(2, …)`` intervals per key. A key holding one ``(runs, tasks)`` array
    is resampled by runs within tasks; a key holding a tuple of arrays (their own run counts,
    the same tasks) resamples each independently. Each key gets a fresh generator from ``seed``,
    so a key's interval does not depend on the other keys."""
    stratified, independent = seeded_bootstraps()
    points, intervals = {}, {}
    for key, scores in score_dict.items():
        if isinstance(scores, np.ndarray):
            bs = stratified(scores, seed=np.random.default_rng(seed))
            points[key] = func(scores)
        else:
            bs = independent(*scores, seed=np.random.default_rng(seed))
            points[key] = func(*scores)
        intervals[key] = bs.conf_int(func, reps=reps, size=confidence, method="percentile")
    return points, intervals


def iqm(scores: np.ndarray) -> np.ndarray:
    """IQM over every run of every task, as a 1-array: rliable's ``aggregate_iqm`` (scipy's
    25 % ``trim_mean`` of all scores: ⌊n/4⌋ cut at each end) without scipy's per-call
    argument checks, which cost 1 ms inside a bootstrap (equal to rliable's: tested)."""
    flat = np.sort(np.asarray(scores, dtype=float).reshape(-1))
    cut = int(0.25 * flat.size)
    return np.array([float(np.mean(flat[cut : flat.size - cut]))])


def mean(scores: np.ndarray) -> np.ndarray:
    """The mean score over every run of every task, as a 1-array."""
    return np.array([float(np.mean(scores))])


def aggregates(scores: np.ndarray) -> np.ndarray:
    """``[IQM, mean]`` of the scores (:func:`iqm`, :func:`mean`): both intervals from one set of
    resamples, as rliable's own examples aggregate."""
    return np.concatenate([iqm(scores), mean(scores)])


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) per task averaged over tasks, as a 1-array: rliable's
    ``metrics.probability_of_improvement`` (the Mann–Whitney U of each task over its ``m·n``
    run pairs, a tie counting one half) computed for all tasks at once — 150× faster inside a
    bootstrap, equal to rliable's (a test compares them)."""
    gt = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    eq = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return np.array([float(np.mean(gt + 0.5 * eq))])


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Share of all runs with a score above each of ``taus``: rliable's
    ``library.score_distributions`` (a performance profile) in one vectorized comparison."""
    return (scores.reshape(-1)[:, None] > np.asarray(taus)[None, :]).mean(axis=0)


@dataclass(frozen=True)
class ScoreSet:
    """Normalized scores: per controller a ``(runs, tasks)`` array on the shared ``tasks``;
    ``left_out``: controllers without the same run count on every task (label → why)."""

    tasks: list[Task]
    scores: dict[str, np.ndarray]
    reference: str = REFERENCE
    left_out: dict[str, str] = field(default_factory=dict)


def _rmse(r: dict[str, Any]) -> float:
    v = r.get("rmse")
    return math.inf if r.get("diverged") or v is None else float(v)


def normalized_scores(rows: list[dict[str, Any]], reference: str = REFERENCE) -> ScoreSet | None:
    """The pid-normalized accuracy (module docstring) of every controller of pooled ``rows``
    (:func:`~residual_quad.evaluation.report.rl_seeds.pool_training_seeds`; failed runs already left
    out) on the helix and figure-8 scenarios where ``reference`` has a run that did not
    diverge; a controller that did not fly each of them the same number of times is left out
    (:attr:`ScoreSet.left_out`). ``None`` when ``reference`` flew none. Runs of a task are
    ordered by (training seed, env seed)."""
    runs: dict[str, dict[Task, list[tuple[int, int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        if r["trajectory"] in TRACKING:
            task = (r["payload"], str(r["wind"]), r["trajectory"])
            runs[r["controller"]][task].append(
                (r.get("training_seed", 0), r.get("seed", 0), _rmse(r))
            )
    ref = {
        t: float(np.mean(ok))
        for t, v in runs.get(reference, {}).items()
        if (ok := [e for _, _, e in v if math.isfinite(e)])
    }
    if not ref:
        return None
    tasks = list(ref)
    scores: dict[str, np.ndarray] = {}
    left_out: dict[str, str] = {}
    for label, by_task in runs.items():
        flew = sum(t in by_task for t in tasks)
        if flew < len(tasks):
            left_out[label] = f"flew {flew} of the {len(tasks)} scenarios"
            continue
        counts = {len(by_task[t]) for t in tasks}
        if len(counts) != 1:
            left_out[label] = f"runs per task differ ({', '.join(map(str, sorted(counts)))})"
            continue
        cols = [[ref[t] / e if e else math.inf for _, _, e in sorted(by_task[t])] for t in tasks]
        scores[label] = np.asarray(cols, dtype=float).T  # (runs, tasks)
    return ScoreSet(tasks, scores, reference, left_out)


@dataclass(frozen=True)
class RLStatistics:
    """What the report's RL statistics show (intervals are ``(low, high)``)."""

    scores: ScoreSet
    iqm: dict[str, tuple[float, float, float]]  # label → (IQM, low, high)
    mean: dict[str, tuple[float, float, float]]
    improvement: dict[tuple[str, str], tuple[float, float, float]]  # (X, Y) → P(X > Y), CI
    taus: np.ndarray
    profiles: dict[str, np.ndarray]  # label → share of runs with score > τ, per τ
    profile_cis: dict[str, np.ndarray]  # label → (2, len(taus))


def _with_ci(points: dict[str, np.ndarray], cis: dict[str, np.ndarray]) -> dict:
    return {k: (float(points[k][0]), float(cis[k][0][0]), float(cis[k][1][0])) for k in points}


def profile_taus(scores: dict[str, np.ndarray], n: int = 61) -> np.ndarray:
    """Score thresholds of the performance profiles: log-spaced from 0.1 to past the best
    finite score (at least 10: ten times more accurate than the reference)."""
    top = max((float(s.max()) for s in scores.values() if s.size), default=10.0)
    return np.geomspace(0.1, max(10.0, 1.1 * top), n)


def rl_statistics(
    rows: list[dict[str, Any]],
    rl_labels: Sequence[str],
    seed: int = BOOTSTRAP_SEED,
    reps: int = RL_RESAMPLES,
    baselines: Sequence[str] = PI_BASELINES,
) -> RLStatistics | None:
    """IQM and mean score of every controller of pooled ``rows`` with 95 % stratified bootstrap
    intervals, the probability of improvement of each of ``rl_labels`` over each flown of
    ``baselines``, and score-distribution performance profiles with intervals; ``None`` when
    the reference (pid) flew no tracking scenario."""
    import_rliable()
    ss = normalized_scores(rows)
    if ss is None or not ss.tasks:
        return None
    s = ss.scores
    agg_pts, agg_cis = interval_estimates(s, aggregates, seed, reps)  # one pass: IQM, mean
    iqm_pts = {k: v[:1] for k, v in agg_pts.items()}
    iqm_cis = {k: v[:, :1] for k, v in agg_cis.items()}
    mean_pts = {k: v[1:] for k, v in agg_pts.items()}
    mean_cis = {k: v[:, 1:] for k, v in agg_cis.items()}
    pairs = {
        (x, y): (s[x], s[y]) for x in rl_labels if x in s for y in baselines if y in s and y != x
    }
    pi_pts, pi_cis = interval_estimates(
        {f"{x}|{y}": v for (x, y), v in pairs.items()}, probability_of_improvement, seed, reps
    )
    taus = profile_taus(s)

    def profile(x: np.ndarray) -> np.ndarray:
        return score_distribution(x, taus)

    prof, prof_cis = interval_estimates(s, profile, seed, reps)
    return RLStatistics(
        ss,
        _with_ci(iqm_pts, iqm_cis),
        _with_ci(mean_pts, mean_cis),
        {xy: _with_ci(pi_pts, pi_cis)[f"{xy[0]}|{xy[1]}"] for xy in pairs},
        taus,
        prof,
        prof_cis,
    )


def profile_figure(stats: RLStatistics, path: str | Path) -> Path:
    """The performance profiles (share of runs above each score, with 95 % bands) as a PNG,
    drawn by rliable's ``plot_utils`` on matplotlib's Agg backend, each controller in its
    colour of every other figure (a tuned variant dashed), one legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    from residual_quad.evaluation.report.style import (
        color_of,
        figure_legend,
        legend_title,
        linestyle_of,
        paired_order,
        save_figure,
        series_handle,
        tuned_note,
    )

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = paired_order(stats.profiles)
    fig = plt.figure(figsize=(8.5, 4.5), layout="constrained")
    ax = fig.subplots()
    plot_utils.plot_performance_profiles(
        {k: stats.profiles[k] for k in labels},
        stats.taus,
        performance_profile_cis=stats.profile_cis,
        colors={k: color_of(k) for k in labels},
        linestyles={k: linestyle_of(k) for k in labels},
        xlabel=rf"pid-normalized accuracy $\tau$ = RMSE$_{{{stats.scores.reference}}}$ / RMSE",
        ylabel=r"share of runs with score > $\tau$",
        ax=ax,
    )
    ax.set_xscale("log")
    notes = ["band: 95 % interval", tuned_note(labels)]
    figure_legend(
        fig, [series_handle(k, band=True) for k in labels], labels, title=legend_title(notes)
    )
    return save_figure(fig, path)


def _ci(v: tuple[float, float, float], digits: int = 2) -> str:
    return f"{v[0]:.{digits}f} [{v[1]:.{digits}f}, {v[2]:.{digits}f}]"


def rliable_lines(
    rows: list[dict[str, Any]],
    rl_labels: Sequence[str],
    figure_dir: Path | None = None,
    link_from: Path | None = None,
    notes: Callable[[list[tuple[str, str]]], list[str]] | None = None,
) -> list[str]:
    """Markdown lines of the report's RL statistics of pooled, flown ``rows``: the IQM and mean
    score table, the probability-of-improvement table and, with ``figure_dir``, the
    performance-profile figure (:data:`PROFILE_FILE`, linked relative to ``link_from``).
    ``notes(pairs)`` adds lines under the improvement table (the information audit's markers).
    Without rliable, or without pid's runs to normalize by, one line says why."""
    try:
        stats = rl_statistics(rows, rl_labels)
    except ImportError as exc:
        return [f"(No rliable statistics: {exc}.)"]
    if stats is None:
        return [
            "(No rliable statistics: the score is normalized by pid's RMSE in each helix and "
            "figure-8 scenario, and these rows have none.)"
        ]
    ss = stats.scores
    crashes = {
        k: (
            sum(bool(r.get("diverged")) for r in rows if r["controller"] == k),
            sum(r["controller"] == k for r in rows),
        )
        for k in ss.scores
    }
    order = [k for k in rl_labels if k in ss.scores] + [k for k in ss.scores if k not in rl_labels]
    lines = [
        f"Over every run, with rliable [RLIABLE]: the score of a run is its **pid-normalized "
        f"accuracy** RMSE_{ss.reference}(task) / RMSE(run) — higher is better (rliable's "
        f"convention): 1 = as accurate as {ss.reference}'s mean in that scenario, 2 = half its "
        "error, a crash = 0. Tasks: the "
        f"{len(ss.tasks)} payload × wind × trajectory scenarios (helix, figure-8); runs: training "
        "seeds × env seeds. 95 % stratified bootstrap intervals (runs resampled within each "
        f"task, {RL_RESAMPLES:,} resamples, seeded). Crashes count every trajectory, hover "
        "included.",
        "",
        "| controller | runs × tasks | crashes | IQM score [95 % CI] | mean score [95 % CI] |",
        "|---|---|---|---|---|",
    ]
    for k in order:
        runs, tasks = ss.scores[k].shape
        c, n = crashes[k]
        lines.append(
            f"| {k} | {runs} × {tasks} | {c} / {n} | {_ci(stats.iqm[k])} | {_ci(stats.mean[k])} |"
        )
    if ss.left_out:
        lines += ["", "Left out: " + "; ".join(f"{k}: {why}" for k, why in ss.left_out.items())]
    baselines = [b for b in PI_BASELINES if b in ss.scores]
    if stats.improvement:
        lines += [
            "",
            "Probability of improvement P(X > Y): the chance that a random run of X scores "
            "higher (a lower RMSE) than a random run of Y in the same scenario, averaged over "
            "scenarios (Mann–Whitney; 0.5 = no difference) [RLIABLE], with its 95 % interval "
            "(each controller's runs resampled independently within each task).",
            "",
            "| X | " + " | ".join(f"P(X > {b}) [95 % CI]" for b in baselines) + " |",
            "|---|" + "---|" * len(baselines),
        ]
        for x in order:
            if any((x, b) in stats.improvement for b in baselines):
                cells = [
                    _ci(stats.improvement[(x, b)], 3) if (x, b) in stats.improvement else "–"
                    for b in baselines
                ]
                lines.append(f"| {x} | " + " | ".join(cells) + " |")
        if notes is not None:
            lines += ["", *notes(list(stats.improvement))]
    if figure_dir is not None:
        try:
            path = profile_figure(stats, Path(figure_dir) / PROFILE_FILE)
        except ImportError as exc:  # rliable's plot_utils needs seaborn
            return [*lines, "", f"(No performance-profile figure: {exc}; {RLIABLE_HINT}.)"]
        rel = path if link_from is None else Path(os.path.relpath(path, link_from))
        lines += [
            "",
            "Performance profiles (share of runs scoring above τ, log axis, 95 % bands): a curve "
            "above another is better at every accuracy level.",
            "",
            f"![RL performance profiles]({rel.as_posix()})",
        ]
    return lines
