"""Argument types shared by the subcommands: argparse ``type=`` functions that refuse bad values
at parse time (one ``rquad <command>: error: ...`` line, exit code 2) instead of deep in a run."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

#: shortest episode the CLI flies, s: one control period at the default 100 Hz
MIN_EPISODE_S = 0.01
#: longest episode the CLI flies, s (an episode preallocates its time series)
MAX_EPISODE_S = 3600.0


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """A finite float (``nan``/``inf`` refused)."""
    return _number(text)


def nonneg_float(text: str) -> float:
    """A finite float >= 0."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def episode_seconds(text: str) -> float:
    """An episode length in s, between :data:`MIN_EPISODE_S` and :data:`MAX_EPISODE_S`."""
    value = _number(text)
    if not MIN_EPISODE_S <= value <= MAX_EPISODE_S:
        raise argparse.ArgumentTypeError(
            f"episode length must be between {MIN_EPISODE_S:g} s (one control period) and "
            f"{MAX_EPISODE_S:g} s, got {text!r}"
        )
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def nonneg_int(text: str) -> int:
    """An integer >= 0 (seeds; ``--workers 0`` = every core)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (epochs, steps, processes)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def seed_list(text: str) -> list[int]:
    """A comma list of distinct seeds >= 0 (``0,1,2``); a repeated seed would fly a run twice."""
    items = [s.strip() for s in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma list of seeds, got {text!r}")
    seeds = [nonneg_int(s) for s in items]
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise argparse.ArgumentTypeError(f"duplicate seed(s) {dup} in {text!r}")
    return seeds


def name_list(valid: Iterable[str]) -> Callable[[str], list[str]]:
    """A ``type=`` function for a comma list of distinct names from ``valid``."""
    choices = list(valid)

    def parse(text: str) -> list[str]:
        names = [s.strip() for s in text.split(",")]
        if not all(names):
            raise argparse.ArgumentTypeError(f"expected a comma list, got {text!r}")
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown name(s) {bad}; valid choices: {', '.join(choices)}"
            )
        if len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"a name is repeated in {text!r}")
        return names

    return parse


def ensure_folder(what: str, folder: str | Path) -> Path:
    """Create ``folder`` (and its parents) for an output; a ``ValueError`` starting with ``what``
    (the argument, e.g. ``"--json out/r.json"``) names what blocks it: a file on the way, a
    refused permission. Commands call it before they work, so a bad path costs nothing."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            why = f"{blocker} is a file, not a folder"
        else:
            why = f"{exc.strerror or exc}: {exc.filename or folder}"
        raise ValueError(f"{what}: cannot create the folder {folder} ({why})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: the folder {folder} is not writable")
    return folder


def remote_address(text: str) -> str:
    """A simulation server's ``HOST:PORT`` (``[IPV6]:PORT``; a bare host takes the default
    port), checked at parse time; returned as given."""
    from residual_quad.remote.client import parse_address

    try:
        parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def event_arg(text: str) -> dict:
    """One scenario event, ``KIND:FIELD=VALUE,...`` (``payload:t_s=5,mass_kg=0.5``,
    ``wind:t_s=5,mean_mps=3/0/0,rise_s=1``, ``rotor:t_s=5,rotor=0,efficiency=0.7``; a vector's
    entries separated by ``/``), checked as the env checks it (:mod:`residual_quad.envs.events`);
    a field given twice is refused (it would silently keep the last)."""
    from residual_quad.envs.events import EVENT_KINDS, parse_event

    kind, _, rest = text.partition(":")
    spec: dict = {"kind": kind}
    try:
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"expected FIELD=VALUE, got {item!r}")
            if key == "kind":
                raise ValueError("the kind goes before the ':', not in a kind=... field")
            if key in spec:
                raise ValueError(f"field {key!r} is given twice")
            if "/" in value:
                spec[key] = tuple(float(v) for v in value.split("/"))
            elif key == "rotor":
                spec[key] = int(value)
            else:
                spec[key] = float(value)
        parse_event(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"bad event {text!r}: {exc} (form KIND:FIELD=VALUE,..., KIND one of "
            f"{', '.join(EVENT_KINDS)})"
        ) from None
    return spec


EVENT_FORMS = (
    "payload:t_s=5,mass_kg=0.5, wind:t_s=5,mean_mps=3/0/0,rise_s=1, "
    "rotor:t_s=5,rotor=0,efficiency=0.7"
)
"""One example of each event kind, as ``--event`` takes them (the help texts name them)."""


def add_event_flag(p: argparse.ArgumentParser, what: str) -> None:
    """The repeatable ``--event KIND:FIELD=VALUE,...`` flag (:func:`event_arg`) into
    ``args.events``; ``what`` says what the events apply to (the start of the help text)."""
    p.add_argument(
        "--event",
        dest="events",
        action="append",
        type=event_arg,
        default=None,
        help=f"{what}, repeatable: {EVENT_FORMS}",
    )
