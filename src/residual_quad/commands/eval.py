"""``rquad eval`` and ``rquad demo``: fly controllers on one scenario and print the metrics."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from residual_quad.commands.argtypes import (
    add_event_flag,
    ensure_folder,
    episode_seconds,
    finite_float,
    nonneg_int,
    remote_address,
)
from residual_quad.commands.controller_args import add_list_controllers, spec_list
from residual_quad.commands.flight_gif import add_gif_args, plan_gif, write_gif
from residual_quad.controllers.base import SOURCE_TRACKERS, ControlContext
from residual_quad.controllers.specs import resolve_entries
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.presets import PRESETS
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.envs.turbulence import DRYDEN_LEVELS
from residual_quad.episode import (
    STEADY_STATE_FROM_S,
    EpisodeResult,
    control_context,
    run_episode,
)

#: flown by ``rquad demo`` after the four source trackers: the adaptive controller
#: (``docs/adaptive.md``)
DEMO_EXTRA: tuple[str, ...] = ("geo_rls_dob",)

#: payload, wind and trajectory ``rquad demo`` flies by default
DEMO_SCENARIO: tuple[str, str, str] = ("extra", "windy", "helix")

#: printed for a metric that is not defined (no sample after the metric window, or a crash)
UNDEFINED = "–"


def _payload(text: str) -> str | float:
    if text in PAYLOAD_LEVELS:
        return text
    try:
        mass = float(text)
    except ValueError:
        mass = math.nan
    if not (math.isfinite(mass) and mass >= 0):
        raise argparse.ArgumentTypeError(
            f"unknown payload {text!r}; valid: {', '.join(PAYLOAD_LEVELS)} or a mass >= 0 in kg"
        )
    return mass


def _wind(text: str) -> str | tuple[float, float]:
    if text in WIND_LEVELS:
        return text
    try:
        mean, sigma = (float(v) for v in text.split(","))
    except ValueError:
        mean = sigma = math.nan
    if not (math.isfinite(mean) and math.isfinite(sigma) and mean >= 0 and sigma >= 0):
        raise argparse.ArgumentTypeError(
            f"unknown wind {text!r}; valid: {', '.join(WIND_LEVELS)} or MEAN,SIGMA >= 0 in m/s"
        )
    return mean, sigma


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def format_table(rows: list[tuple[str, EpisodeResult]]) -> str:
    """Metrics of several controllers as an aligned text table."""
    w = max([12, *(len(name) for name, _ in rows)])
    head = (
        f"{'controller':<{w}} {'RMSE>3s [m]':>12} {'max err [m]':>12} {'cost [N²s]':>11} "
        f"{'diverged':>9} {'wall [s]':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in rows:
        div = r.termination if r.diverged else "no"
        lines.append(
            f"{name:<{w}} {_metric(r.rmse, 12)} {_metric(r.max_error, 12)} "
            f"{r.control_cost:11.1f} {div:>9} {r.wall_time:9.2f}"
        )
    return "\n".join(lines)


def _metric(x: float, width: int) -> str:
    """A metric in m, or :data:`UNDEFINED` when it has no sample (not finite)."""
    return f"{x:{width}.4f}" if math.isfinite(x) else f"{UNDEFINED:>{width}}"


def metrics_note(episode_s: float) -> str | None:
    """Why the RMSE and max error are undefined for an episode this short, else ``None``."""
    if episode_s > STEADY_STATE_FROM_S:
        return None
    return (
        f"note: RMSE and max error are measured after {STEADY_STATE_FROM_S:g} s; this "
        f"{episode_s:g} s episode has no sample there ({UNDEFINED}; null in --json)"
    )


def _scenario_line(args: argparse.Namespace) -> str:
    return (
        f"payload={args.payload} wind={args.wind} trajectory={args.trajectory} seed={args.seed} "
        + (f"preset={args.preset} " if getattr(args, "preset", None) else "")
        + (f"turbulence={args.turbulence} " if getattr(args, "turbulence", None) else "")
        + f"({args.episode_s:g} s, metrics after 3 s)"
    )


def _remote_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``run_episode`` arguments that fly on the server of ``--remote`` (none without it)."""
    if not getattr(args, "remote", None):
        return {}
    from residual_quad.envs.registration import REMOTE_ENV_ID

    return {
        "env_id": REMOTE_ENV_ID,
        "address": args.remote,
        "token": os.environ.get("RQUAD_TOKEN") or None,
        # the whole scenario travels, so the flight is the in-process one whatever the server's
        # defaults: the controllers are built for this control rate
        "control_hz": 1.0 / ControlContext().control_dt,
    }


def _fly(args: argparse.Namespace, names: list[str]) -> list[tuple[str, EpisodeResult]]:
    """Fly every spec in ``names``; the rows carry each spec's label."""
    options: dict[str, Any] = {}
    if args.yaw_offset:
        options["yaw_offset"] = math.radians(args.yaw_offset)
    specs = resolve_entries(names)  # every spec checked (and labels unique) before flying
    record = getattr(args, "record", None)
    if record and len(specs) > 1:
        raise ValueError(f"--record writes one flight: give one controller, not {len(specs)}")
    if args.tensorboard:
        ensure_folder(f"--tensorboard {args.tensorboard}", args.tensorboard)
    rows = []
    for spec in specs:
        name = spec.label
        # told the plant's rotors, as the sweep's controllers are (their default gains follow)
        plant = {"preset": args.preset} if args.preset else {}
        controller: Any = spec.build(control_context(plant))
        logger = None
        if args.tensorboard:  # per-step residual/RLS curves, one run directory per controller
            from residual_quad.training.tb_logging import EpisodeLogger

            safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
            run = f"{safe}_{args.payload}_{args.wind}_{args.trajectory}_s{args.seed}"
            logger = EpisodeLogger(Path(args.tensorboard) / run, controller)
        telemetry = None
        if record:
            from residual_quad.remote.telemetry import FlightTelemetry, McapSink

            telemetry = FlightTelemetry([McapSink(record)])
        from residual_quad.evaluation.report.correction import CorrectionRecorder

        recorder = (
            CorrectionRecorder(controller) if CorrectionRecorder.applies(controller) else None
        )
        callbacks = [c for c in (logger, telemetry and telemetry.episode_callback(), recorder) if c]
        try:
            result = run_episode(
                controller,
                payload=args.payload,
                wind=args.wind,
                trajectory=args.trajectory,
                seed=args.seed,
                reset_options=options or None,
                callback=_chain(callbacks),
                episode_s=args.episode_s,
                ground_effect=not args.no_ground_effect,
                **({"preset": args.preset} if args.preset else {}),
                **({"turbulence": args.turbulence} if args.turbulence else {}),
                **({"events": args.events} if args.events else {}),
                **_remote_kwargs(args),
            )
        finally:
            if telemetry is not None:
                telemetry.close()
        if logger is not None:
            logger.close()
        if recorder is not None:
            result.extras["correction"] = recorder.stats(STEADY_STATE_FROM_S)
        rows.append((name, result))
    return rows


def _chain(callbacks: list[Any]) -> Any:
    """One ``run_episode`` callback that calls each of ``callbacks`` (``None`` for none)."""
    if not callbacks:
        return None
    if len(callbacks) == 1:
        return callbacks[0]

    def chained(*a: Any) -> None:
        for callback in callbacks:
            callback(*a)

    return chained


def _recovery(args: argparse.Namespace, r: EpisodeResult) -> dict[str, Any]:
    """The recovery columns of a flight with ``--event`` (none without)."""
    from residual_quad.evaluation.sweep.recovery import recovery_metrics, recovery_spec

    spec = recovery_spec({"events": args.events}, args.episode_s) if args.events else None
    return {} if spec is None else recovery_metrics(r.t, r.error, spec, r.diverged)


def _print(args: argparse.Namespace, rows: list[tuple[str, EpisodeResult]]) -> None:
    if args.json:
        out = []
        for name, r in rows:
            m = r.metrics()
            m.update(
                rmse=_finite(r.rmse),
                max_error=_finite(r.max_error),
                max_error_episode=_finite(m["max_error_episode"]),
                **_recovery(args, r),
            )
            if "correction" in r.extras:
                m["correction"] = r.extras["correction"].as_dict()
            out.append(
                {
                    "controller": name,
                    "payload": args.payload,
                    "wind": args.wind,
                    "trajectory": args.trajectory,
                    "seed": args.seed,
                    **m,
                }
            )
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
    else:
        print(_scenario_line(args))
        print(format_table(rows))
        for name, r in rows:
            if "correction" in r.extras:
                print(r.extras["correction"].line(name))
            rec = _recovery(args, r)
            if rec:
                back, iae, peak = (
                    rec["recovery_time_s"],
                    rec["recovery_iae_m_s"],
                    rec["recovery_peak_m"],
                )
                print(
                    f"{name}: after the event at {rec['event_t_s']:g} s, peak error "
                    f"{math.nan if peak is None else peak:.4f} m, back in the "
                    f"{rec['recovery_band_m'] * 100:g} cm band "
                    + (f"after {back:.2f} s" if back is not None else "never")
                    + (f", ∫error over 5 s {iae:.4f} m·s" if iae is not None else "")
                )
        note = metrics_note(args.episode_s)
        if note:
            print(note)


def _fly_and_print(args: argparse.Namespace, names: list[str]) -> int:
    """Fly ``names``, render the ``--gif`` (checked before flying), print the metrics."""
    gif = plan_gif(args, names)
    rows = _fly(args, names)
    if gif is not None:
        write_gif(args, gif)
    _print(args, rows)
    if gif is not None and not args.json:
        print(f"GIF of {gif.label}: {gif.path}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    return _fly_and_print(args, args.controller)


def _cmd_demo(args: argparse.Namespace) -> int:
    return _fly_and_print(args, [*SOURCE_TRACKERS, *DEMO_EXTRA, *(args.controller or [])])


def _scenario_args(p: argparse.ArgumentParser, payload: str, wind: str, traj: str) -> None:
    p.add_argument(
        "--payload",
        type=_payload,
        default=payload,
        help=f"{'/'.join(PAYLOAD_LEVELS)} or kg (default {payload})",
    )
    p.add_argument(
        "--wind",
        type=_wind,
        default=wind,
        help=f"{'/'.join(WIND_LEVELS)} or MEAN,SIGMA m/s (default {wind})",
    )
    p.add_argument(
        "--trajectory",
        choices=list(TRAJECTORIES),
        default=traj,
        help=f"reference to track, {'/'.join(TRAJECTORIES)} (default {traj})",
    )
    p.add_argument("--seed", type=nonneg_int, default=0, help="wind realization (>= 0)")
    p.add_argument(
        "--episode-s",
        type=episode_seconds,
        default=20.0,
        help=f"episode length, s (metrics after {STEADY_STATE_FROM_S:g} s)",
    )
    p.add_argument("--yaw-offset", type=finite_float, default=0.0, help="start heading offset, deg")
    p.add_argument(
        "--no-ground-effect", action="store_true", help="turn off the thrust gain near the floor"
    )
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=None,
        help=f"named plant options ({'/'.join(PRESETS)}: rotor lag, latency; "
        "docs/environment.md); default: none, the plant of the committed rows",
    )
    p.add_argument(
        "--turbulence",
        choices=list(DRYDEN_LEVELS),
        default=None,
        help=f"Dryden turbulence ({'/'.join(DRYDEN_LEVELS)}: MIL-HDBK-1797 low-altitude levels "
        "[DRY]) in place of the wind's Ornstein-Uhlenbeck gusts, about the same mean wind "
        "(docs/environment.md); default: none, the gusts of the committed rows",
    )
    add_event_flag(
        p,
        "an event during the episode (docs/environment.md); adds the recovery metrics "
        "(docs/recovery.md)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        default=None,
        help="log per-step residual estimate vs truth, RLS P trace, warm-up end to DIR/<run>",
    )
    add_gif_args(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="fly controllers on one scenario and print metrics")
    p.add_argument(
        "--controller",
        "--controllers",
        dest="controller",
        type=spec_list,
        default="geo",
        help="comma list of controller specs: a name (geo, hnewton:lm), options (geo:kp=15,kd=8) "
        "or an import path (my_pkg.ctrl:Make); see --list-controllers and docs/controllers.md",
    )
    add_list_controllers(p)
    _scenario_args(p, "none", "calm", "hover")
    p.add_argument(
        "--remote",
        metavar="HOST:PORT",
        type=remote_address,
        default=None,
        help="fly on a simulation server (rquad serve; token from $RQUAD_TOKEN)",
    )
    p.add_argument(
        "--record",
        metavar="FILE.mcap",
        default=None,
        help="write the flight as a ROS2 MCAP log (one controller)",
    )
    p.set_defaults(func=_cmd_eval)

    demo = ", ".join((*SOURCE_TRACKERS, *DEMO_EXTRA))
    p = sub.add_parser(
        "demo",
        help=f"{demo}: {DEMO_SCENARIO[0]} payload, {DEMO_SCENARIO[1]}, {DEMO_SCENARIO[2]}",
        description=f"Fly {demo} (and the controllers of --controller) on one scenario, "
        f"{DEMO_SCENARIO[0]} payload, {DEMO_SCENARIO[1]} wind, {DEMO_SCENARIO[2]} by default, "
        "and print their metrics.",
    )
    p.add_argument(
        "--controller",
        "--controllers",
        dest="controller",
        type=spec_list,
        default=None,
        help="controller specs to fly beside the four source trackers and geo_rls_dob "
        "(e.g. my_pkg.ctrl:Make)",
    )
    add_list_controllers(p)
    _scenario_args(p, *DEMO_SCENARIO)
    p.set_defaults(func=_cmd_demo)
