"""``report.md``: the tables inline, the figures linked, and the targets of [RES §9] checked.

Everything is computed from the sweep rows (and the saved series for the figures).
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.controllers.base import SOURCE_TRACKERS
from residual_quad.controllers.specs import entry_label
from residual_quad.evaluation.report.information import (
    information_groups,
    information_notes,
    information_table,
)
from residual_quad.evaluation.report.paired import paired_table
from residual_quad.evaluation.report.rl_seeds import (
    POLICY_KINDS,
    pool_training_seeds,
    rl_section,
    training_seed,
)
from residual_quad.evaluation.report.tables import Table, make_tables, write_tables
from residual_quad.evaluation.sweep.rows import failed_rows, flown_rows

# the main table of [RES §9.1] (helix + figure-8 × 3 seeds), for side-by-side reading
SOURCE_MAIN = {
    ("none", "calm"): (0.0164, 0.0098, 0.0305, 0.0187),
    ("none", "breezy"): (0.0268, 0.0312, 0.0280, 0.0195),
    ("none", "windy"): (0.0700, 0.1039, 0.0609, 0.0235),
    ("light", "calm"): (0.0319, 0.1294, 0.0435, 0.0195),
    ("light", "breezy"): (0.0383, 0.1323, 0.0406, 0.0194),
    ("light", "windy"): (0.0790, 0.1654, 0.0610, 0.0219),
    ("heavy", "calm"): (0.0609, 0.2598, 0.0595, 0.0202),
    ("heavy", "breezy"): (0.0644, 0.2610, 0.0603, 0.0196),
    ("heavy", "windy"): (0.0976, 0.2794, 0.0747, 0.0232),
    ("extra", "calm"): (0.0916, 0.3903, 0.1248, 0.0202),
    ("extra", "breezy"): (0.0938, 0.3909, 0.1219, 0.0197),
    ("extra", "windy"): (0.1216, 0.4037, 0.1295, 0.0261),
}


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else float("nan")


def _worst(v: Any) -> float:
    """A main-table cell as a target sees it: a cell with diverged runs (shown as text) fails."""
    return float(v) if isinstance(v, int | float) else math.inf


def target_checks(tables: dict[str, Table], rows: list[dict[str, Any]]) -> list[list[Any]]:
    """The headline numbers of [RES §9] as pass/miss lines (only those the rows allow)."""
    checks: list[list[Any]] = []
    main = tables.get("main")
    if main:
        h = main.headers
        checks += _cell_max_check(main, "geo_rls", "0.026", "")
        checks += _cell_max_check(main, "geo_rls_dob", "0.020", " (beyond the source)")
        if "geo_rls_dob" in h:
            runs = [
                r["rmse"]
                for r in rows
                if r["controller"] == "geo_rls_dob" and r["trajectory"] in ("helix", "figure8")
            ]
            if runs:
                worst_run = max(math.inf if v is None else v for v in runs)
                checks.append(
                    [
                        "geo_rls_dob RMSE in every single helix/figure-8 run (beyond the source)",
                        "≤ 0.025 m",
                        f"max {worst_run:.4f} m",
                        worst_run <= 0.025,
                    ]
                )
        if "geo_res" in h:
            heavy = [_num(r[h.index("geo_res")]) for r in main.rows if r[0] == "heavy"]
            if heavy:
                checks.append(
                    [
                        "geo_res RMSE, heavy payload cells",
                        "≤ 0.075 m",
                        f"max {max(heavy):.4f} m",
                        max(heavy) <= 0.075,
                    ]
                )
        checks += _rl_checks(main, rows)
    hover = tables.get("hover_check")
    if hover:
        ratios = [r[4] for r in hover.rows if isinstance(r[4], float) and math.isfinite(r[4])]
        if ratios:
            dev = max(abs(x - 1.0) for x in ratios)
            checks.append(
                [
                    "geo hover offset vs Δa/K_p",
                    "within 5 %",
                    f"max deviation {dev * 100:.2f} %",
                    dev <= 0.05,
                ]
            )
    div = sum(r["diverged"] for r in rows)
    checks.append(["diverged runs", "0", f"{div} / {len(rows)}", div == 0])
    cost = tables.get("control_cost")
    spreads = [v for v in (_num(r[-2]) for r in cost.rows) if math.isfinite(v)] if cost else []
    if spreads:  # none: fewer than two source trackers flown
        worst = max(spreads)
        checks.append(
            [
                "control-cost spread across pid/geo/geo_res/geo_rls per cell",
                "≤ 3 %",
                f"max {worst:.2f} %",
                worst <= 3.0,
            ]
        )
    return checks


def _cell_max_check(main: Table, label: str, goal: str, note: str) -> list[list[Any]]:
    """``label``'s worst main-table cell against ``goal`` (m, as written in the report);
    nothing when ``label`` was not flown."""
    if label not in main.headers:
        return []
    cells = [_worst(r[main.headers.index(label)]) for r in main.rows]
    worst = max(cells)
    text = f"{label} RMSE in every payload × wind cell{note}"
    return [[text, f"≤ {goal} m", _max_text(cells, "{:.4f} m"), worst <= float(goal)]]


def _max_text(values: list[float], fmt: str) -> str:
    """``max …`` of the finite values, and how many cells have diverged runs (infinite)."""
    finite = [v for v in values if math.isfinite(v)]
    crashed = len(values) - len(finite)
    text = f"max {fmt.format(max(finite))}" if finite else "no cell without diverged runs"
    if finite and crashed:
        text += f" where no run diverged; {crashed} of {len(values)} cells with diverged runs"
    return text


def _rl_checks(main: Table, rows: list[dict[str, Any]]) -> list[list[Any]]:
    """The RL targets: ``ppo`` ≤ 0.08 m, ``ppo_res`` ≤ ``pid``, ``ppo_acc`` ≤ ``pid`` (and
    ≤ 0.8 × ``pid`` in the windy cells) and ``ppo_adapt`` ≤ 0.02 m and ≤ ``pid`` in every
    main-table cell (means over training seeds), and no crash of any."""
    checks: list[list[Any]] = []
    checks += _cell_max_check(main, "ppo", "0.08", " (mean over training seeds)")
    checks += _pid_ratio_check(main, "ppo_res")
    checks += _pid_ratio_check(main, "ppo_acc")
    checks += _pid_ratio_check(main, "ppo_acc", 0.8, "windy")
    checks += _cell_max_check(main, "ppo_adapt", "0.02", " (mean over training seeds)")
    checks += _pid_ratio_check(main, "ppo_adapt")
    for kind in POLICY_KINDS:
        runs = [r for r in rows if (training_seed(r["controller"]) or ("",))[0] == kind]
        if runs:
            crashes = sum(bool(r["diverged"]) for r in runs)
            checks.append(
                [
                    f"{kind} crashes (every training seed, extra included)",
                    "0",
                    f"{crashes} / {len(runs)}",
                    crashes == 0,
                ]
            )
    return checks


def _pid_ratio_check(
    main: Table, label: str, goal: float = 1.0, wind: str | None = None
) -> list[list[Any]]:
    """``label``'s RMSE against ``pid``'s in every main-table cell (or every cell of ``wind``)
    against the ratio ``goal``; nothing when either is missing."""
    h = main.headers
    if label not in h or "pid" not in h:
        return []
    rows = [r for r in main.rows if wind is None or r[1] == wind]
    ratios = [_worst(r[h.index(label)]) / _num(r[h.index("pid")]) for r in rows]
    over = sum(x > goal for x in ratios)
    cells = "payload × wind cell" if wind is None else f"{wind} cell"
    share = "pid's" if goal == 1.0 else f"{goal:g} × pid's"
    return [
        [
            f"{label} RMSE ≤ {share} in every {cells} (mean over training seeds)",
            f"ratio ≤ {goal:g}",
            f"{_max_text(ratios, 'ratio {:.2f}')} ({over} of {len(ratios)} cells above)",
            over == 0,
        ]
    ]


def source_comparison(main: Table) -> Table | None:
    """Measured main table next to the source's [RES §9.1], for the four source trackers."""
    h = main.headers
    ctrls = [c for c in SOURCE_TRACKERS if c in h]
    if not ctrls:
        return None
    body = []
    for r in main.rows:
        src = SOURCE_MAIN.get((r[0], r[1]))
        if src is None:
            continue
        line: list[Any] = [r[0], r[1]]
        for c in ctrls:
            line += [r[h.index(c)], src[SOURCE_TRACKERS.index(c)]]
        body.append(line)
    headers = ["payload", "wind"]
    for c in ctrls:
        headers += [f"{c}", f"{c} (source)"]
    return Table("source_comparison", "Measured vs the source [RES §9.1] (RMSE, m)", headers, body)


#: the run's targets and crash counts next to ``report.md`` (the pipeline's closing lines read it)
OUTCOME_FILE = "outcome.json"


def run_outcome(
    rows: list[dict[str, Any]], checks: list[list[Any]], failed: int = 0
) -> dict[str, Any]:
    """What a reader checks first: every target (met or missed, with its measured value) and the
    diverged runs per controller (training seeds pooled), from flown ``rows``."""
    from residual_quad.evaluation.sweep.rows import diverged_counts

    return {
        "runs": len(rows),
        "failed": failed,
        "diverged": diverged_counts(rows),
        "targets": [
            {"target": a, "goal": b, "measured": c, "met": bool(ok)} for a, b, c, ok in checks
        ],
    }


def outcome_of_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`run_outcome` of raw sweep rows, computed as :func:`write_report` does."""
    pooled = pool_training_seeds(rows)
    tables = make_tables(pooled)
    flown = flown_rows(pooled)
    return run_outcome(flown, target_checks(tables, flown), failed=len(failed_rows(pooled)))


def report_tables(rows: list[dict[str, Any]]) -> dict[str, Table]:
    """:func:`make_tables` of pooled rows with the paired comparisons of the adaptive
    controllers right after the main table."""
    tables = make_tables(rows)
    paired = paired_table(flown_rows(rows))
    if paired is None:
        return tables
    out: dict[str, Table] = {}
    for name, t in tables.items():
        out[name] = t
        if name == "main":
            out["paired"] = paired
    return out if "paired" in out else {**out, "paired": paired}


def write_report(
    rows: list[dict[str, Any]],
    out_dir: str | Path,
    figures: dict[str, Path] | None = None,
    extra_sections: list[str | Callable[[], str]] | None = None,
    title: str = "residual-quad evaluation report",
    beyond_sections: list[str] | None = None,
    beyond_outcome: dict[str, Any] | None = None,
) -> Path:
    """Write ``tables/`` and ``report.md`` into ``out_dir``; returns the report path. Failed
    runs (controller errors) are counted and listed (the ``failures`` table), never averaged.
    ``extra_sections`` go before the tables, ``beyond_sections``
    (:func:`residual_quad.evaluation.report.beyond.beyond_section`) after them; ``beyond_outcome``
    (sweep name → :func:`residual_quad.evaluation.report.beyond.sweep_outcome`) goes into
    ``outcome.json`` as its ``beyond`` entry.

    An extra section may be a callable: it is called once every table and check is computed,
    so a section that times the report stage (the pipeline's) sees all of it."""
    out = Path(out_dir)
    rl = rl_section(rows, figure_dir=out / "figures", link_from=out, notes=information_notes)
    rows = pool_training_seeds(rows)  # one column per RL controller: the mean over seeds
    tables = report_tables(rows)
    flown_labels = list(dict.fromkeys(r["controller"] for r in flown_rows(rows)))
    tables["information"] = information_table(flown_labels)
    write_tables(tables, out / "tables")
    failed = failed_rows(rows)
    rows = flown_rows(rows)
    lines = [f"# {title}", ""]
    n_ctrl = len({r["controller"] for r in rows})
    wall = sum(r.get("wall_time", 0.0) for r in rows)
    lines += [
        f"{len(rows)} closed-loop runs of {n_ctrl} controllers "
        f"(summed run time {wall:.0f} s on {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}). Steady-state metrics are taken after t = 3 s. "
        "Every number below is computed from `rows.jsonl`; the resolved config is saved next to "
        "it.",
        "",
    ]
    if failed:
        lines += [
            f"**{len(failed)} more run(s) failed** (controller errors: an exception or a "
            "non-finite action); they are left out of every number below and listed in the "
            "failed-runs table.",
            "",
        ]
    checks = target_checks(tables, rows)
    outcome = run_outcome(rows, checks, failed=len(failed))
    if beyond_outcome:
        outcome["beyond"] = beyond_outcome
    (out / OUTCOME_FILE).write_text(json.dumps(outcome, indent=1, ensure_ascii=False) + "\n")
    if checks:
        lines += ["## Targets from the source [RES §9]", ""]
        lines += ["| target | goal | measured | |", "|---|---|---|---|"]
        lines += [
            f"| {a} | {b} | {c} | {'met' if ok else '**missed**'} |" for a, b, c, ok in checks
        ]
        lines.append("")
    if rl is not None:
        lines += [rl, ""]
    for section in extra_sections or []:
        lines += [(section if isinstance(section, str) else section()).strip(), ""]
    lines += ["## Tables", ""]
    for name, t in tables.items():
        lines += [t.markdown(), ""]
        if name == "paired":
            lines += [*information_notes([(r[0], r[1]) for r in t.rows]), ""]
        if name == "main":
            lines += [*information_groups(t.headers[2:]), ""]
            cmp_table = source_comparison(t)
            if cmp_table is not None:
                lines += [cmp_table.markdown(), ""]
    for section in beyond_sections or []:
        lines += [section.strip(), ""]
    if figures:
        lines += ["## Figures", ""]
        for name, path in figures.items():
            rel = os.path.relpath(path, out)
            label = name.replace("_", " ")
            lines += [
                f"![{label}]({rel})"
                if rel.endswith(".png") or rel.endswith(".gif")
                else f"[{label}]({rel})",
                "",
            ]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def order_rows(rows: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    """``rows`` (file order = completion order) put in the config's controller order, so tables
    list user labels in config order; the labels come from the saved ``sweep_config.yaml``
    without importing any user code. Rows of labels it does not list keep their place last."""
    from residual_quad.evaluation.sweep.config import CONFIG_FILE

    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return rows
    try:
        saved = configs.read_yaml(path)
    except ValueError:
        return rows
    entries = saved.get("controllers") if isinstance(saved, dict) else None
    if not isinstance(entries, list):
        return rows
    labels = [entry_label(e) for e in entries]
    rank = {lb: i for i, lb in enumerate(labels) if lb is not None}
    return sorted(rows, key=lambda r: rank.get(r.get("controller"), len(rank)))


def report_from_rows(
    run_dir: Path,
    animation: bool = True,
    training: dict | None = None,
    workers: int | None = 1,
) -> Path:
    """Figures and ``report.md`` for a sweep folder, from its ``rows.jsonl`` alone
    (``workers``: processes drawing the figures; ``None``: every core)."""
    from residual_quad.evaluation.report.figures import make_figures
    from residual_quad.evaluation.report.recovery import recovery_section
    from residual_quad.evaluation.sweep.rows import read_rows

    rows = read_rows(run_dir)
    if not rows:
        raise ValueError(f"no rows in {run_dir}; run `rquad sweep --out {run_dir}` first")
    rows = order_rows(rows, Path(run_dir))
    figs = make_figures(
        rows,
        run_dir,
        run_dir / "figures",
        training,
        animation=animation,
        progress=True,
        workers=workers,
    )
    recovery = recovery_section(rows, run_dir, run_dir / "figures")  # runs with events only
    path = write_report(rows, run_dir, figs, extra_sections=[recovery] if recovery else None)
    print(f"report: {path}")
    return path


#: sections of a pipeline's ``report.md`` that rows cannot recompute (its stage timings), kept
#: verbatim by :func:`rewrite_report`
KEPT_SECTIONS = ("## Pipeline",)


def _sections(text: str) -> dict[str, str]:
    """A Markdown report's ``## `` sections by heading line (each with its heading)."""
    out: dict[str, str] = {}
    head = None
    for line in text.splitlines():
        if line.startswith("## "):
            head = line
            out[head] = ""
        if head is not None:
            out[head] += line + "\n"
    return out


def _figure_links(section: str, out: Path) -> dict[str, Path]:
    """The figures a report's ``## Figures`` section links (name → file), in order."""
    figs = {}
    for line in section.splitlines():
        label, _, rest = line.lstrip("!").partition("](")
        if line.startswith(("![", "[")) and rest.endswith(")"):
            figs[label.strip("[").replace(" ", "_")] = out / rest[:-1]
    return figs


def _in_run_order(rows: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    """``rows`` in the order the sweep returned them to the pipeline (its config's expansion;
    the file keeps completion order), so means are summed in the same order, bit for bit."""
    from residual_quad.evaluation.sweep.config import CONFIG_FILE, SweepConfig, expand

    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return order_rows(rows, run_dir)
    rank = {s.run_id: i for i, s in enumerate(expand(configs.load(SweepConfig, path)))}
    return sorted(rows, key=lambda r: rank.get(r["run_id"], len(rank)))


def rewrite_report(out_dir: str | Path) -> Path:
    """Re-render ``report.md`` and ``tables/`` of a pipeline output folder from its rows
    (``sweep/rows.jsonl``; ``beyond/rows.jsonl`` for a "Beyond the source" section) and redraw
    the figures it links that its rows and saved series allow
    (:func:`~residual_quad.evaluation.report.figures.redraw_figures`), keeping the other figures
    and :data:`KEPT_SECTIONS`: a change of the report's format, without flying."""
    from residual_quad.evaluation.report.beyond import (
        BEYOND_DIR,
        beyond_outcome_of,
        beyond_section,
        recovery_names,
        retrained_for_plant,
    )
    from residual_quad.evaluation.report.figures import redraw_figures
    from residual_quad.evaluation.report.lag import lag_extras
    from residual_quad.evaluation.report.recovery import recovery_extras
    from residual_quad.evaluation.sweep.config import CONFIG_FILE
    from residual_quad.evaluation.sweep.rows import read_rows

    out = Path(out_dir)
    sweep = out / "sweep"
    rows = _in_run_order(read_rows(sweep), sweep)
    if not rows:
        raise ValueError(
            f"no rows in {sweep}; out_dir (RUN_DIR of --rewrite) must be a pipeline's output "
            "folder, which holds sweep/rows.jsonl"
        )
    old = _sections((out / "report.md").read_text()) if (out / "report.md").is_file() else {}
    kept = [text for head, text in old.items() if head.startswith(KEPT_SECTIONS)]
    beyond, beyond_record = [], None
    beyond_dir = out / BEYOND_DIR
    beyond_rows = _in_run_order(read_rows(beyond_dir), beyond_dir) if beyond_dir.is_dir() else []
    if beyond_rows:
        head = next((h for h in old if h.startswith("## Beyond the source")), "")
        title = head.partition(": ")[2]
        saved = out / BEYOND_DIR / CONFIG_FILE
        env = configs.read_yaml(saved).get("env", {}) if saved.is_file() else {}
        episodes = {
            configs.read_yaml(d / CONFIG_FILE).get("episode_s")
            for d in (sweep, beyond_dir)
            if (d / CONFIG_FILE).is_file()
        }
        names = recovery_names(out)
        beyond.append(
            beyond_section(
                beyond_rows,
                out,
                title=title,
                plant=env,
                rows_path=f"{BEYOND_DIR}/rows.jsonl",
                extras=[recovery_extras(out, names), lag_extras(out)],
                tables_dir=out / "tables",
                baseline=rows if len(episodes) == 1 else None,  # the same runs only
                retrained=retrained_for_plant(beyond_dir),
            )
        )
        beyond_record = beyond_outcome_of(out)
    figures = _figure_links(old.get("## Figures", ""), out)
    redraw_figures(rows, sweep, out / "figures", figures)  # those its rows and series allow
    return write_report(
        rows,
        out,
        figures,
        extra_sections=kept,
        beyond_sections=beyond,
        beyond_outcome=beyond_record,
    )
