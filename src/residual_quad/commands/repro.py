"""``rquad repro``: do the committed result rows reproduce on this machine, and how sensitive are
they to the last bits of floating-point arithmetic (``docs/reproducibility.md``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from residual_quad.commands.argtypes import name_list, positive_int


def _check(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from residual_quad.evaluation.studies import reproduce as r
    from residual_quad.numerics import fingerprint

    sens = r.read_sensitivity()
    keys = [(k, run_id) for k in r.KINDS for run_id in r.sample(k)]
    print(f"numerics here: {fingerprint()}")
    failed = 0
    for kind, run_id in tqdm(keys, desc="re-fly committed rows", unit="run", leave=False):
        exact = r.same_numerics(kind)
        row = r.refly(kind, run_id)
        bad = r.compare(row, r.committed_row(kind, run_id), sens.get(f"{kind}|{run_id}"), exact)
        mode = "bit for bit" if exact else "within tolerance"
        verdict = "ok" if not bad else "DIFFERS: " + "; ".join(bad)
        tqdm.write(f"{kind:6s} {run_id:45s} {mode:16s} {verdict}")
        failed += bool(bad)
    print(f"{len(keys) - failed} of {len(keys)} sampled rows reproduce")
    return 1 if failed else 0


def _sensitivity(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from residual_quad.evaluation.studies import reproduce as r

    n = sum(len(r.sample(k)) for k in r.KINDS)
    with tqdm(total=n, desc="jittered re-flights", unit="row") as bar:

        def step(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update()

        r.write_sensitivity(Path(args.out), args.flights, progress=step)
    print(f"wrote {Path(args.out) / 'sensitivity.json'}")
    return 0


def _kernels(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from residual_quad.evaluation.studies import reproduce as r

    variants = r.variants(args.kernels)
    with tqdm(total=len(variants), desc="numerics variants", unit="variant") as bar:

        def step(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update()

        report = r.kernel_drift(args.kernels, progress=step)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_drift.json").write_text(json.dumps(report, indent=1) + "\n")
    table = r.drift_markdown(report)
    (out / "kernel_drift.md").write_text(table + "\n")
    print(table)
    print(f"wrote {out / 'kernel_drift.json'} and {out / 'kernel_drift.md'}")
    bad = [
        row["key"]
        for v in report["variants"].values()
        for row in v.get("rows", [])
        if row["mismatches"]
    ]
    return 1 if bad else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``repro`` subcommand."""
    from residual_quad.evaluation.studies.reproduce import (
        DEFAULT_JITTER_FLIGHTS,
        DEFAULT_KERNELS,
        X86_KERNELS,
    )

    p = sub.add_parser(
        "repro",
        help="do the committed result rows reproduce here; their sensitivity to the last bit",
        description=(
            "Re-fly the sampled committed rows (docs/results/sweep, docs/stress) and judge them: "
            "bit for bit on the numerics that made them, within each row's measured sensitivity "
            "elsewhere. Needs a clone of the repository (the rows live in docs/)."
        ),
    )
    what = p.add_subparsers(dest="target", metavar="WHAT", help="what to do")
    what.required = True
    c = what.add_parser("check", help="re-fly the sample here; exit 1 if a row does not reproduce")
    c.set_defaults(func=_check)
    s = what.add_parser(
        "sensitivity",
        help="measure each sampled row's spread under one-ulp action jitter",
    )
    s.add_argument(
        "--flights",
        type=positive_int,
        default=DEFAULT_JITTER_FLIGHTS,
        help=f"jittered re-flights per row (default {DEFAULT_JITTER_FLIGHTS})",
    )
    s.add_argument(
        "--out",
        default="outputs/repro",
        help="folder for sensitivity.json (the committed one: docs/results/reproducibility)",
    )
    s.set_defaults(func=_sensitivity)
    k = what.add_parser(
        "kernels",
        help="re-fly the sample under every OpenBLAS kernel family this CPU runs, and AVX2 numpy",
    )
    k.add_argument(
        "--kernels",
        type=name_list(X86_KERNELS),
        default=list(DEFAULT_KERNELS),
        help=f"comma list of OpenBLAS kernel families, of {','.join(X86_KERNELS)} "
        f"(default: {','.join(DEFAULT_KERNELS)}); one this CPU cannot run is reported as such",
    )
    k.add_argument("--out", default="outputs/repro", help="folder for kernel_drift.json/.md")
    k.set_defaults(func=_kernels)
