"""``rquad stress``: stress scenarios and the nominal hnewton comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.commands.argtypes import episode_seconds, positive_int, seed_list
from residual_quad.commands.controller_args import add_list_controllers, spec_list
from residual_quad.commands.sweep import add_retry_failed, report_failures
from residual_quad.evaluation.studies.stress import (
    StressConfig,
    format_nominal,
    format_table,
    nominal_comparison,
    plot_stress,
    run_stress,
    summarize,
    survival_check,
)
from residual_quad.evaluation.sweep.rows import FAILED_RUNS_EXIT, ROWS_FILE


def _cmd(args: Any) -> int:
    if args.nominal:
        return _cmd_nominal(args)
    cfg = configs.load(StressConfig, args.config)
    if args.controllers:
        cfg.controllers = list(args.controllers)
    if args.seeds:
        cfg.seeds = args.seeds
    if args.scenarios:
        wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        known = [s.name for s in cfg.scenarios]
        bad = [w for w in wanted if w not in known]
        if bad:
            raise ValueError(f"unknown scenario(s) {bad}; valid: {', '.join(known)}")
        cfg.scenarios = [s for s in cfg.scenarios if s.name in wanted]
    if args.episode_s is not None:
        cfg.episode_s = args.episode_s
    cfg = StressConfig(
        cfg.controllers, cfg.seeds, cfg.episode_s, cfg.controller_options, cfg.scenarios
    )  # re-validate the overridden labels
    out = Path(args.out)
    rows, series = run_stress(
        cfg,
        out,
        resume=args.resume or args.retry_failed,
        workers=args.workers,
        progress=not args.quiet,
        retry_failed=args.retry_failed,
    )
    summary = summarize(rows)
    table = format_table(summary)
    (out / "stress.md").write_text(table + "\n", encoding="utf-8")
    with open(out / "summary.json", "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    print(table)
    if not args.no_plot:
        paths = plot_stress(summary, series, out)
        print("figures:", ", ".join(str(p) for p in paths))
    for cand in dict.fromkeys(s["controller"] for s in summary):
        if cand.startswith("hnewton"):
            chk = survival_check(summary, "geo", cand)
            met = not (chk["crashed_or_flipped"] or chk["lost"])
            print(f"where geo crashes/flips, {cand}: {'survives all' if met else chk}")
    return report_failures("stress", rows, out / ROWS_FILE)


def _cmd_nominal(args: Any) -> int:
    labels = list(args.controllers or []) or [
        "geo_rls",
        "hnewton_rls",
    ]
    if len(labels) != 2:
        raise ValueError("--nominal compares exactly two controllers (reference first)")
    seeds = tuple(args.seeds) if args.seeds else (0, 1, 2)
    options = {lb: {"weights": args.weights} for lb in labels if "rls" in lb or "res" in lb}
    pair = (labels[0], labels[1])
    cells = nominal_comparison(
        pair,
        seeds=seeds,
        options=options if args.weights else None,
        episode_s=float(args.episode_s or 20.0),
        progress=not args.quiet,
    )
    table = format_nominal(cells, pair)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nominal.md").write_text(table + "\n", encoding="utf-8")
    with open(out / "nominal.json", "w", encoding="utf-8") as fh:
        json.dump(cells, fh, indent=2)
    print(table)
    failed = sum(v for c in cells for k, v in c.items() if k.endswith("_failed"))
    if failed:
        print(f"rquad stress: {failed} runs failed (controller errors)", file=sys.stderr)
        return FAILED_RUNS_EXIT
    return 0


def register(sub: Any) -> None:
    """Add the ``stress`` subcommand."""
    p = sub.add_parser("stress", help="stress scenarios: 90° yaw start, beyond-envelope, gusts")
    p.add_argument("config", nargs="?", default="stress", help="YAML path or shipped name")
    p.add_argument(
        "--controllers",
        type=spec_list,
        default=None,
        help="comma list of controller specs, e.g. geo,hnewton,hnewton:gn (see --list-controllers)",
    )
    add_list_controllers(p)
    p.add_argument("--scenarios", default="", help="comma list of scenario names (default: all)")
    p.add_argument(
        "--seeds", type=seed_list, default=None, help="comma list of seeds (default: the config's)"
    )
    p.add_argument(
        "--episode-s",
        dest="episode_s",
        type=episode_seconds,
        default=None,
        help="episode length, s",
    )
    p.add_argument("--out", default="runs/stress", help="output folder (rows, table, figures)")
    p.add_argument("--no-plot", action="store_true", help="skip the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep finished rows, fly the rest; only with the config the folder was flown with "
        "(more seeds, controllers or scenarios may be added)",
    )
    add_retry_failed(p)
    p.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: all cores)"
    )
    p.add_argument(
        "--nominal",
        action="store_true",
        help="instead: main-table cells (payload × wind; helix + figure8 × seeds) of two "
        "controllers, default geo_rls vs hnewton_rls",
    )
    p.add_argument("--weights", default="", help="(--nominal) residual weights for *_rls/*_res")
    p.set_defaults(func=_cmd)
