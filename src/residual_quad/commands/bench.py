"""``rquad bench``: micro-benchmarks that print medians and ratios measured side by side."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from residual_quad.commands.argtypes import name_list
from residual_quad.evaluation.bench.sections import ON_REQUEST, SECTIONS, run_bench
from residual_quad.evaluation.bench.timing import format_rows


def _cmd(args: argparse.Namespace) -> int:
    rows = run_bench(args.sections, quick=args.quick)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print(format_rows(rows))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="micro-benchmarks (medians and ratios, one run)")
    p.add_argument(
        "--sections",
        type=name_list(SECTIONS),
        default=None,
        help=f"comma list of {sorted(SECTIONS)}; default: all but {sorted(ON_REQUEST)}",
    )
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--json", action="store_true", help="print rows as JSON")
    p.set_defaults(func=_cmd)
