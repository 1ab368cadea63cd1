"""PPO baseline: stable-baselines3 PPO on ``ResidualQuad-v0`` with domain randomization.

Every episode of every training env draws a scenario — payload × wind × trajectory from the
config's lists (``extra`` is refused: it is held out for evaluation, as for the residual network)
— through :class:`~residual_quad.training.ppo_vec.ScenarioSampler`. All envs live in one
:class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv` behind the SB3 ``VecEnv`` adapter
:class:`~residual_quad.training.ppo_vec.QuadVecEnv` (``backend: vector``; the ``subproc`` backend
is retired, :data:`~residual_quad.training.ppo_config.SUBPROC_RETIRED`). The policy sees
:func:`~residual_quad.controllers.features.ppo_features` of the observation (the one function the
deployed adapter uses too), optionally normalized by ``VecNormalize`` whose frozen statistics are
saved inside the policy file.

This module holds the entry points, :func:`train` and :func:`export_policy`; the concepts they
use live in their own modules: the configs (:mod:`~residual_quad.training.ppo_config`), the env
and model (:mod:`~residual_quad.training.ppo_model`), the callbacks
(:mod:`~residual_quad.training.callbacks`), checkpoints and resume
(:mod:`~residual_quad.training.checkpoints`) and the run's policy files
(:mod:`~residual_quad.training.export`, in the format of
:mod:`residual_quad.controllers.policy_file`).

Outputs of :func:`train` in ``out``: ``config.yaml`` (resolved), ``tb/`` (TensorBoard: SB3's
``train/*`` and ``rollout/*`` plus ``rollout/pos_err_m``, ``rollout/crash_rate`` and the tracking
evaluation ``eval/*``), ``checkpoints/ppo_<steps>.zip`` (+ ``ppo_<steps>.vecnormalize.pkl``;
``train(..., resume=True)`` continues from the last one), ``best.zip`` (best evaluation: fewest
crashes, then lowest mean RMSE), ``final.zip`` and ``summary.json`` (budget: steps, wall time,
envs, backend, load average). Every ``.zip`` loads with ``make_controller("ppo", path=...)``.

stable-baselines3 and torch are imported when :func:`train` runs, never at import time.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.controllers.policy_file import algo_module, import_sb3, rl_purpose
from residual_quad.memory import fix_mmap_threshold
from residual_quad.training.checkpoints import (
    RunState,
    checkpoints,
    load_newest_good,
    refuse_existing_run,
)
from residual_quad.training.export import export_policy, json_safe, save_policy, versions
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig
from residual_quad.training.ppo_model import (  # noqa: F401 - _LinearSchedule: see below
    LinearSchedule as _LinearSchedule,
)
from residual_quad.training.ppo_model import make_training_env, new_model, normalized

# Models saved before the learning-rate schedule moved to ppo_model (the shipped policies among
# them) pickle it as ``residual_quad.training.ppo._LinearSchedule``: that name must keep loading.
__all__ = ["PPOHyperparams", "PPOTrainConfig", "export_policy", "train"]


def train(
    cfg: PPOTrainConfig,
    out: str | Path,
    progress: bool = True,
    verbose: int = 0,
    resume: bool = False,
) -> dict[str, Any]:
    """Train PPO per ``cfg``; write the run folder ``out`` (see module docstring); summary dict.

    ``resume``: continue the interrupted run in ``out`` from its last checkpoint (model,
    normalization state, evaluation history and budget so far; the envs restart with fresh
    episodes seeded ``seed + steps``) up to ``cfg.total_steps``. ``cfg`` must be the run's
    ``config.yaml`` (``total_steps`` may differ); a run without a checkpoint, or already
    finished (``final.zip``), is an error naming it. A newest checkpoint that does not load is
    skipped (named on stderr) for the newest one that does. Without ``resume``, a folder that
    already holds a run (``final.zip``, ``best.zip``, ``summary.json`` or checkpoints) is refused:
    nothing is overwritten.
    """
    if cfg.algo == "ppo":
        import_sb3(rl_purpose(cfg.controller))
    else:
        algo_module(cfg.algo)  # sb3 (sac) or sb3-contrib (tqc), else the install hint
        if resume:
            raise ValueError(
                f"resume is PPO only: a {cfg.algo} checkpoint does not hold the replay buffer "
                "(a resumed learner would update on an empty one); train again with a new --out"
            )
    import torch

    from residual_quad.training.callbacks import training_callbacks

    out = Path(out)
    if resume:
        found = checkpoints(out)
        if (out / "final.zip").exists():
            raise ValueError(f"{out} is a finished run (final.zip exists): nothing to resume")
    else:
        refuse_existing_run(out)
        out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, cfg.torch_threads))
    fix_mmap_threshold()  # a run frees MiB arrays every period: keep them off the heap
    venv = make_training_env(cfg)
    n_envs = venv.num_envs
    state = RunState()
    try:
        if resume:
            model, venv, state = load_newest_good(found, venv, cfg)
            model.set_random_seed(cfg.seed + state.steps)  # fresh episodes, not a replay
            model._last_obs = None  # SB3 saved it; None makes learn() reset the new envs
            configs.dump(cfg, out / "config.yaml")
        else:
            configs.dump(cfg, out / "config.yaml")
            venv.seed(cfg.seed)
            if cfg.normalize_obs or cfg.normalize_reward:
                venv = normalized(venv, cfg)
            model = new_model(cfg, venv, str(out / "tb"), verbose)
    except BaseException:
        venv.close()
        raise
    callbacks = training_callbacks(cfg, out, venv, progress, state)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        model.learn(
            total_timesteps=max(0, cfg.total_steps - state.steps),
            callback=callbacks.as_list(),
            tb_log_name=cfg.algo,
            reset_num_timesteps=not resume,
            progress_bar=False,
        )
        train_wall = state.train_wall_s + time.perf_counter() - t0
        evaluator = callbacks.evaluation
        final_eval = evaluator.evaluate()
    finally:
        venv.close()
    wall = state.train_wall_s + time.perf_counter() - t0
    budget = {
        "steps": int(model.num_timesteps),  # policy decisions (PPO timesteps)
        "control_steps": int(callbacks.stats.control_steps),  # 10 ms env periods simulated
        "train_wall_s": round(train_wall, 1),
        "wall_s": round(wall, 1),
        "n_envs": n_envs,
        "backend": cfg.backend,
        "resumed_at_steps": state.steps if resume else None,
        "cpu_count": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "seed": cfg.seed,
        "action_mode": cfg.action_mode,
        "versions": versions(),
        "host": platform.machine(),
    }
    final = save_policy(model, out / "final.zip", cfg, venv, steps=budget["steps"], budget=budget)
    best_steps = min(evaluator.history, key=lambda e: (e["crashes"], e["rmse_mean"]))["steps"]
    summary = {
        **budget,
        "out": str(out),
        "final": str(final),
        "best": str(out / "best.zip"),
        "best_steps": best_steps,
        "best_eval": evaluator.best,
        "final_eval": final_eval,
        "evals": evaluator.summaries(),
        "tensorboard": str(out / "tb"),
    }
    (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=1))
    return summary
