"""``rquad sweep`` (fly the matrix) and ``rquad report`` (tables, figures, report.md from rows)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from residual_quad import configs
from residual_quad.commands.argtypes import add_event_flag, positive_int, seed_list
from residual_quad.commands.controller_args import add_list_controllers, spec_list
from residual_quad.controllers.specs import resolve_entries
from residual_quad.envs.presets import PRESETS
from residual_quad.evaluation.report.document import order_rows, report_from_rows, rewrite_report
from residual_quad.evaluation.report.tables import focus_tables
from residual_quad.evaluation.sweep.config import SweepConfig, expand
from residual_quad.evaluation.sweep.engine import (
    DEFAULT_BACKEND,
    MAX_BATCH,
    SWEEP_BACKENDS,
    run_sweep,
)
from residual_quad.evaluation.sweep.rows import (
    FAILED_RUNS_EXIT,
    ROWS_FILE,
    failure_summary,
    flown_rows,
    read_rows,
)


def report_failures(command: str, rows: list[dict], out: object) -> int:
    """Print the summary of the failed runs of a finished sweep to stderr; returns the exit
    status: 0 without failures, :data:`FAILED_RUNS_EXIT` with."""
    summary = failure_summary(rows)
    if summary is None:
        return 0
    print(f"rquad {command}: {summary}", file=sys.stderr)
    print(
        f"rquad {command}: the other runs' rows are in {out}; fix the controller, then "
        "--retry-failed flies the failed runs again",
        file=sys.stderr,
    )
    return FAILED_RUNS_EXIT


@functools.lru_cache(maxsize=8)
def run_count(config: str = "sweep") -> int | None:
    """How many runs the sweep config ``config`` (a shipped name or a YAML path) flies, expanded
    as the sweep expands it, without the load-time checks that build controllers (they load PPO
    policies: seconds, and the ``rl`` extra); ``None`` if the file does not parse."""
    try:
        data = configs.read_yaml(configs.resolve(config))
        matrix = {**configs.field_defaults(SweepConfig), **data}
        labels = [spec.label for spec in resolve_entries(matrix["controllers"])]
        return len(expand(SimpleNamespace(**matrix, labels=labels)))  # type: ignore[arg-type]
    except Exception:  # a help text never breaks the command line
        return None


def runs_text(config: str) -> str:
    """``"N runs"`` of the sweep config ``config`` for a help text (its name if it does not
    parse)."""
    n = run_count(config)
    return f"{n} runs" if n is not None else f"the runs of {config}"


def _cmd_sweep(args: argparse.Namespace) -> int:
    overrides = {}
    if args.controllers:
        overrides["controllers"] = args.controllers
    if args.seeds:
        overrides["seeds"] = args.seeds
    if args.preset:
        overrides["env"] = {**configs.load(SweepConfig, args.config).env, "preset": args.preset}
    cfg = configs.load(SweepConfig, args.config, **overrides)
    if args.events:
        cfg = dataclasses.replace(cfg, env={**cfg.env, "events": args.events})
    t0 = time.perf_counter()
    rows = run_sweep(
        cfg,
        args.out,
        resume=args.resume or args.retry_failed,
        backend=args.backend,
        address=args.address,
        workers=args.workers,
        batch_size=args.batch_size,
        retry_failed=args.retry_failed,
    )
    flown = flown_rows(rows)
    div = sum(r["diverged"] for r in flown)
    failed = len(rows) - len(flown)
    print(
        f"{len(rows)} rows in {args.out}/{ROWS_FILE} ({div} diverged, {failed} failed), "
        f"{time.perf_counter() - t0:.1f} s wall"
    )
    if not args.no_report and flown:
        report_from_rows(Path(args.out), animation=False)
    return report_failures("sweep", rows, Path(args.out) / ROWS_FILE)


def add_retry_failed(p: argparse.ArgumentParser) -> None:
    """The ``--retry-failed`` flag of the commands that fly sweeps."""
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="resume, and fly the runs recorded as failed again (plain --resume keeps their "
        "failure rows)",
    )


def _cmd_report(args: argparse.Namespace) -> int:
    if args.rewrite:
        print(f"report: {rewrite_report(Path(args.run_dir))}")
        return 0
    if args.focus:
        rows = order_rows(read_rows(args.run_dir), Path(args.run_dir))
        print(focus_tables(rows, args.focus))
        return 0
    training = {
        k: Path(v)
        for k, v in (
            ("logdir", args.train_logdir),
            ("dataset", args.dataset),
            ("weights", args.weights),
        )
        if v
    }
    report_from_rows(
        Path(args.run_dir),
        animation=not args.no_animation,
        training=training,
        workers=args.workers,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="fly the payload × wind × trajectory × seed matrix")
    p.add_argument(
        "config",
        nargs="?",
        default="sweep",
        help="YAML path or shipped name (sweep, sweep_quick); default: sweep, "
        f"{runs_text('sweep')} (sweep_quick: {runs_text('sweep_quick')})",
    )
    p.add_argument("--out", default="runs/sweep", help="output folder (rows.jsonl, series/)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep finished rows, fly the rest; only with the config the folder was flown with "
        "(workers, backend, series and more matrix entries may differ; docs/reproducibility.md)",
    )
    add_retry_failed(p)
    p.add_argument(
        "--backend",
        choices=SWEEP_BACKENDS,
        default=DEFAULT_BACKEND,
        help=(
            "local: a process pool, one run per job; ray: a Ray cluster; vector: batches of runs "
            f"on the vector env, one per core (same rows to 1e-9). Default: {DEFAULT_BACKEND}"
        ),
    )
    p.add_argument("--address", default=None, help="Ray cluster address (ray backend)")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=MAX_BATCH,
        help=f"most runs per batch of the vector backend (default {MAX_BATCH}; its rows are "
        "written when the batch ends)",
    )
    p.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: all cores)"
    )
    p.add_argument(
        "--controllers",
        type=spec_list,
        default=None,
        help="comma list of controller specs overriding the config's (see --list-controllers)",
    )
    add_list_controllers(p)
    p.add_argument(
        "--seeds", type=seed_list, default=None, help="comma list overriding the config's"
    )
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=None,
        help="fly every run on this named plant (sets env.preset over the config's env; "
        "docs/environment.md)",
    )
    add_event_flag(
        p,
        "an event in every run, replacing the config's env events; rows gain the recovery "
        "columns (docs/recovery.md)",
    )
    p.add_argument("--no-report", action="store_true", help="skip tables/figures/report.md")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("report", help="tables, figures and report.md from a sweep folder")
    p.add_argument("run_dir", help="folder holding rows.jsonl")
    p.add_argument("--train-logdir", default=None, help="residual training TensorBoard run")
    p.add_argument("--dataset", default=None, help="collected dataset (prediction scatter)")
    p.add_argument("--weights", default=None, help="trained residual weights (scatter)")
    p.add_argument("--no-animation", action="store_true", help="skip the rendered GIF")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes drawing the figures (default 1: on 2 cores more are slower, the GIF's "
        "software renderer already uses every core)",
    )
    p.add_argument(
        "--focus",
        default=None,
        metavar="CONTROLLER",
        help="instead: print one controller's per-scenario table and the head-to-head tables",
    )
    p.add_argument(
        "--rewrite",
        action="store_true",
        help="instead: RUN_DIR is a pipeline's output folder; re-render its report.md and "
        "tables/ from sweep/rows.jsonl (and beyond/rows.jsonl), redraw the figures its rows "
        "and saved series allow, and keep the others (training curves, the GIF) and its "
        "Pipeline section",
    )
    p.set_defaults(func=_cmd_report)
