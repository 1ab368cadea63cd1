"""``rquad train ppo``: the parser of the ``ppo`` train target (hooked into ``training/cli.py``).

Kept apart from :mod:`residual_quad.training.ppo` so that building the ``rquad`` parser never
imports stable-baselines3 or torch.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

DEFAULT_OUT = Path("runs/ppo")


def argv_is_train() -> bool:
    """Whether this process was started as ``rquad train ppo ...`` (to record the command)."""
    return len(sys.argv) >= 3 and sys.argv[1:3] == ["train", "ppo"]


def _cmd_train_ppo(args: argparse.Namespace) -> int:
    from residual_quad.training.ppo import export_policy, load_config, train

    try:
        cfg = load_config(
            args.config,
            total_steps=args.steps,
            seed=args.seed,
            action_mode=args.action_mode,
            n_envs=args.n_envs,
        )
        s = train(cfg, args.out, progress=not args.no_progress)
        if args.export is not None:
            command = shlex.join(["rquad", *sys.argv[1:]]) if argv_is_train() else None
            export_policy(args.out, args.export, command=command)
    except ImportError as exc:
        print(f"rquad train ppo: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    fe = s["final_eval"]
    print(
        f"{s['steps']} steps ({s['action_mode']}, {s['n_envs']} envs, seed {s['seed']}) in "
        f"{s['train_wall_s']:.0f} s of training, {s['wall_s']:.0f} s in all "
        f"(load average before/after: {s['load_avg_before'][0]:.2f}/{s['load_avg_after'][0]:.2f})\n"
        f"final evaluation: {fe['crashes']} crash(es), mean RMSE {fe['rmse_mean']:.3f} m; "
        f"best at {s['best_steps']} steps\n"
        f"policies: {s['best']} (best), {s['final']} (final)\n"
        f"TensorBoard: tensorboard --logdir {s['tensorboard']}"
    )
    return 0


def register_train_ppo(targets: argparse._SubParsersAction) -> None:
    """Add the ``ppo`` target to the ``rquad train`` sub-parsers."""
    p = targets.add_parser(
        "ppo",
        help="stable-baselines3 PPO baseline (needs the rl extra)",
        description="Train PPO with domain randomization; writes config.yaml, tb/, checkpoints/, "
        "best.zip, final.zip and summary.json under --out.",
    )
    p.add_argument(
        "config", nargs="?", default="ppo", help="YAML path or shipped name (default: ppo)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="run folder (default: runs/ppo)")
    p.add_argument("--steps", type=int, default=None, help="total env steps (override)")
    p.add_argument("--seed", type=int, default=None, help="seed (override)")
    p.add_argument("--action-mode", choices=("ctbr", "rotor"), default=None, help="override")
    p.add_argument("--n-envs", type=int, default=None, help="env worker processes (override)")
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="ZIP",
        help="also copy best.zip there with its training budget (ZIP + .json next to it)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_train_ppo)
