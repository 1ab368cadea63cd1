"""The recovery table and figure of runs with events, from the rows and the series a sweep wrote.

Nothing here flies a controller: :func:`recovery_table` reads the recovery columns of the rows
(:mod:`residual_quad.evaluation.sweep.recovery`), :func:`recovery_figure` the position series
saved for the runs (``series/<run_id>.npz``, kept for every run by the shipped recovery
configs). Rows without events (the committed sweep) give no table and no figure.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from residual_quad.evaluation.report.beyond import RECOVERY_DIR, Extras  # noqa: E402
from residual_quad.evaluation.report.series import (  # noqa: E402
    figure_series,
    series_label,
    series_of,
)
from residual_quad.evaluation.report.style import (  # noqa: E402
    BAND_ALPHA,
    color_of,
    figure_legend,
    hidden_notes,
    legend_title,
    linestyle_of,
    series_handle,
    tuned_note,
)
from residual_quad.evaluation.report.tables import Table, controller_order  # noqa: E402
from residual_quad.evaluation.sweep.rows import flown_rows, read_rows, series_stem  # noqa: E402

FIGURE_BEFORE_S = 1.0  # s, shown before the event
FIGURE_AFTER_S = 10.0  # s, shown after the event


def _value(row: dict[str, Any], key: str) -> float:
    """A metric of a row as a float: absent or ``None`` (never, not measurable) is NaN."""
    v = row.get(key)
    return float("nan") if v is None else float(v)


def event_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The flown rows of runs with events (those that carry the recovery columns)."""
    return [r for r in flown_rows(rows) if r.get("event_t_s") is not None]


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], list[dict]]:
    """Rows by scenario: (events, trajectory, payload at reset, wind)."""
    out: dict[tuple[str, str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["events"], r["trajectory"], str(r["payload"]), str(r["wind"]))].append(r)
    return out


def _median_iqr(values: list[float]) -> str:
    """``median [q25, q75]`` of the finite values, ``–`` when there are none."""
    v = np.array([x for x in values if np.isfinite(x)])
    if v.size == 0:
        return "–"
    q25, q50, q75 = np.percentile(v, [25, 50, 75])
    return f"{q50:.3f} [{q25:.3f}, {q75:.3f}]"


def recovery_table(rows: list[dict[str, Any]]) -> Table | None:
    """Per scenario and controller: runs, crashes, runs back in the band, and the median [25 %,
    75 %] over seeds of the recovery time (recovered runs only), the peak error and the error
    integrated over the 5 s after the event. ``None`` without runs with events."""
    rows = event_rows(rows)
    if not rows:
        return None
    controllers = controller_order(rows)
    body: list[list[Any]] = []
    for (events, trajectory, payload, wind), group in _groups(rows).items():
        by_ctrl: dict[str, list[dict]] = defaultdict(list)
        for r in group:
            by_ctrl[r["controller"]].append(r)
        for c in controllers:
            rs = by_ctrl.get(c)
            if not rs:
                continue
            body.append(
                [
                    events,
                    trajectory,
                    f"{payload}, {wind}",
                    c,
                    len(rs),
                    sum(bool(r["diverged"]) for r in rs),
                    sum(bool(r["recovered"]) for r in rs),
                    _median_iqr([_value(r, "recovery_time_s") for r in rs]),
                    _median_iqr([_value(r, "recovery_peak_m") for r in rs]),
                    _median_iqr([_value(r, "recovery_iae_m_s") for r in rs]),
                ]
            )
    band = sorted({r["recovery_band_m"] for r in rows})
    return Table(
        "recovery",
        "Recovery after the first event: median [25 %, 75 %] over seeds",
        [
            "events",
            "trajectory",
            "payload, wind",
            "controller",
            "runs",
            "crashed",
            "back in band",
            "recovery time (s)",
            "peak error (m)",
            "∫error, 5 s (m·s)",
        ],
        body,
        note=(
            f"Band {', '.join(f'{b * 100:g} cm' for b in band)}. Recovery time: from the event "
            "until the error enters the band and stays there to the end (0: never left it), over "
            "the runs back in the band; a run still outside at the end, or crashed, is counted "
            "as not back. Definitions: docs/recovery.md."
        ),
    )


def _error_series(series_dir: Path, run_id: str) -> tuple[np.ndarray, np.ndarray] | None:
    path = series_dir / (series_stem(run_id) + ".npz")
    if not path.exists():
        return None
    with np.load(path) as z:
        return z["t"], np.linalg.norm(z["pos"] - z["ref"], axis=1)


def recovery_figure(
    rows: list[dict[str, Any]], series_dir: Path, out: Path, *, name: str = "recovery.png"
) -> Path | None:
    """Position error around the event, one panel per scenario, every controller: the median
    over seeds with its 25–75 % band, the recovery band dotted (log scale), written as
    ``out/name``; an RL policy's training seeds are one series (their runs pooled), a tuned
    variant is dashed in its default's colour family, one legend outside the panels. ``None``
    without runs with events or their series."""
    rows = event_rows(rows)
    groups = _groups(rows)
    if not groups:
        return None
    controllers = figure_series(rows)
    fig = plt.figure(figsize=(10.0, 3.2 * len(groups) + 0.4), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False, sharex=True)
    drawn: set[str] = set()
    panels = zip(axes[:, 0], groups.items(), strict=True)
    for ax, ((events, trajectory, payload, wind), group) in panels:
        t0 = group[0]["event_t_s"]
        for c in controllers:
            curves = []
            for r in group:
                if series_of(r["controller"])[0] != c:
                    continue
                s = _error_series(series_dir, r["run_id"])
                if s is not None:
                    curves.append(s)
            if not curves:
                continue
            n = max(len(t) for t, _ in curves)
            grid = next(t for t, _ in curves if len(t) == n) - t0
            block = np.full((len(curves), n), np.nan)  # a crashed run's series ends early
            for k, (_, e) in enumerate(curves):
                block[k, : len(e)] = e
            keep = (grid >= -FIGURE_BEFORE_S) & (grid <= FIGURE_AFTER_S)
            q25, q50, q75 = np.nanpercentile(block[:, keep], [25, 50, 75], axis=0)
            color = color_of(c)
            ax.plot(grid[keep], q50, color=color, ls=linestyle_of(c), lw=1.4, label=c)
            ax.fill_between(grid[keep], q25, q75, color=color, alpha=BAND_ALPHA, lw=0)
            drawn.add(c)
        ax.axhline(group[0]["recovery_band_m"], color="k", ls=":", lw=1.0)
        ax.axvline(0.0, color="k", lw=0.6)
        ax.set_yscale("log")
        ax.set_ylabel("position error (m)")
        ax.set_title(f"{events} — {trajectory}, {payload}, {wind}", fontsize=9)
    if not drawn:
        plt.close(fig)
        return None
    axes[-1, 0].set_xlabel("time since the event (s)")
    shown = [c for c in controllers if c in drawn]
    handles = [series_handle(c, band=True) for c in shown]
    handles.append(Line2D([], [], color="k", ls=":", lw=1.0))
    notes = ["line: median over seeds, band: 25–75 %", tuned_note(shown)]
    names = [trajectory for _, trajectory, _, _ in groups]  # a panel by its trajectory
    if len(set(names)) < len(names):
        names = [f"panel {i + 1}" for i in range(len(names))]
    under = hidden_notes(zip(names, axes[:, 0], strict=True))
    labels = [series_label(c, controllers[c]) + under.get(c, "") for c in shown]
    figure_legend(
        fig,
        handles,
        [*labels, "recovery band"],
        title=legend_title(notes),
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def recovery_section(rows: list[dict[str, Any]], run_dir: Path, out: Path) -> str | None:
    """The report section of the runs with events (table and figure, the figure written into
    ``out``), or ``None`` without such runs."""
    table = recovery_table(rows)
    if table is None:
        return None
    lines = ["## Recovery after events", "", table.markdown(digits=3), ""]
    fig = recovery_figure(rows, Path(run_dir) / "series", out)
    if fig is not None:
        lines += [f"![recovery]({os.path.relpath(fig, run_dir)})", ""]
    return "\n".join(lines)


def recovery_extras(out_dir: str | Path, names: Sequence[str] | None = None) -> Extras:
    """The recovery table (the sweeps ``out_dir/recovery/<name>/`` of ``names`` together, in
    that order; ``None``: every such folder, in name order) and one figure per sweep
    (``figures/recovery/<name>.png``) for the "Beyond the source" section of a pipeline output
    folder; empty without such rows. The pipeline and ``rquad report --rewrite`` both call it,
    so both render the same section; a figure whose series are gone (not committed) is kept as
    drawn."""
    out = Path(out_dir)
    folder = out / RECOVERY_DIR
    if names is None:
        runs = sorted(d for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
    else:
        runs = [folder / n for n in names]
    rows_by_run = [(d, read_rows(d)) for d in runs]
    rows_by_run = [(d, rows) for d, rows in rows_by_run if rows]
    table = recovery_table([r for _, rows in rows_by_run for r in rows])
    if table is None:
        return Extras()
    sources = ", ".join(f"`{d.relative_to(out).as_posix()}/rows.jsonl`" for d, _ in rows_by_run)
    table = dataclasses.replace(table, note=f"{table.note} Rows: {sources}.")
    figures: dict[str, Path] = {}
    for d, rows in rows_by_run:
        path = out / "figures" / RECOVERY_DIR / f"{d.name}.png"
        fig = recovery_figure(rows, d / "series", path.parent, name=path.name)
        if fig is None and path.is_file():  # series not kept (committed results): keep it
            fig = path
        if fig is not None:
            figures[f"recovery, {d.name}"] = fig
    return Extras(tables=[table], figures=figures)
