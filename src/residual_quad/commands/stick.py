"""``rquad stick``: run a stick-robot scenario with the hierarchical Newton variants."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from residual_quad.commands.argtypes import ensure_folder


def _cmd(args: argparse.Namespace) -> int:
    from residual_quad.controllers.prioritized import METHODS
    from residual_quad.evaluation.studies.stick.study import (
        format_report,
        load_scenario,
        plot_runs,
        run_scenario,
    )

    if args.json:  # a bad output path is refused before the study runs
        ensure_folder(f"--json {args.json}", Path(args.json).parent)
    if args.plot:
        ensure_folder(f"--plot {args.plot}", args.plot)
    scn = load_scenario(args.scenario)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    if methods is not None:
        bad = [m for m in methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown method(s) {bad}; valid: {list(METHODS)}")
    overrides = {"backend": args.backend} if args.backend else {}
    report, runs = run_scenario(scn, methods, **overrides)
    print(format_report(report))
    if args.plot:
        import numpy as np

        paths = plot_runs(scn, runs, np.asarray(report["optimum"]), args.plot)
        report["plots"] = [str(p) for p in paths]
        print("plots:", ", ".join(report["plots"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
        print("json:", args.json)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``stick`` subcommand."""
    p = sub.add_parser(
        "stick",
        help="hierarchical Newton study on planar stick robots (GN / LM / BFGS / Newton)",
    )
    p.add_argument(
        "scenario", help="scenario YAML path, or a shipped name (s1, s2, s3, s4_dynamic)"
    )
    p.add_argument("--methods", default="", help="comma list of gn,lm,bfgs,newton (default: all)")
    p.add_argument("--json", default="", help="write the report as JSON to this file")
    p.add_argument("--plot", default="", help="write PNG plots into this folder")
    p.add_argument("--backend", default="", choices=["", "daqp", "numpy"], help="HLSP backend")
    p.set_defaults(func=_cmd)
