"""Result tables computed from sweep rows only (Markdown + CSV), mirroring the source's [RES §9].

* ``main``: steady-state RMSE per payload × wind, mean over helix and figure-8 and seeds, every
  cell with its 95 % bootstrap interval over seeds (:mod:`residual_quad.evaluation.report.stats`);
* ``payload_sweep``: helix, windy, per payload (RMSE and residual-estimate bias);
* ``wind_sweep``: heavy payload, helix, per wind;
* ``hover_check``: ``geo`` hover offset vs the analytic Δa/K_p (calm);
* ``control_cost``: ∫ΣT² per payload × wind and its spread across controllers;
* ``divergence``: diverged runs per controller;
* ``failures`` (only when a run failed): failed runs (controller errors) per controller with
  their reasons. Failed runs are left out of every other table.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import SOURCE_TRACKERS, available_controllers
from residual_quad.controllers.trackers import DEFAULT_KP
from residual_quad.envs.airframe import GRAVITY, Airframe
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.evaluation.report.stats import (
    MARK_NOTES,
    Interval,
    strata_of,
    stratified_mean_intervals,
)
from residual_quad.evaluation.sweep.rows import failed_rows, flown_rows

# the orders of rows and columns: one source each (the env's levels, the registry)
PAYLOAD_ORDER = list(PAYLOAD_LEVELS)
WIND_ORDER = list(WIND_LEVELS)
CONTROLLER_ORDER = available_controllers()
#: the main table's trajectories
TRACKING = ("helix", "figure8")


@dataclass
class Table:
    """A titled table of strings/numbers. ``intervals`` maps a column header to one interval
    per row (``None``: no interval); Markdown prints it after the cell, CSV as two more
    columns ``<header> low`` and ``<header> high`` at the end (existing columns keep their
    places)."""

    name: str
    title: str
    headers: list[str]
    rows: list[list[Any]]
    note: str = ""
    intervals: dict[str, list[Interval | None]] = field(default_factory=dict)

    def markdown(self, digits: int = 4) -> str:
        def fmt(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.{digits}f}" if np.isfinite(v) else "–"
            return "–" if v is None else str(v)

        def cell(i: int, j: int, v: Any) -> str:
            ivs = self.intervals.get(self.headers[j])
            iv = ivs[i] if ivs else None
            text = fmt(v)
            if iv is None or v is None:
                return text
            head, _, tail = text.partition(" ")  # "0.0522 (3/18 div.)": the mark after the number
            return head + iv.suffix(digits) + (" " + tail if tail else "")

        lines = [f"**{self.title}**", ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += [
            "| " + " | ".join(cell(i, j, v) for j, v in enumerate(row)) + " |"
            for i, row in enumerate(self.rows)
        ]
        kinds = {iv.kind for ivs in self.intervals.values() for iv in ivs if iv is not None}
        notes = [self.note] if self.note else []
        notes += [MARK_NOTES[k] for k in MARK_NOTES if k in kinds]
        if notes:
            lines += ["", " ".join(notes)]
        return "\n".join(lines)

    def to_csv(self, path: str | Path) -> None:
        cols = list(self.intervals)
        with Path(path).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.headers + [f"{c} {end}" for c in cols for end in ("low", "high")])
            for i, row in enumerate(self.rows):
                bounds: list[Any] = []
                for c in cols:
                    iv = self.intervals[c][i]
                    ok = iv is not None and iv.kind in ("bootstrap", "constant")
                    bounds += [iv.low, iv.high] if ok and iv is not None else [None, None]
                w.writerow(list(row) + bounds)


def _order(values: Iterable[Any], preferred: list[Any]) -> list[Any]:
    vals = list(dict.fromkeys(values))
    known = [v for v in preferred if v in vals]
    return known + sorted((v for v in vals if v not in preferred), key=str)


def controller_order(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Controller labels as tables show them: the registered controllers in registry order, then
    every other label (``hnewton:lm``, user controllers) in the order of the rows (the report
    puts rows in config order first:
    :func:`residual_quad.evaluation.report.document.order_rows`)."""
    labels = list(dict.fromkeys(r["controller"] for r in rows))
    registered = available_controllers()  # built-ins, then installed plugins
    return [c for c in registered if c in labels] + [c for c in labels if c not in registered]


def _key(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _mean(rows: list[dict[str, Any]], metric: str) -> float:
    vals = [r[metric] for r in rows if r.get(metric) is not None and not r["diverged"]]
    return float(np.mean(vals)) if vals else float("nan")


def _cell(rows: list[dict[str, Any]], metric: str) -> Any:
    """Mean of ``metric``; diverged runs are shown next to it instead of being averaged away."""
    m = _mean(rows, metric)
    div = sum(r["diverged"] for r in rows)
    if not rows:
        return None
    if div == 0:
        return m
    if not np.isfinite(m):  # every run diverged: no mean to show
        return f"– ({div}/{len(rows)} div.)"
    return f"{m:.4f} ({div}/{len(rows)} div.)"


Groups = dict[tuple, dict[str, list[dict[str, Any]]]]


def _groups(
    rows: list[dict[str, Any]],
    select: Callable[[dict[str, Any]], bool],
    row_keys: tuple[str, ...],
) -> Groups:
    """The selected rows by table row (``row_keys``' values, in table order) and controller."""
    groups: Groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if select(r):
            groups[tuple(_key(r[k]) for k in row_keys)][r["controller"]].append(r)
    orders = {"payload": PAYLOAD_ORDER, "wind": WIND_ORDER}
    keys = list(groups)
    for i in reversed(range(len(row_keys))):
        pref = orders.get(row_keys[i], [])
        keys.sort(key=lambda k, i=i, pref=pref: pref.index(k[i]) if k[i] in pref else len(pref))
    return {k: groups[k] for k in keys}


def grid_cells(
    rows: list[dict[str, Any]],
    select: Callable[[dict[str, Any]], bool],
    row_keys: tuple[str, ...],
    controllers: list[str],
    metric: str,
) -> list[list[Any]]:
    """Table rows of the selected ``rows``: the ``row_keys`` values, then per controller the
    mean of ``metric`` with its crashes beside it (:func:`_cell`); :func:`grid_intervals` gives
    each cell's interval."""
    groups = _groups(rows, select, row_keys)
    return [
        [*key, *(_cell(by_ctrl.get(c, []), metric) for c in controllers)]
        for key, by_ctrl in groups.items()
    ]


def grid_intervals(
    rows: list[dict[str, Any]],
    select: Callable[[dict[str, Any]], bool],
    row_keys: tuple[str, ...],
    controllers: list[str],
    metric: str,
) -> dict[str, list[Interval | None]]:
    """The bootstrap interval over seeds of every cell of :func:`grid_cells` (same selection), per
    controller column, all cells in one vectorized computation (``None``: an empty cell)."""
    groups = _groups(rows, select, row_keys)
    where: list[tuple[str, int]] = []
    cells = []
    for i, by_ctrl in enumerate(groups.values()):
        for c in controllers:
            if by_ctrl.get(c):
                where.append((c, i))
                cells.append(strata_of(by_ctrl[c], metric))
    out: dict[str, list[Interval | None]] = {c: [None] * len(groups) for c in controllers}
    for (c, i), iv in zip(where, stratified_mean_intervals(cells), strict=True):
        out[c][i] = iv
    return out


def make_tables(rows: list[dict[str, Any]]) -> dict[str, Table]:
    """Every table that the rows allow (a table whose slice is absent is omitted). Failure rows
    (controller errors) are left out of every metric and listed in the ``failures`` table."""
    every = rows
    rows = flown_rows(rows)
    controllers = controller_order(rows)
    tracking = set(TRACKING)
    tables: dict[str, Table] = {}

    main = matrix_table(rows, controllers, tracking)
    if main is not None:
        tables["main"] = main

    def helix_windy(r: dict[str, Any]) -> bool:
        return r["trajectory"] == "helix" and r["wind"] == "windy"

    sweep = grid_cells(rows, helix_windy, ("payload",), controllers, "rmse")
    if sweep:
        tables["payload_sweep"] = Table(
            "payload_sweep",
            "Payload sweep: RMSE (m), helix, windy",
            ["payload", *controllers],
            sweep,
        )
        est = [
            c
            for c in controllers
            if any(
                r["controller"] == c and r.get("residual_bias") is not None and helix_windy(r)
                for r in rows
            )
        ]
        if est:
            tables["residual_bias"] = Table(
                "residual_bias",
                "Residual-estimate bias |mean(Δâ − Δa)| (m/s²), helix, windy",
                ["payload", *est],
                grid_cells(rows, helix_windy, ("payload",), est, "residual_bias"),
                "For controllers without a residual model (pid, geo) the estimate is zero, so "
                "the figure is the size of the mean residual itself.",
            )

    wind = grid_cells(
        rows,
        lambda r: r["trajectory"] == "helix" and r["payload"] == "heavy",
        ("wind",),
        controllers,
        "rmse",
    )
    if wind:
        tables["wind_sweep"] = Table(
            "wind_sweep",
            "Wind sweep: RMSE (m), heavy payload, helix",
            ["wind", *controllers],
            wind,
        )

    hover = [
        r
        for r in rows
        if r["controller"] == "geo" and r["trajectory"] == "hover" and r["wind"] == "calm"
    ]
    if hover:
        by_payload: dict[Any, list] = defaultdict(list)
        for r in hover:
            by_payload[r["payload"]].append(r)
        body = []
        m_nom = Airframe().mass
        for p in _order(by_payload, PAYLOAD_ORDER):
            kg = by_payload[p][0]["payload_kg"]
            analytic = GRAVITY * kg / m_nom / DEFAULT_KP
            measured = _mean(by_payload[p], "rmse")
            ratio = measured / analytic if analytic > 0 else float("nan")
            body.append([p, kg, analytic, measured, ratio])
        tables["hover_check"] = Table(
            "hover_check",
            "geo hover offset vs the analytic Δa/K_p (calm, K_p = 20 1/s²)",
            ["payload", "kg", "analytic Δa/K_p (m)", "measured RMSE (m)", "ratio"],
            body,
            "Δa = g·Δm/m_nominal. The runs keep the ground effect on (≈ +0.05 % thrust at 1.5 m).",
        )

    cost = grid_cells(
        rows,
        lambda r: r["trajectory"] in tracking,
        ("payload", "wind"),
        controllers,
        "control_cost",
    )
    if cost:

        def spread(values: list[Any]) -> float:
            vals = [v for v in values if isinstance(v, float) and np.isfinite(v)]
            return (max(vals) - min(vals)) / min(vals) * 100 if len(vals) > 1 else float("nan")

        source = [i for i, c in enumerate(controllers) if c in SOURCE_TRACKERS]
        body = [[*row, spread([row[2 + i] for i in source]), spread(row[2:])] for row in cost]
        tables["control_cost"] = Table(
            "control_cost",
            "Control cost ∫ΣT² dt (N²·s), mean over helix and figure-8 × seeds",
            ["payload", "wind", *controllers, "spread, source trackers (%)", "spread, all (%)"],
            body,
            "Spread: (max − min)/min across the row's controllers; the source's claim [RES §9] "
            "(within 2.5 %) is about its four trackers pid, geo, geo_res, geo_rls.",
        )

    div_rows = []
    for c in controllers:
        rs = [r for r in rows if r["controller"] == c]
        bad = [r["run_id"] for r in rs if r["diverged"]]
        div_rows.append([c, len(rs), len(bad), ", ".join(bad[:5]) + (" …" if len(bad) > 5 else "")])
    tables["divergence"] = Table(
        "divergence", "Diverged runs", ["controller", "runs", "diverged", "examples"], div_rows
    )
    failed = failed_rows(every)
    if failed:
        fail_rows = []
        for c in controller_order(every):
            bad = [r for r in failed if r["controller"] == c]
            if bad:
                runs = sum(1 for r in every if r["controller"] == c)
                shown = "; ".join(f"{r['run_id']}: {r.get('error')}" for r in bad[:3])
                fail_rows.append([c, runs, len(bad), shown + (" …" if len(bad) > 3 else "")])
        tables["failures"] = Table(
            "failures",
            "Failed runs (controller errors; left out of every table above)",
            ["controller", "runs", "failed", "examples"],
            fail_rows,
        )
    return tables


def matrix_table(
    rows: list[dict[str, Any]],
    controllers: list[str] | None = None,
    trajectories: Iterable[str] = TRACKING,
    name: str = "main",
) -> Table | None:
    """RMSE per payload × wind (mean over ``trajectories`` and seeds), every cell with its
    bootstrap interval over seeds; ``None`` when no row flies one of ``trajectories``."""
    trajs = set(trajectories)
    flown = flown_rows(rows)
    ctrls = controller_order(flown) if controllers is None else controllers

    def select(r: dict[str, Any]) -> bool:
        return r["trajectory"] in trajs

    body = grid_cells(flown, select, ("payload", "wind"), ctrls, "rmse")
    if not body:
        return None
    shown = " and ".join(
        t.replace("figure8", "figure-8") for t in _order(trajs, list(TRAJECTORIES))
    )
    return Table(
        name,
        f"Steady-state position RMSE (m), mean over {shown} × seeds",
        ["payload", "wind", *ctrls],
        body,
        intervals=grid_intervals(flown, select, ("payload", "wind"), ctrls, "rmse"),
    )


def focus_tables(rows: list[dict[str, Any]], focus: str) -> str:
    """Markdown: ``focus``'s RMSE per payload × (trajectory, wind), then every controller head to
    head per payload × trajectory (mean over the winds; ``crash`` if any run crashed).
    Failed runs (controller errors) are left out and counted."""
    failed = failed_rows(rows)
    if any(r["controller"] == focus for r in failed) and not any(
        r["controller"] == focus for r in flown_rows(rows)
    ):
        raise ValueError(f"every run of controller {focus!r} failed; nothing to tabulate")
    rows = flown_rows(rows)
    by: dict[tuple[str, Any, Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["controller"], r["payload"], _key(r["wind"]), r["trajectory"])].append(r)
    if not any(r["controller"] == focus for r in rows):
        raise ValueError(f"no rows of controller {focus!r} in these rows")
    others = controller_order(rows)
    controllers = [focus] + [c for c in others if c != focus]
    payloads = _order((r["payload"] for r in rows), PAYLOAD_ORDER)
    winds = _order((_key(r["wind"]) for r in rows), WIND_ORDER)
    trajectories = _order((r["trajectory"] for r in rows), list(TRAJECTORIES))

    def fmt(runs: list[dict[str, Any]]) -> str:
        crashed = sorted({str(r["termination"]) for r in runs if r["diverged"]})
        if crashed:
            return "crash (" + ", ".join(crashed) + ")"
        return f"{sum(r['rmse'] for r in runs) / len(runs):.3f}" if runs else "–"

    n = sum(1 for r in rows if r["controller"] == focus)
    crashes = sum(1 for r in rows if r["controller"] == focus and r["diverged"])
    n_failed = sum(1 for r in failed if r["controller"] == focus)
    fails = f" ({n_failed} more run(s) failed: controller errors)" if n_failed else ""
    out = [f"`{focus}`: {crashes} crash(es) in {n} flights{fails}.", ""]
    out.append(f"Position RMSE after 3 s (m) of `{focus}` per payload × (trajectory, wind):")
    out.append("")
    head = [f"{t} {w}" for t in trajectories for w in winds]
    out += ["| payload | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for p in payloads:
        cells = [fmt(by[(focus, p, w, t)]) for t in trajectories for w in winds]
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    out += ["", "Head to head, mean RMSE over the winds (m; `crash` if any of them crashed):", ""]
    out.append("| payload | trajectory | " + " | ".join(f"`{c}`" for c in controllers) + " |")
    out.append("|---|---|" + "---:|" * len(controllers))
    for p in payloads:
        for t in trajectories:
            cells = [fmt([r for w in winds for r in by[(c, p, w, t)]]) for c in controllers]
            out.append(f"| {p} | {t} | " + " | ".join(cells) + " |")
    means = []
    for c in controllers:
        ok = [r["rmse"] for r in rows if r["controller"] == c and not r["diverged"]]
        ok = [x for x in ok if x is not None and np.isfinite(x)]
        means.append(f"`{c}` {sum(ok) / max(len(ok), 1):.3f} m over {len(ok)} flights")
    out += ["", "Mean over all non-crashed flights: " + "; ".join(means) + "."]
    return "\n".join(out)


def write_tables(tables: dict[str, Table], out_dir: str | Path) -> Path:
    """Write every table as CSV plus one ``tables.md``; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for t in tables.values():
        t.to_csv(out / f"{t.name}.csv")
    md = out / "tables.md"
    md.write_text("\n\n".join(t.markdown() for t in tables.values()) + "\n")
    return md
