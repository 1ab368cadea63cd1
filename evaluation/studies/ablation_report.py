"""The ablation's table and figure, read only from its rows (``ablation_rows.json``).

Per variant and evaluation checkpoint: the mean over training seeds of the evaluation set's mean
RMSE, the seeds' range (with three seeds a range says more than an interval would), the crashed
flights, and the change of the final mean against the first variant. A second table gives every
seed's final value, so no mean hides a bad seed. The figure draws each seed's learning curve
thin and the mean thick.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

TABLE_FILE = "ablation.md"
FIGURE_FILE = "ablation.png"


def _variants(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(name, label) in the order the rows first name them."""
    seen: dict[str, str] = {}
    for r in rows:
        seen.setdefault(r["variant"], r["label"])
    return list(seen.items())


def _checkpoints(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({r["checkpoint"] for r in rows if r.get("checkpoint") is not None})


def _cell(rows: list[dict[str, Any]]) -> str:
    """``mean [min–max]`` of the seeds' RMSE, with the crashed flights; ``—`` without rows."""
    if not rows:
        return "—"
    values = [r["rmse_mean"] for r in rows if r["rmse_mean"] is not None]
    crashes = sum(r["crashes"] for r in rows)
    if not values:
        return f"every flight crashed ({crashes})"
    mean = sum(values) / len(values)
    text = f"{mean:.3f}"
    if len(values) > 1:
        text += f" [{min(values):.3f}–{max(values):.3f}]"
    return text + (f", {crashes} crash{'es' if crashes > 1 else ''}" if crashes else "")


def _mean(rows: list[dict[str, Any]]) -> float:
    values = [r["rmse_mean"] for r in rows if r["rmse_mean"] is not None]
    return sum(values) / len(values) if values else math.nan


def _steps_label(steps: int) -> str:
    return f"{steps / 1e6:g} M" if steps >= 1_000_000 else f"{steps / 1e3:g} k"


def table(rows: list[dict[str, Any]], eval_flights: int | None = None) -> str:
    """The markdown tables (means with seed ranges, then each seed's final value)."""
    if not rows:
        return "No finished ablation run yet.\n"
    names = _variants(rows)
    cps = _checkpoints(rows)
    by: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["variant"], "final" if r["final"] else r["checkpoint"])].append(r)
    freq = {r["checkpoint"]: r["steps"] for r in rows if r.get("checkpoint") is not None}
    step_of = {k: _steps_label(round(freq[k], -5)) for k in cps}
    baseline = rows[0]["baseline"]
    base_label = dict(names).get(baseline, baseline)
    head = ["variant", "seeds", *[step_of[k] for k in cps], "final", f"final vs {baseline}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = _mean(by[(baseline, "final")])
    seeds_of = defaultdict(set)
    for r in rows:
        seeds_of[r["variant"]].add(r["seed"])
    for name, label in names:
        final = _mean(by[(name, "final")])
        ok = first > 0 and math.isfinite(first) and math.isfinite(final)
        ratio = f"{(final / first - 1) * 100:+.0f} %" if ok else "—"
        cells = [_cell(by[(name, k)]) for k in cps]
        n = len(seeds_of[name])
        lines.append(
            f"| {label} | {n} | " + " | ".join([*cells, _cell(by[(name, "final")]), ratio]) + " |"
        )
    flights = f" over its {eval_flights} evaluation flights" if eval_flights else ""
    lines += [
        "",
        f"Mean over training seeds of each run's mean RMSE (m){flights} (a run's mean leaves out"
        " its crashed flights), [lowest–highest seed];"
        " crashes: crashed evaluation flights summed over seeds; the last column compares the"
        f" final means with {base_label}"
        + (" (—: it has no finished run yet)." if not math.isfinite(first) else "."),
        "",
        "| variant | " + " | ".join(f"seed {s}" for s in _all_seeds(rows)) + " |",
        "|---|" + "---|" * len(_all_seeds(rows)),
    ]
    for name, label in names:
        final = {r["seed"]: r for r in by[(name, "final")]}
        cells = []
        for s in _all_seeds(rows):
            r = final.get(s)
            if r is None:
                cells.append("—")
            else:
                crash = f" ({r['crashes']} crash)" if r["crashes"] else ""
                value = (
                    "every flight crashed" if r["rmse_mean"] is None else f"{r['rmse_mean']:.3f}"
                )
                cells.append(f"{value}{crash}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _all_seeds(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({r["seed"] for r in rows})


def figure(rows: list[dict[str, Any]], path: str | Path) -> Path | None:
    """Learning curves: evaluation mean RMSE against policy steps, per variant (seeds thin,
    their mean thick); ``None`` without rows."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    colors = plt.get_cmap("tab20")  # 20 distinct colours, and a marker cycle beyond them
    markers = ("o", "s", "^", "D")
    for i, (name, label) in enumerate(_variants(rows)):
        mine = [r for r in rows if r["variant"] == name and r["rmse_mean"] is not None]
        color = colors(i % 20)
        for seed in sorted({r["seed"] for r in mine}):
            curve = sorted((r["steps"], r["rmse_mean"]) for r in mine if r["seed"] == seed)
            ax.plot(
                *zip(*[(s / 1e6, v) for s, v in curve], strict=True),
                color=color,
                lw=0.7,
                alpha=0.45,
            )
        by_cp: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in mine:
            if r.get("checkpoint") is not None:
                by_cp[r["checkpoint"]].append(r)
        if by_cp:
            xs = [sum(r["steps"] for r in by_cp[k]) / len(by_cp[k]) / 1e6 for k in sorted(by_cp)]
            ys = [_mean(by_cp[k]) for k in sorted(by_cp)]
            n = len({r["seed"] for r in mine})
            ax.plot(
                xs,
                ys,
                color=color,
                lw=2.2,
                # variants i and i + 20 share a colour, so their markers differ by one step
                marker=markers[(i + i // 20) % len(markers)],
                label=f"{label} ({n} seed{'s' if n > 1 else ''})",
            )
    ax.set_yscale("log")
    ax.set_xlabel("policy steps (millions)")
    ax.set_ylabel("evaluation mean RMSE (m)")
    ax.set_title("Ablation at equal budget: seeds thin, their mean thick")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def write_report(rows: list[dict[str, Any]], out: str | Path, eval_flights: int | None) -> str:
    """Write ``ablation.md`` and ``ablation.png`` into ``out``; the table's text."""
    out = Path(out)
    text = table(rows, eval_flights)
    (out / TABLE_FILE).write_text(text, encoding="utf-8")
    figure(rows, out / FIGURE_FILE)
    return text
