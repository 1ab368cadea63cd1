"""The report's "beyond the source" section: a matrix flown under another plant configuration.

The source's matrix [RES §9] flies an ideal airframe. A sweep flown under another plant (rotor
lag, latency, turbulence, sensor bias, mid-flight events: whatever its ``env`` sets) gets its
own section in ``report.md``, computed from that sweep's rows alone:

- the matrix (RMSE per payload × wind, mean over the tracking trajectories and seeds) with the
  95 % bootstrap interval over seeds on every cell;
- the paired comparisons of the adaptive controllers
  (:mod:`residual_quad.evaluation.report.paired`);
- given the main matrix's rows, each controller's change from them on the same runs;
- the diverged and failed runs;
- the tables and figures other features contribute (:data:`EXTRA_MAKERS`: each maker reads the
  same rows and returns :class:`Extras`, empty when the rows lack what it needs).

It works on any sweep rows. ``rquad pipeline`` flies one by default: the matrix under the
``realistic`` plant preset with 20 seeds (``sweep_realistic_20``), with the recovery table and
figures of the payload-pickup and rotor-fault sweeps passed in as ``extras``
(:func:`residual_quad.evaluation.report.recovery.recovery_extras`; ``docs/statistics.md``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.evaluation.report.paired import paired_table, plant_change_table
from residual_quad.evaluation.report.tables import TRACKING, Table, matrix_table
from residual_quad.evaluation.sweep.rows import diverged_counts, failed_rows, flown_rows, read_rows

SECTION_TITLE = "Beyond the source"
#: the folder (in a pipeline's output) of the "beyond the source" sweep
BEYOND_DIR = "beyond"
#: the folder (in a pipeline's output) holding one folder per recovery sweep of the section
RECOVERY_DIR = "recovery"
#: the folder (in a pipeline's output) holding one sweep folder per plant of the lag sweep
LAG_DIR = "lag"
#: the pipeline's resolved config, in its output folder
PIPELINE_CONFIG_FILE = "pipeline_config.yaml"


@dataclass
class Extras:
    """Tables and figures (label → file) that a feature adds to the section."""

    tables: list[Table] = field(default_factory=list)
    figures: dict[str, Path] = field(default_factory=dict)


#: ``maker(rows, out_dir) -> Extras``: one feature's contribution, from the section's rows
ExtraMaker = Callable[[list[dict[str, Any]], Path], Extras]

#: the makers every section calls (a feature that adds rows columns, e.g. recovery metrics of
#: mid-flight events, appends its table-and-figure maker here)
EXTRA_MAKERS: tuple[ExtraMaker, ...] = ()


def _plant_text(plant: dict[str, Any] | str) -> str:
    if not plant:
        return "the default plant (as the matrix above)"
    if isinstance(plant, str):
        return plant
    return "plant options " + ", ".join(f"`{k}: {v}`" for k, v in plant.items())


def _crash_note(diverged: dict[str, int], retrained: Sequence[str] = ()) -> str:
    """Which crashes are expected: the shipped RL policies' trained on the ideal plant (not
    those of ``retrained``, flown with a policy retrained on the sweep's plant)."""
    rl, other = expected_crashes(diverged, retrained)
    note = ""
    if rl:
        note = (
            f"{', '.join(f'`{c}`' for c in rl)}: shipped RL policies, trained on the ideal plant "
            "(docs/rl_policies.md); their crashes under another plant are expected."
        )
    if other:
        note += f" {', '.join(f'`{c}`' for c in other)}: not expected."
    return note.strip()


def _trajectories(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The tracking trajectories when the rows fly any, else every trajectory they fly."""
    flown = tuple(dict.fromkeys(r["trajectory"] for r in rows))
    tracking = tuple(t for t in TRACKING if t in flown)
    return tracking or flown


def beyond_section(
    rows: list[dict[str, Any]],
    out_dir: str | Path,
    *,
    title: str = "",
    plant: dict[str, Any] | str = "",
    rows_path: str = "",
    extras: Sequence[Extras] = (),
    tables_dir: str | Path | None = None,
    baseline: list[dict[str, Any]] | None = None,
    retrained: Sequence[str] = (),
) -> str:
    """Markdown of the section for ``rows`` (any sweep's rows). ``retrained``: the RL
    controllers flown with a policy retrained on the sweep's plant (their crashes are not
    expected; :func:`retrained_for_plant`). ``plant``: the sweep's ``env``
    options or a sentence; ``rows_path``: where the rows are, as the reader finds them;
    ``extras``: more pieces (added to those of :data:`EXTRA_MAKERS`); figure links are made
    relative to ``out_dir`` (where ``report.md`` lives); ``tables_dir``: also write each table
    as ``beyond_<name>.csv`` there; ``baseline``: the main matrix's rows (flown with the same
    episode length), to show what the other plant changes on the runs both flew."""
    if not rows:
        raise ValueError("rows is empty; fly the sweep first (rquad sweep CONFIG --out DIR)")
    out = Path(out_dir)
    flown = flown_rows(rows)
    failed = failed_rows(rows)
    heading = f"## {SECTION_TITLE}" + (f": {title}" if title else "")
    n_ctrl = len({r["controller"] for r in flown})
    diverged = sum(bool(r["diverged"]) for r in flown)
    lines = [
        heading,
        "",
        f"{len(flown)} runs of {n_ctrl} controllers under {_plant_text(plant)}"
        + (f", from `{rows_path}`" if rows_path else "")
        + f"; {diverged} diverged"
        + (f", {len(failed)} more failed (controller errors, left out)" if failed else "")
        + ". Intervals and paired comparisons as in the tables above (docs/statistics.md).",
        "",
    ]
    trajs = _trajectories(flown)
    tables: list[Table] = []
    matrix = matrix_table(flown, trajectories=trajs, name="matrix")
    if matrix is not None:
        tables.append(matrix)
    paired = paired_table(flown, trajectories=trajs)
    if paired is not None:
        tables.append(paired)
    change = (
        plant_change_table(flown, flown_rows(baseline), trajectories=trajs) if baseline else None
    )
    if change is not None:
        tables.append(change)
    if diverged:
        per = {}
        for r in flown:
            per.setdefault(r["controller"], [0, 0])
            per[r["controller"]][0] += 1
            per[r["controller"]][1] += bool(r["diverged"])
        tables.append(
            Table(
                "divergence",
                "Diverged runs",
                ["controller", "runs", "diverged"],
                [[c, n, d] for c, (n, d) in per.items()],
                note=_crash_note({c: d for c, (_, d) in per.items() if d}, retrained),
            )
        )
    pieces = [maker(rows, out) for maker in EXTRA_MAKERS] + list(extras)
    for piece in pieces:
        tables += piece.tables
    for t in tables:
        lines += [t.markdown(), ""]
    if tables_dir is not None:
        folder = Path(tables_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for t in tables:
            t.to_csv(folder / f"beyond_{t.name}.csv")
    for piece in pieces:
        for label, path in piece.figures.items():
            lines += [f"![{label}]({os.path.relpath(path, out)})", ""]
    return "\n".join(lines).rstrip() + "\n"


def sweep_outcome(rows: list[dict[str, Any]], retrained: Sequence[str] = ()) -> dict[str, Any]:
    """Runs, failed runs and diverged runs per controller of one sweep's rows (the
    ``beyond`` entries of a pipeline's ``outcome.json``), and the controllers flown with a
    policy retrained on the sweep's plant (:func:`retrained_for_plant`) when there are any."""
    flown = flown_rows(rows)
    outcome: dict[str, Any] = {
        "runs": len(flown),
        "failed": len(failed_rows(rows)),
        "diverged": diverged_counts(flown),
    }
    if retrained:
        outcome["retrained"] = list(retrained)
    return outcome


def sweep_name(name: str) -> str:
    """A sweep's short name: a shipped name as is, a YAML path's file stem."""
    return Path(name).stem if Path(name).suffix else name


def _saved_pipeline(out_dir: str | Path) -> dict[str, Any]:
    """The pipeline config saved in a pipeline output folder, as raw YAML (``{}``: none)."""
    path = Path(out_dir) / PIPELINE_CONFIG_FILE
    saved = configs.read_yaml(path) if path.is_file() else {}
    return saved if isinstance(saved, dict) else {}


def recovery_names(out_dir: str | Path) -> list[str] | None:
    """The recovery sweeps a pipeline output folder's saved config names (short names, in its
    order), ``None`` when it names none (then every ``recovery/*/`` folder counts)."""
    names = _saved_pipeline(out_dir).get("recovery")
    return [sweep_name(str(n)) for n in names] if isinstance(names, list) else None


def beyond_outcome_of(out_dir: str | Path) -> dict[str, Any]:
    """``outcome.json``'s ``beyond`` entry from the rows of a pipeline output folder: runs,
    failed and diverged runs of the ``beyond/`` sweep (under its name in the saved pipeline
    config), of each recovery sweep and of each plant of the lag sweep (``lag/<plant>``); ``{}``
    without a ``beyond/`` sweep."""
    out = Path(out_dir)
    rows = read_rows(out / BEYOND_DIR)
    if not rows:
        return {}
    name = _saved_pipeline(out).get("beyond")
    outcome = sweep_outcome(rows, retrained_for_plant(out / BEYOND_DIR))
    record = {sweep_name(str(name)) if name else BEYOND_DIR: outcome}
    folder = out / RECOVERY_DIR
    names = recovery_names(out)
    if names is None:
        names = sorted(d.name for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
    for n in names:
        rows = read_rows(folder / n)
        if rows:
            record[n] = sweep_outcome(rows, retrained_for_plant(folder / n))
    lag = out / LAG_DIR
    for d in sorted(lag.iterdir()) if lag.is_dir() else []:
        rows = read_rows(d)
        if rows:
            record[f"{LAG_DIR}/{d.name}"] = sweep_outcome(rows, retrained_for_plant(d))
    return record


def expected_crashes(
    diverged: dict[str, int], retrained: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """``diverged``'s controllers split into shipped RL policies trained on the ideal plant
    (their crashes on another plant are expected) and the others, ``retrained`` among them —
    the RL controllers flown with a policy retrained on the sweep's plant (not expected)."""
    from residual_quad.evaluation.report.rl_seeds import training_seed

    rl = [c for c in diverged if training_seed(c) is not None and c not in retrained]
    return rl, [c for c in diverged if c not in rl]


def plant_matched(
    controllers: Sequence[str], env: dict[str, Any] | None, options: dict[str, Any] | None
) -> list[str]:
    """The ``controllers`` whose ``options`` fly a policy retrained on the plant of ``env``
    (``plant`` option equal to its ``preset``: ``ppo: {plant: realistic}``)."""
    preset = (env or {}).get("preset")
    options = options or {}
    return sorted(
        c
        for c in controllers
        if preset and isinstance(options.get(c), dict) and options[c].get("plant") == preset
    )


def retrained_for_plant(sweep_dir: str | Path) -> list[str]:
    """:func:`plant_matched` of a sweep folder's saved config (``[]`` without one)."""
    from residual_quad.evaluation.sweep.config import CONFIG_FILE

    path = Path(sweep_dir) / CONFIG_FILE
    saved = configs.read_yaml(path) if path.is_file() else {}
    if not isinstance(saved, dict):
        return []
    controllers = saved.get("controllers") or []
    return plant_matched(controllers, saved.get("env"), saved.get("controller_options"))
