"""The ``rquad`` command line.

Each subcommand lives in :mod:`residual_quad.commands` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (called with the parsed namespace, returns an exit code). Adding a
command is one line in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "residual_quad.commands.eval",  # demo, eval
    "residual_quad.commands.sweep",  # sweep, report
    "residual_quad.commands.pipeline",  # pipeline
    "residual_quad.commands.bench",  # bench
    "residual_quad.commands.train",  # collect, train
    "residual_quad.commands.stick",  # stick
    "residual_quad.commands.stress",  # stress
)


def _headless_gl() -> None:
    """Render off-screen (EGL) unless the user chose a GL backend or has a display."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


def build_parser() -> argparse.ArgumentParser:
    """Build the ``rquad`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="rquad",
        description="residual-quad: quadrotor control under unmodelled disturbances",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rquad`` console script."""
    _headless_gl()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:
        print(f"rquad {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
