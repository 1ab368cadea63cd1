"""``rquad collect`` and ``rquad train <target>``.

``train`` takes a positional target; each target is one entry of :data:`TRAIN_TARGETS`
(``name → "module:register_function"``), whose function adds that target's parser to the
``train`` sub-parsers. Adding a target (e.g. ``ppo``) is one line there.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
from pathlib import Path

from residual_quad import configs
from residual_quad.commands.argtypes import episode_seconds, nonneg_int, positive_int, seed_list

#: train target → "module:function(subparsers)" adding its parser
TRAIN_TARGETS: dict[str, str] = {
    "residual": "residual_quad.commands.train:register_train_residual",
    "ppo": "residual_quad.commands.train:register_train_ppo",
    "ppo_res": "residual_quad.commands.train:register_train_ppo_res",
    "ppo_acc": "residual_quad.commands.train:register_train_ppo_acc",
    "ppo_adapt": "residual_quad.commands.train:register_train_ppo_adapt",
    "sac": "residual_quad.commands.train:register_train_sac",
    "tqc": "residual_quad.commands.train:register_train_tqc",
}

DEFAULT_DATASET = Path("outputs/residual/dataset.npz")
DEFAULT_WEIGHTS_OUT = Path("outputs/residual/weights.npz")
DEFAULT_LOGDIR = Path("runs/residual_train")
DEFAULT_PPO_OUT = Path("runs/ppo")
DEFAULT_PPO_RES_OUT = Path("runs/ppo_res")
DEFAULT_PPO_ADAPT_OUT = Path("runs/ppo_adapt")
#: the policy-training targets (``_cmd_train_ppo``), each also its default shipped config
POLICY_TARGETS = ("ppo", "ppo_res", "ppo_acc", "ppo_adapt", "sac", "tqc")


def _cmd_collect(args: argparse.Namespace) -> int:
    from residual_quad.training.collect import CollectConfig, collect

    overrides = {}
    if args.seeds:
        overrides["seeds"] = args.seeds
    if args.episode_s is not None:
        overrides["episode_s"] = args.episode_s
    if args.workers is not None:
        overrides["workers"] = args.workers
    cfg = configs.load(CollectConfig, args.config or "collect", **overrides)
    summary = collect(cfg, args.out, progress=not args.no_progress)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{summary['samples']} samples from {summary['runs']} runs "
            f"({summary['rejected']} rejected, {summary['diverged']} diverged) in "
            f"{summary['wall_s']:.1f} s on {summary['workers']} worker(s)\n"
            f"dataset: {summary['path']}\nconfig:  {summary['config_path']}"
        )
    return 0


def _cmd_train_residual(args: argparse.Namespace) -> int:
    from residual_quad.training.residual_train import TrainConfig, train_from_dataset

    cfg = configs.load(
        TrainConfig, args.config or "train_residual", epochs=args.epochs, seed=args.seed
    )
    logdir = None if args.no_tensorboard else args.logdir
    s = train_from_dataset(
        args.dataset, cfg, args.out, logdir=logdir, progress=not args.no_progress
    )
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        rmse = ", ".join(f"{v:.3f}" for v in s["val_rmse"])
        print(
            f"{s['epochs_run']} epochs (best {s['best_epoch']}) on {s['train_samples']} samples, "
            f"{s['val_samples']} validation samples from {s['val_runs']} held-out runs\n"
            f"validation RMSE x, y, z: {rmse} m/s²  (loss {s['val_loss']:.4f})\n"
            f"training loop {s['train_time_s']:.1f} s, total {s['wall_s']:.1f} s\n"
            f"weights: {s['weights']} ({s['size_bytes'] / 1024:.1f} KB)"
            + (f"\nTensorBoard: tensorboard --logdir {s['logdir']}" if s["logdir"] else "")
        )
    return 0


def register_train_residual(targets: argparse._SubParsersAction) -> None:
    p = targets.add_parser(
        "residual", help="residual network from a `rquad collect` dataset (numpy, Adam)"
    )
    p.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="collected .npz")
    p.add_argument("--config", type=Path, default=None, help="YAML (default: packaged)")
    p.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS_OUT, help="weights .npz to write")
    p.add_argument("--logdir", type=Path, default=DEFAULT_LOGDIR, help="TensorBoard run dir")
    p.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard run")
    p.add_argument("--epochs", type=positive_int, default=None, help="override the config")
    p.add_argument("--seed", type=nonneg_int, default=None, help="override the config")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_train_residual)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help="fly geo with excitation and save a residual dataset")
    p.add_argument("--config", type=Path, default=None, help="YAML (default: packaged)")
    p.add_argument("--out", type=Path, default=DEFAULT_DATASET, help="dataset .npz to write")
    p.add_argument(
        "--workers", type=positive_int, default=None, help="processes (config default: 2)"
    )
    p.add_argument("--seeds", type=seed_list, default=None, help="comma list of env seeds")
    p.add_argument("--episode-s", type=episode_seconds, default=None, help="s per run (override)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_collect)

    names = ", ".join(TRAIN_TARGETS)
    p = sub.add_parser(
        "train",
        help=f"train a model: {names}",
        description=f"Train a model; TARGET is one of {names} (rquad train TARGET --help).",
    )
    targets = p.add_subparsers(dest="target", metavar="TARGET", help="what to train")
    targets.required = True
    for spec in TRAIN_TARGETS.values():
        module, func = spec.split(":")
        getattr(importlib.import_module(module), func)(targets)


def argv_is_train() -> bool:
    """Whether this process was started as ``rquad train ppo|ppo_res|ppo_adapt|sac|tqc ...``
    (to record the command)."""
    return len(sys.argv) >= 3 and sys.argv[1] == "train" and sys.argv[2] in POLICY_TARGETS


def _cmd_train_ppo(args: argparse.Namespace) -> int:
    from residual_quad.training.ppo import PPOTrainConfig, export_policy, train

    if args.resume:
        given = [
            flag
            for flag, value in (
                ("CONFIG", args.config),
                ("--seed", args.seed),
                ("--action-mode", args.action_mode),
                ("--n-envs", args.n_envs),
                ("--backend", args.backend),
            )
            if value is not None
        ]
        if given:
            raise ValueError(
                f"--resume continues the run in {args.out} with its own config.yaml; drop "
                f"{', '.join(given)} (only --steps may change the budget)"
            )
        run_config = args.out / "config.yaml"
        if not run_config.is_file():
            raise FileNotFoundError(f"nothing to resume in {args.out}: no {run_config}")
        source: str | Path = run_config
    else:
        source = args.config or args.default_config
    cfg = configs.load(
        PPOTrainConfig,
        source,
        total_steps=args.steps,
        seed=args.seed,
        action_mode=args.action_mode,
        n_envs=args.n_envs,
        backend=args.backend,
    )  # n_envs or budgets that cannot work: a ValueError here, before anything is built
    s = train(cfg, args.out, progress=not args.no_progress, resume=args.resume)  # no rl extra:
    # ImportError with the install hint
    if args.export is not None:
        command = shlex.join(["rquad", *sys.argv[1:]]) if argv_is_train() else None
        export_policy(args.out, args.export, command=command)
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    fe = s["final_eval"]
    print(
        f"{s['steps']} steps ({s['action_mode']}, {s['n_envs']} envs, seed {s['seed']}, "
        f"{s['backend']} backend) in "
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
    _add_ppo_parser(
        targets,
        "ppo",
        "stable-baselines3 PPO baseline (needs the rl extra)",
        "Train PPO with domain randomization",
        DEFAULT_PPO_OUT,
    )


def register_train_ppo_res(targets: argparse._SubParsersAction) -> None:
    """Add the ``ppo_res`` target (residual RL on pid or geo) to the ``rquad train`` sub-parsers."""
    _add_ppo_parser(
        targets,
        "ppo_res",
        "residual RL: PPO corrects pid's (or geo's) desired acceleration (needs the rl extra)",
        "Train the ppo_res policy (a bounded correction to the desired acceleration of its "
        "tracker, pid or geo: the config's `tracker`) with PPO "
        "and domain randomization",
        DEFAULT_PPO_RES_OUT,
    )


def register_train_ppo_acc(targets: argparse._SubParsersAction) -> None:
    """Add the ``ppo_acc`` target (a learned outer loop into the trackers' attitude loop)."""
    _add_ppo_parser(
        targets,
        "ppo_acc",
        "learned outer loop: PPO sets the desired acceleration of the trackers' attitude loop "
        "(needs the rl extra)",
        "Train the ppo_acc policy (the desired acceleration the trackers' shared attitude loop "
        "flies, in place of their PD) with PPO and domain randomization",
        Path("runs/ppo_acc"),
    )


def register_train_ppo_adapt(targets: argparse._SubParsersAction) -> None:
    """Add the ``ppo_adapt`` target (PPO that sees geo_rls's residual estimate)."""
    _add_ppo_parser(
        targets,
        "ppo_adapt",
        "PPO that also sees geo_rls's residual estimate (needs the rl extra)",
        "Train the ppo_adapt policy (PPO whose input holds the RLS residual estimate) with PPO "
        "and domain randomization",
        DEFAULT_PPO_ADAPT_OUT,
    )


def register_train_sac(targets: argparse._SubParsersAction) -> None:
    """Add the ``sac`` target (off-policy baseline, stable-baselines3 SAC)."""
    _add_ppo_parser(
        targets,
        "sac",
        "off-policy baseline: stable-baselines3 SAC (needs the rl extra)",
        "Train the sac policy with SAC on the PPO baseline's env and domain randomization",
        Path("runs/sac"),
    )


def register_train_tqc(targets: argparse._SubParsersAction) -> None:
    """Add the ``tqc`` target (off-policy baseline, sb3-contrib TQC)."""
    _add_ppo_parser(
        targets,
        "tqc",
        "off-policy baseline: sb3-contrib TQC (needs the rl extra)",
        "Train the tqc policy with TQC on the PPO baseline's env and domain randomization",
        Path("runs/tqc"),
    )


def _add_ppo_parser(
    targets: argparse._SubParsersAction, name: str, summary: str, what: str, out: Path
) -> None:
    """One PPO training target: ``name`` is also its default shipped config."""
    p = targets.add_parser(
        name,
        help=summary,
        description=f"{what}; writes config.yaml, tb/, checkpoints/, best.zip, final.zip and "
        "summary.json under --out. --resume continues an interrupted run from its last "
        "checkpoint.",
    )
    p.add_argument(
        "config", nargs="?", default=None, help=f"YAML path or shipped name (default: {name})"
    )
    p.add_argument("--out", type=Path, default=out, help=f"run folder (default: {out})")
    p.add_argument("--steps", type=positive_int, default=None, help="total env steps (override)")
    p.add_argument("--seed", type=nonneg_int, default=None, help="seed (override)")
    p.add_argument("--action-mode", choices=("ctbr", "rotor"), default=None, help="override")
    p.add_argument(
        "--n-envs",
        type=positive_int,
        default=None,
        help="training envs (override): the vector env's batch (<= 4096)",
    )
    p.add_argument(
        "--backend",
        choices=("vector", "subproc"),
        default=None,
        help="vector: all envs in one ResidualQuadVectorEnv (default); subproc: retired, "
        "refused with the reason (docs/ppo.md)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out from its last checkpoint (its config.yaml; "
        "--steps may raise the budget)",
    )
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="ZIP",
        help="also copy best.zip there with its training budget (ZIP + .json next to it)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_train_ppo, default_config=name)
