"""``rquad bench --sections rl``: end-to-end PPO throughput on the vector env beside SB3's ceiling.

Both rows of a pair run SB3 ``PPO`` with the same settings — the packaged ``configs/ppo.yaml``
(network, batch size, epochs, normalization, one torch thread) with ``n_steps`` set so that one
rollout is :data:`ROLLOUT_STEPS` policy steps — for the same number of PPO iterations:

- **end to end**: the training env of ``rquad train ppo`` (``backend: vector``:
  :class:`~residual_quad.training.ppo_vec.QuadVecEnv` over the vector env, domain randomization,
  ``VecMonitor`` + ``VecNormalize``, the config's action repeat of 2 control periods);
- **ceiling**: a :class:`~residual_quad.training.ppo_vec.NullVecEnv` with the same spaces that
  simulates nothing (``VecMonitor`` + ``VecNormalize`` too), i.e. what SB3's PPO itself costs.

A figure is the median time of one PPO iteration (rollout + update; the first iteration, warm-up,
is dropped) per policy step: its inverse is policy steps/s. The ratio is end to end over the
ceiling, same run. End to end runs twice: from an untrained policy, whose training episodes
crash early and often (an autoreset rebuilds the env for its new scenario) — an early-training
figure — and from the shipped ``ppo`` policy's weights and observation statistics, whose
episodes last — what most of a training run costs. The targets:
>= 15 000 policy steps/s end to end on 2 cores (<= 66.7 us) and >= 50 % of the ceiling (ratio
<= 2). The section ends with the env side alone, per env-step beside the floor
(:mod:`~residual_quad.evaluation.bench_train_env`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from residual_quad.evaluation.bench import BenchRow

SECTION = "rl"
ROLLOUT_STEPS = 8192  # policy steps per PPO iteration, all envs (configs/ppo.yaml: 32 × 256)


def _iteration_us(model: Any, iterations: int) -> float:
    """Median µs per policy step of ``iterations`` PPO iterations after one warm-up."""
    from stable_baselines3.common.callbacks import BaseCallback

    marks: list[float] = []

    class Marks(BaseCallback):
        def _on_rollout_start(self) -> None:
            marks.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            marks.append(time.perf_counter())

    rollout = model.n_steps * model.n_envs
    model.learn(total_timesteps=(iterations + 1) * rollout, callback=Marks(), progress_bar=False)
    per_iteration = np.diff(marks)[1:]  # first: warm-up
    return float(np.median(per_iteration)) / rollout * 1e6


def _pair(n_envs: int, iterations: int) -> tuple[float, float, float]:
    """(end to end from scratch, end to end from the shipped policy, ceiling) µs per policy
    step at ``n_envs``."""
    import torch
    from stable_baselines3.common.vec_env import VecMonitor

    from residual_quad import configs
    from residual_quad.evaluation.bench_train_env import load_shipped_policy
    from residual_quad.training.ppo_config import PPOTrainConfig
    from residual_quad.training.ppo_model import make_training_env, new_model, normalized
    from residual_quad.training.ppo_vec import NullVecEnv

    base = configs.load(PPOTrainConfig, "ppo")
    ppo = configs.to_dict(base.ppo)
    ppo["n_steps"] = ROLLOUT_STEPS // n_envs
    ppo["batch_size"] = min(ppo["batch_size"], ROLLOUT_STEPS)  # a tiny test rollout
    cfg = configs.load(
        PPOTrainConfig,
        {**configs.to_dict(base), "ppo": ppo, "total_steps": ROLLOUT_STEPS, "n_envs": n_envs},
    )
    torch.set_num_threads(max(1, cfg.torch_threads))
    out = []
    for kind in ("scratch", "flying", "ceiling"):
        venv = VecMonitor(NullVecEnv(n_envs)) if kind == "ceiling" else make_training_env(cfg)
        venv.seed(cfg.seed)
        venv = normalized(venv, cfg)
        try:
            model = new_model(cfg, venv)
            if kind == "flying":
                load_shipped_policy(model, venv)
            out.append(_iteration_us(model, iterations))
        finally:
            venv.close()
    return out[0], out[1], out[2]


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.evaluation.bench_train_env import training_rows

    sizes = (64,) if quick else (64, 256)
    iterations = 2 if quick else 4
    rows = []
    for n in sizes:
        scratch, flying, ceiling = _pair(n, iterations)
        rows.append(
            BenchRow(
                SECTION,
                f"SB3 ceiling: null VecEnv, N={n} ({1e6 / ceiling:,.0f} steps/s)",
                ceiling,
                1.0,
                "ceiling",
            )
        )
        for what, us in (("untrained policy", scratch), ("from the shipped policy", flying)):
            rows.append(
                BenchRow(
                    SECTION,
                    f"PPO end to end, vector env, N={n}, {what} ({1e6 / us:,.0f} steps/s)",
                    us,
                    us / ceiling,
                    "ceiling",
                    target=">= 15k steps/s (<= 66.7 us), ratio <= 2",
                )
            )
    return [*rows, *training_rows(quick)]
