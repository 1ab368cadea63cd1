"""``rquad ablate``: the RL policies' design elements on and off at equal budget."""

from __future__ import annotations

import argparse
from pathlib import Path

from residual_quad.commands.argtypes import positive_int, seed_list
from residual_quad.evaluation.studies import ablation, ablation_report

DEFAULT_OUT = Path("runs/ablation")


def _cmd(args: argparse.Namespace) -> int:
    cfg = ablation.load(args.config, steps=args.steps)
    out = Path(args.out)
    only = [n.strip() for n in args.variants.split(",") if n.strip()] if args.variants else None
    if args.table_only:
        rows = ablation.write_rows(cfg, out)
    else:
        rows = ablation.run_ablation(
            cfg, out, progress=not args.no_progress, only=only, seeds=args.seeds
        )
    flights = len(cfg.run_config(cfg.variants[0], cfg.seeds[0]).eval_scenarios)
    print(ablation_report.write_report(rows, out, flights), end="")
    print(f"table: {out / ablation_report.TABLE_FILE}, figure: {out / ablation_report.FIGURE_FILE}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ablate",
        help="train the RL design variants × seeds at equal budget and tabulate them",
        description=(
            "Train every variant of an ablation config with every seed for the same number of "
            "policy steps (missing runs only: finished ones are kept, interrupted ones resume), "
            "then write ablation_rows.json, ablation.md and ablation.png under --out. Several "
            "processes may share one --out (one per core): each skips the runs another holds."
        ),
    )
    p.add_argument("config", nargs="?", default="ablation", help="YAML path or shipped name")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder (default: {DEFAULT_OUT})")
    p.add_argument("--variants", default=None, help="comma list: train only these variants")
    p.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        help="comma list: train these training seeds of every variant (also seeds a variant "
        "does not list); the table keeps every finished run",
    )
    p.add_argument("--steps", type=positive_int, default=None, help="policy steps (override)")
    p.add_argument(
        "--table-only", action="store_true", help="train nothing: tabulate the finished runs"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd)
