"""The ``rquad`` command line.

Each subcommand lives in :mod:`residual_quad.commands` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (called with the parsed namespace, returns an exit code). Adding a
command is one line in ``COMMAND_MODULES``.

Errors: a user error (a bad argument, a bad value or file, a missing optional dependency, an
unwritable output folder) ends with exit code 2 and exactly one line on stderr,
``rquad <command>: error: <what>``; argparse's own errors take the same one-line form. Anything
else is a bug and keeps its traceback. ``--debug`` (or ``RQUAD_DEBUG=1``) re-raises user errors
too, with their traceback.

OpenGL: the command line never sets ``MUJOCO_GL``. Commands that render nothing never load a GL
library; a command that renders (a GIF) gets its context from :mod:`residual_quad.envs.rendering`,
which picks EGL or OSMesa itself on a headless machine and says what to install when neither loads.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import yaml

COMMAND_MODULES: tuple[str, ...] = (
    "residual_quad.commands.eval",  # demo, eval
    "residual_quad.commands.sweep",  # sweep, report
    "residual_quad.commands.pipeline",  # pipeline
    "residual_quad.commands.bench",  # bench
    "residual_quad.commands.train",  # collect, train
    "residual_quad.commands.ablate",  # ablate
    "residual_quad.commands.tune",  # tune
    "residual_quad.commands.stick",  # stick
    "residual_quad.commands.stress",  # stress
    "residual_quad.commands.serve",  # serve
    "residual_quad.commands.repro",  # repro
)


def _gl_error() -> str | None:
    """Why MuJoCo cannot start with the ``MUJOCO_GL`` in the environment (a bad value, or a
    backend whose library is missing: MuJoCo fails at import), else ``None``."""
    gl = os.environ.get("MUJOCO_GL")
    if gl is None:
        return None
    try:
        import mujoco  # noqa: F401
    except Exception as exc:  # an unknown value or a missing library, at import
        return (
            f"MuJoCo cannot start with MUJOCO_GL={gl} ({type(exc).__name__}: {one_line(exc)}); "
            "set MUJOCO_GL=egl or MUJOCO_GL=osmesa where that library is installed, or unset it"
        )
    return None


#: exceptions that report a user error (bad value, file, dependency or folder), not a bug
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    OSError,
    ImportError,
    yaml.YAMLError,
)


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line, ``<prog>: error: <what>`` (exit code 2);
    sub-parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: object) -> str:
    """``text`` with its lines joined (an error message must stay on one line)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _is_user_error(exc: BaseException) -> bool:
    if isinstance(exc, ImportError) and (exc.name or "").startswith("residual_quad"):
        return False  # our own module failed to import: a bug, keep the traceback
    gym_error = sys.modules.get("gymnasium.error")  # e.g. a negative seed given to the env
    if gym_error is not None and isinstance(exc, gym_error.Error):
        return True
    return isinstance(exc, USER_ERRORS)


def _debug(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("RQUAD_DEBUG", "") not in (
        "",
        "0",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the ``rquad`` parser with every registered subcommand."""
    parser = Parser(
        prog="rquad",
        description="residual-quad: quadrotor control under unmodelled disturbances",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of user errors too (also: RQUAD_DEBUG=1)",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="rquad COMMAND --help describes each"
    )
    sub.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rquad`` console script."""
    gl_error = _gl_error()  # MUJOCO_GL is the user's: only rendering picks a backend itself
    if gl_error is not None:
        debug = "--debug" in (sys.argv[1:] if argv is None else argv)
        if debug or os.environ.get("RQUAD_DEBUG", "") not in ("", "0"):
            import mujoco  # noqa: F401  (raises again, with its traceback)
        print(f"rquad: error: {gl_error}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _debug(args) or not _is_user_error(exc):
            raise
        command = " ".join(str(c) for c in (args.command, getattr(args, "target", None)) if c)
        what = one_line(exc) or type(exc).__name__
        print(f"rquad {command}: error: {what}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
