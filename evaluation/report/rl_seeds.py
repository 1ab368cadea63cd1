"""RL controllers over training seeds: pooled rows, bootstrap intervals and training budgets.

A learned controller is one draw of its training run; a fair head-to-head gives its numbers over
several training seeds with an interval [DRLM], [RLIQM]. The sweep flies each shipped
policy as its own label — ``ppo`` (training seed 0), ``ppo:training_seed=1``,
… and the same for ``ppo_res`` and ``ppo_adapt`` — and the report pools them:

- :func:`pool_training_seeds` relabels the rows of ``<kind>:training_seed=K`` as ``<kind>``
  (keeping ``training_seed`` in the row), so every table shows one column per RL controller:
  the mean over its training seeds (and all their runs); the figures draw one series per RL
  controller too, the spread over its training seeds as a band
  (:mod:`residual_quad.evaluation.report.series`);
- :func:`rl_section` gives, per payload × wind cell of the main table, the mean over training
  seeds of the per-policy cell means with a 95 % percentile-bootstrap interval over training
  seeds, the per-seed values and the training budget (policy steps, wall time, machine) of
  every policy, read from the policy files (the per-cell resampling is
  :func:`scipy.stats.bootstrap`'s, as for the matrix cells); over every run, rliable's IQM,
  mean, probability of improvement and performance profiles of a normalized score
  (:mod:`residual_quad.evaluation.report.rl_stats`, [RLIABLE]).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.specs import parse_spec
from residual_quad.evaluation.report.rl_stats import rliable_lines
from residual_quad.evaluation.report.stats import (
    BOOTSTRAP_SEED,
    RESAMPLES,
    Interval,
    stratified_mean_intervals,
)

POLICY_KINDS = ("ppo", "ppo_res", "ppo_acc", "ppo_adapt")
TRACKING = ("helix", "figure8")  # the main table's trajectories


@functools.lru_cache(maxsize=1024)
def training_seed(label: str) -> tuple[str, int] | None:
    """``(kind, seed)`` of a label that flies a shipped RL policy by training seed (``ppo`` →
    ``("ppo", 0)``, ``ppo_res:training_seed=2`` → ``("ppo_res", 2)``); ``None`` for any other
    label (other options, a policy path, model-based controllers). Cached per label: parsing a
    spec scans the installed plugins (≈ 30 ms), and a report asks once per row."""
    try:
        spec = parse_spec(label)
    except ValueError:
        return None
    if spec.is_import_path or spec.target not in POLICY_KINDS:
        return None
    if set(spec.options) - {"training_seed"}:
        return None
    seed = spec.options.get("training_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        return None
    return spec.target, seed


def pool_training_seeds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every training-seed label relabeled as its kind (``training_seed`` added)."""
    out = []
    for r in rows:
        ts = training_seed(r["controller"])
        if ts is None or r["controller"] == ts[0] and "training_seed" in r:
            out.append(r)
        else:
            out.append({**r, "controller": ts[0], "training_seed": ts[1]})
    return out


def _seed_cell(values: list[float]) -> tuple[float, int, int]:
    """(mean over the runs that did not diverge, diverged runs, runs) of one policy's cell."""
    ok = [v for v in values if math.isfinite(v)]
    return (float(np.mean(ok)) if ok else math.nan), len(values) - len(ok), len(values)


def _seed_text(mean: float, crashed: int, runs: int) -> str:
    """One policy's value in a cell: its mean and diverged runs; ``all N div.`` when every run
    diverged (no mean to show)."""
    if not math.isfinite(mean):
        return f"– (all {runs} div.)"
    return f"{mean:.4f}" + (f" ({crashed} div.)" if crashed else "")


def _rmse(r: dict[str, Any]) -> float:
    v = r.get("rmse")
    return math.inf if r.get("diverged") or v is None else float(v)


def bootstrap_mean(values: list[float], seed: int = BOOTSTRAP_SEED) -> Interval:
    """Mean of ``values`` (one per training seed) and its 95 % percentile-bootstrap interval
    (:func:`residual_quad.evaluation.report.stats.stratified_mean_intervals`, one stratum)."""
    return stratified_mean_intervals([[list(values)]], seed=seed)[0]


def policy_budget(kind: str, seed: int) -> dict[str, Any] | None:
    """The training budget recorded in the shipped policy of ``kind`` and training ``seed``
    (``None`` when the file or its record is missing)."""
    try:
        from residual_quad.controllers.policy_file import read_meta, shipped_policy_path

        return read_meta(shipped_policy_path(kind, seed)).get("budget")
    except Exception:  # noqa: BLE001 - a note, never a reason to fail a report
        return None


def budget_text(b: dict[str, Any] | None) -> str:
    """``6.00 M steps, 13.1 min, 2 cores x86_64, 256 envs`` (or ``budget unavailable``)."""
    if not b:
        return "budget unavailable"
    return (
        f"{b['steps'] / 1e6:.2f} M policy steps, {b['train_wall_s'] / 60:.1f} min on "
        f"{b['cpu_count']} cores ({b.get('host', '?')}), {b['n_envs']} envs"
    )


_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def _count_words(counts: list[int]) -> str:
    """``[3, 5]`` → ``"three or five"`` (numbers beyond seven as digits)."""
    return " or ".join(_WORDS.get(n, str(n)) for n in counts)


def rl_section(
    rows: list[dict[str, Any]],
    figure_dir: Path | None = None,
    link_from: Path | None = None,
    notes: Callable[[list[tuple[str, str]]], list[str]] | None = None,
) -> str | None:
    """Markdown: the RL controllers over training seeds (see the module docstring); ``None``
    when the rows hold no shipped RL policy. Failure rows (controller errors) are left out.
    ``figure_dir``, ``link_from``, ``notes``: as for
    :func:`~residual_quad.evaluation.report.rl_stats.rliable_lines`."""
    from residual_quad.evaluation.sweep.rows import flown_rows

    pooled = pool_training_seeds(flown_rows(rows))
    rl = [r for r in pooled if training_seed(r["controller"]) is not None]
    if not rl:
        return None
    kinds = [k for k in POLICY_KINDS if any(r["controller"] == k for r in rl)]
    seeds = {
        k: sorted({r.get("training_seed", 0) for r in rl if r["controller"] == k}) for k in kinds
    }
    cells: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rl:
        if r["trajectory"] in TRACKING:
            key = (r["controller"], r["payload"], str(r["wind"]))
            cells[key][r.get("training_seed", 0)].append(_rmse(r))
    pid = defaultdict(list)
    for r in rows:
        if r["controller"] == "pid" and r["trajectory"] in TRACKING:
            pid[(r["payload"], str(r["wind"]))].append(_rmse(r))
    order = list(dict.fromkeys((r["payload"], str(r["wind"])) for r in rows))
    lines = [
        "## RL controllers over training seeds",
        "",
        "Steady-state position RMSE (m), mean over helix and figure-8 × env seeds for each "
        "policy (as the main table: over the runs that did not diverge, their count noted); the "
        "cell is the mean over training seeds with its 95 % percentile-bootstrap interval over "
        f"training seeds ({RESAMPLES:,} resamples, seeded), then the per-seed values. The main "
        "tables' RL columns are the means over all their runs. With "
        f"{_count_words(sorted({len(v) for v in seeds.values()}))} seeds the interval is coarse "
        "(it spans at most the seeds' range): it says how much a retraining moves the numbers, "
        "not a population statistic.",
        "",
    ]
    for k in kinds:
        lines.append(
            f"- `{k}`: training seeds {', '.join(map(str, seeds[k]))}; "
            + "; ".join(f"seed {s}: {budget_text(policy_budget(k, s))}" for s in seeds[k])
        )
    lines.append("")
    head = ["payload", "wind"]
    for k in kinds:
        head += [f"{k} mean [95 % CI]", f"{k} per seed"]
    if pid:
        head.append("pid")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seed_stats = {
        (k, payload, wind): [
            _seed_cell(per_seed[s])
            for s in seeds[k]
            if (per_seed := cells.get((k, payload, wind), {})).get(s)
        ]
        for payload, wind in order
        for k in kinds
    }
    # every cell's interval over training seeds in one vectorized computation
    intervals = dict(
        zip(
            seed_stats,
            stratified_mean_intervals(
                [[[m for m, _, _ in st if math.isfinite(m)]] for st in seed_stats.values()]
            ),
            strict=True,
        )
    )
    for payload, wind in order:
        line = [payload, wind]
        for k in kinds:
            stats = seed_stats[(k, payload, wind)]
            iv = intervals[(k, payload, wind)]
            if not stats:
                line += ["–", "–"]
                continue
            crashed = sum(c for _, c, _ in stats)
            note = f" ({crashed}/{sum(n for _, _, n in stats)} div.)" if crashed else ""
            line += [
                f"{iv.estimate:.4f}{iv.suffix()}{note}" if iv.kind != "empty" else "–",
                " / ".join(_seed_text(*st) for st in stats),
            ]
        if pid:
            v = pid.get((payload, wind))
            line.append(f"{np.mean(v):.4f}" if v else "–")
        lines.append("| " + " | ".join(line) + " |")
    kinds_shown = {iv.kind for iv in intervals.values()}
    marks = {
        "constant": "†: every training seed gives the same value; zero width.",
        "single": "‡: one training seed; no interval.",
    }
    if kinds_shown & marks.keys():
        lines += ["", " ".join(text for k, text in marks.items() if k in kinds_shown)]
    lines += ["", *rliable_lines(pooled, kinds, figure_dir, link_from, notes)]
    return "\n".join(lines)
