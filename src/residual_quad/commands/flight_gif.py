"""``--gif PATH`` of ``rquad eval`` and ``rquad demo``: the flight of one controller as an animated
GIF, rendered by the report's flight animation (:func:`residual_quad.evaluation.report.animation.
flight_animation`, MuJoCo off-screen)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from residual_quad.commands.argtypes import ensure_folder
from residual_quad.controllers.specs import resolve_entries

#: how to get an OpenGL context without a display, said when rendering fails
GL_HINT = (
    "rendering needs OpenGL: install EGL (libegl1) or OSMesa (libosmesa6), or set MUJOCO_GL=egl "
    "(or MUJOCO_GL=osmesa) where that library is installed"
)


@dataclass(frozen=True)
class GifPlan:
    """What ``--gif`` renders: the spec text of the chosen controller, its label and the file."""

    spec: str
    label: str
    path: Path


def add_gif_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--gif PATH`` and ``--gif-controller LABEL``."""
    parser.add_argument(
        "--gif",
        metavar="PATH",
        type=Path,
        default=None,
        help="also render the flight of the first controller (or --gif-controller) as an "
        "animated GIF at PATH, 10 frames/s (needs OpenGL: MUJOCO_GL=egl or osmesa without a "
        "display; renders seed 0 from the nominal start)",
    )
    parser.add_argument(
        "--gif-controller",
        metavar="LABEL",
        default=None,
        help="the flown controller the GIF shows, by its spec or label (default: the first)",
    )


def plan_gif(args: argparse.Namespace, names: list[str]) -> GifPlan | None:
    """Check ``--gif`` before anything is flown: the chosen controller is one of ``names``, the
    scenario is one the renderer flies, and PATH's folder exists (created) and is writable.
    ``None`` without ``--gif``; a ``ValueError`` naming the argument otherwise."""
    if args.gif is None:
        if args.gif_controller is not None:
            raise ValueError("--gif-controller chooses the controller of --gif: give --gif PATH")
        return None
    unsupported = [
        flag
        for flag, given in (
            (f"--seed {args.seed}", args.seed != 0),
            (f"--yaw-offset {args.yaw_offset:g}", args.yaw_offset != 0),
            ("--no-ground-effect", args.no_ground_effect),
            (f"--preset {getattr(args, 'preset', None)}", getattr(args, "preset", None)),
            (
                f"--turbulence {getattr(args, 'turbulence', None)}",
                getattr(args, "turbulence", None),
            ),
            (f"--remote {getattr(args, 'remote', None)}", getattr(args, "remote", None)),
        )
        if given
    ]
    if unsupported:
        raise ValueError(
            f"--gif renders a local flight of seed 0 from the nominal start with ground effect, "
            f"so it would not show the flight of {', '.join(unsupported)}: drop one or the other"
        )
    specs = resolve_entries(names)
    index = 0
    if args.gif_controller is not None:
        chosen = args.gif_controller.strip()
        found = [
            i for i, (n, s) in enumerate(zip(names, specs, strict=True)) if chosen in (n, s.label)
        ]
        if not found:
            labels = ", ".join(s.label for s in specs)
            raise ValueError(
                f"--gif-controller {args.gif_controller!r} is not flown here; flown: {labels}"
            )
        index = found[0]
    path = Path(args.gif)
    if path.is_dir():
        raise ValueError(
            f"--gif {path}: is a folder; give a file name such as {path / 'flight.gif'}"
        )
    ensure_folder(f"--gif {path}", path.parent)
    return GifPlan(names[index], specs[index].label, path)


def write_gif(args: argparse.Namespace, plan: GifPlan) -> Path:
    """Fly ``plan``'s controller on the scenario of ``args`` with rendering and write the GIF to
    ``plan.path`` (replaced atomically); a ``ValueError`` with :data:`GL_HINT` if nothing renders
    here."""
    from residual_quad.evaluation.report.animation import flight_animation

    said = io.StringIO()
    with (
        tempfile.TemporaryDirectory(dir=plan.path.parent, prefix=".rquad-gif-") as tmp,
        contextlib.redirect_stdout(said),  # its "skipped" message becomes our error line
        warnings.catch_warnings(),  # e.g. GLFW's, when no display is there
    ):
        warnings.simplefilter("ignore")
        made = flight_animation(
            Path(tmp),
            [plan.spec],
            payload=args.payload,
            wind=args.wind,
            trajectory=args.trajectory,
            seconds=args.episode_s,
        )
        if made is None:
            said_text = " ".join(said.getvalue().split())
            reason = said_text.removeprefix("flight animation skipped: ") or "rendering failed"
            gl = os.environ.get("MUJOCO_GL")
            gl = "MUJOCO_GL unset" if gl is None else f"MUJOCO_GL={gl}"
            raise ValueError(f"--gif: nothing rendered with {gl} ({reason}); {GL_HINT}")
        try:
            os.replace(made, plan.path)
        except OSError as exc:
            raise ValueError(
                f"--gif {plan.path}: cannot write it ({exc.strerror or exc})"
            ) from None
    return plan.path
