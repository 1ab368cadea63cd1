"""The ``--controller(s)`` argument shared by ``eval``, ``sweep`` and ``stress``: a comma list of
controller specs (grammar in ``docs/controllers.md``), and ``--list-controllers``."""

from __future__ import annotations

import argparse
from typing import Any

from residual_quad.controllers.specs import controller_listing, split_specs


def spec_list(text: str) -> list[str]:
    """A ``type=`` function: a comma list of controller specs (``geo:kp=15,kd=8,pid``)."""
    try:
        return split_specs(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class ListControllers(argparse.Action):
    """``--list-controllers``: print every registered and plugin controller, then exit 0."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "list the registered and plugin controllers, then exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(controller_listing())
        parser.exit(0)


def add_list_controllers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--list-controllers", action=ListControllers)
