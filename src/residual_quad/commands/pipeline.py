"""``rquad pipeline``: collect → train → evaluate → tables/figures → ``report.md``."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from residual_quad import configs
from residual_quad.commands.argtypes import nonneg_int
from residual_quad.commands.sweep import add_retry_failed, report_failures, runs_text
from residual_quad.evaluation.studies.pipeline import (
    QUICK,
    REGENERATE,
    PipelineConfig,
    is_committed_run,
    record_outcome,
    run_pipeline,
)
from residual_quad.evaluation.sweep.rows import ROWS_FILE, read_rows


def _cmd(args: argparse.Namespace) -> int:
    base = QUICK if args.quick else PipelineConfig()
    if args.config:
        base = configs.load(PipelineConfig, args.config)
    if args.workers is not None:
        base = dataclasses.replace(base, workers=args.workers)
    if args.no_animation:
        base = dataclasses.replace(base, animation=False)
    if args.record_outcome and not is_committed_run(base):
        raise ValueError(
            "--record-outcome records the committed run's outcome: only the default pipeline "
            "(no --quick, no --config) records it"
        )
    run_pipeline(
        base, args.out, resume=args.resume or args.retry_failed, retry_failed=args.retry_failed
    )
    if args.record_outcome:
        print(f"recorded the committed outcome: {record_outcome(args.out)}")
    rows_file = Path(args.out) / "sweep" / ROWS_FILE
    return report_failures("pipeline", read_rows(rows_file), rows_file)


def register(sub: argparse._SubParsersAction) -> None:
    full, quick = PipelineConfig(), QUICK
    p = sub.add_parser(
        "pipeline",
        help="collect → train → evaluate → report.md, one command",
        description=f"Collect the residual dataset, train the network, fly the {full.sweep} "
        f"matrix ({runs_text(full.sweep)}), and beyond the source the {full.beyond} matrix "
        f"({runs_text(full.beyond)}) and the recovery sweeps "
        + ", ".join(f"{n} ({runs_text(n)})" for n in full.recovery)
        + f" and the {full.lag} matrix ({runs_text(full.lag)}) on each of "
        f"{len(full.lag_rotor_tau_s) * len(full.lag_latency_steps)} rotor-lag × latency plants"
        + f", and write report.md with tables and figures. Regenerating the committed results: "
        f"{REGENERATE}.",
    )
    p.add_argument("--out", default="outputs/pipeline", help="output folder")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke profile: the {quick.sweep} matrix ({runs_text(quick.sweep)}), a smaller "
        f"dataset, {quick.train_overrides.get('epochs', 'all')} training epochs, a few runs "
        "beyond the source; about a minute on 2 cores",
    )
    p.add_argument("--config", default=None, help="PipelineConfig YAML (overrides --quick)")
    p.add_argument(
        "--workers", type=nonneg_int, default=None, help="processes (default 0: every core)"
    )
    p.add_argument(
        "--resume", action="store_true", help="reuse finished stages and rows (of the same config)"
    )
    add_retry_failed(p)
    p.add_argument("--no-animation", action="store_true", help="skip the rendered GIF")
    p.add_argument(
        "--record-outcome",
        action="store_true",
        help="after the default pipeline, write its targets and diverged runs (beyond the "
        "source included) as the committed expectation, evaluation/studies/committed_outcome.json: "
        "for regenerating docs/results",
    )
    p.set_defaults(func=_cmd)
