"""``rquad tune``: a seeded optuna search of a model-based tracker's gains on the RL objective."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from residual_quad.commands.argtypes import nonneg_float, nonneg_int, positive_int

DEFAULT_OUT = Path("runs/tune")


def space_arg(text: str) -> dict[str, Any]:
    """``--space kp=5:60:log,kd=2:20`` → option path → ``{low, high, log}``."""
    out: dict[str, Any] = {}
    for item in text.split(","):
        path, eq, bounds = item.strip().partition("=")
        parts = bounds.split(":")
        if not eq or not path or len(parts) not in (2, 3) or parts[2:] not in ([], ["log"]):
            raise argparse.ArgumentTypeError(
                f"bad range {item.strip()!r}: write PATH=LOW:HIGH or PATH=LOW:HIGH:log "
                "(e.g. kp=5:60:log,attitude.wn_rp=8:30)"
            )
        if path in out:
            raise argparse.ArgumentTypeError(f"range {path!r} is given twice")
        try:
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad range {item.strip()!r}: LOW and HIGH must be numbers"
            ) from None
        out[path] = {"low": low, "high": high, "log": parts[2:] == ["log"]}
    return out


def _cmd(args: argparse.Namespace) -> int:
    from residual_quad import configs
    from residual_quad.training.tune import TuneConfig, tune

    overrides: dict[str, Any] = {"controller": args.controller}
    for key in ("trials", "timeout_s", "seed", "scenarios", "episode_s", "space", "aggregate"):
        value = getattr(args, key)
        if value is not None:
            overrides[key] = value
    base = configs.read_yaml(configs.resolve(args.config)) if args.config else {}
    if not isinstance(base, dict):
        raise ValueError(f"{args.config}: a tune config must be a mapping")
    if args.preset is not None:  # the plant's preset over the YAML's env
        overrides["env"] = {**(base.get("env") or {}), "preset": args.preset}
    cfg = configs.load(TuneConfig, {**base, **overrides})
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.trials, desc=f"tune {cfg.controller}", unit="trial")

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.n = min(done, total)
            bar.refresh()

    try:
        summary = tune(cfg, args.out, resume=args.resume, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    print(
        f"{summary['controller']}: best score {summary['best_score']:.4f} of {summary['trials']} "
        f"trials ({summary['best_crashes']} crashes, RMSE {summary['best_rmse']:.4f} m); its own "
        f"gains {summary['default_score']:.4f} ({summary['default_crashes']} crashes, RMSE "
        f"{summary['default_rmse']:.4f} m)"
    )
    print(f"best gains: {args.out / 'best.yaml'} (label {summary['entry']['label']})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="search a model-based tracker's gains (optuna, seeded) on the RL objective",
        description=(
            "A seeded TPE search (optuna) of CONTROLLER's gains, each trial flown over tuning "
            "scenarios the evaluation never flies (random payload mass below the held-out one, "
            "random helix, figure-8 and hover starts, env seeds from 10000) on the vector env and "
            "scored by the precision objective the RL policies train for. Writes "
            "tune_config.yaml, study.db (optuna storage), trials.jsonl, default.json and "
            "best.yaml (a controller entry for sweep configs) under --out (extra: tune)."
        ),
    )
    p.add_argument("controller", help="a registered tracker: pid, geo, geo_res, geo_rls, ...")
    p.add_argument("--config", default=None, help="a tune YAML (TuneConfig); flags override it")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder (default: {DEFAULT_OUT})")
    p.add_argument("--trials", type=positive_int, default=None, help="trials in all (default 40)")
    p.add_argument(
        "--timeout-s",
        dest="timeout_s",
        type=nonneg_float,
        default=None,
        help="wall-time budget of this call's trials, s (0: none)",
    )
    p.add_argument("--seed", type=nonneg_int, default=None, help="sampler and scenario seed")
    p.add_argument(
        "--scenarios", type=positive_int, default=None, help="tuning flights per trial (12)"
    )
    p.add_argument(
        "--episode-s", dest="episode_s", type=nonneg_float, default=None, help="s per flight (10)"
    )
    p.add_argument(
        "--space",
        type=space_arg,
        default=None,
        help="ranges replacing the controller's: PATH=LOW:HIGH[:log],... (e.g. kp=5:60:log)",
    )
    p.add_argument(
        "--aggregate",
        choices=("mean", "cvar"),
        default=None,
        help="a trial's score: the mean of its flights' J (default), or cvar: the mean of the "
        "worst quarter (cvar_fraction in a YAML)",
    )
    p.add_argument(
        "--preset",
        default=None,
        help="the plant the flights fly (realistic: rotor lag, latency, IMU bias; default: the "
        "YAML's env, else the ideal plant); the controllers are told it",
    )
    p.add_argument("--resume", action="store_true", help="continue the study in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd)
