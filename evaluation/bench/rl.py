"""``rquad bench --sections rl``: PPO's learner and env costs, end to end beside SB3's ceiling.

Every row runs SB3 ``PPO`` with the packaged ``configs/ppo.yaml`` settings (network, batch size,
epochs, normalization, one torch thread, the shipped learner settings of
:func:`~residual_quad.training.ppo_model.prepare_learner`) with ``n_steps`` set so that one
rollout is :data:`ROLLOUT_STEPS` policy steps, for the same number of PPO iterations:

- **ceiling**: a :class:`~residual_quad.training.ppo_vec.NullVecEnv` with the training env's
  spaces (the recipe's inputs: the same network) that simulates nothing (``VecMonitor`` +
  ``VecNormalize`` too), i.e. what SB3's PPO itself costs —
  the **learner**, split into its update (``train()``: the epochs of minibatch gradient steps)
  and its share of the rollout (policy forward, buffer, normalization, GAE);
- the same ceiling with SB3's default per-parameter Adam (torch's CPU default) instead of the
  shipped multi-tensor one: the speed setting's ratio, same run;
- **end to end**: the training env of ``rquad train ppo`` (``backend: vector``:
  :class:`~residual_quad.training.ppo_vec.QuadVecEnv` over the vector env, domain randomization,
  ``VecMonitor`` + ``VecNormalize``, the config's action repeat of 2 control periods), from an
  untrained policy (its training episodes crash early and often; an autoreset rebuilds the env
  for its new scenario: an early-training figure) and from the shipped ``ppo`` policy's weights
  and observation statistics (episodes last: what most of a training run costs); its **env**
  time per policy step is its rollout time less the ceiling's rollout time.

The four runs take turns iteration by iteration, so that a load that comes and goes (a shared
machine) hits them alike. A figure is the median over iterations (the first, warm-up, dropped) of
one PPO iteration's time (or of its rollout or update part) per policy step: its inverse is
policy steps/s. Ratios are to the ceiling, same run. The targets: >= 15 000 policy steps/s end to
end on 2 cores (<= 66.7 us) and >= 50 % of the ceiling (ratio <= 2). The section ends with the
env side alone, per env-step beside the floor (:mod:`~residual_quad.evaluation.bench.train_env`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

SECTION = "rl"
ROLLOUT_STEPS = 8192  # policy steps per PPO iteration, all envs (configs/ppo.yaml: 32 × 256)


@dataclass(frozen=True)
class Split:
    """Median µs per policy step of a PPO iteration's rollout and of its update."""

    rollout_us: float
    update_us: float

    @property
    def total_us(self) -> float:
        return self.rollout_us + self.update_us


def _interleaved_splits(models: dict[str, Any], iterations: int) -> dict[str, Split]:
    """:class:`Split` of each model: ``iterations`` + 1 PPO iterations each, the models taking
    turns iteration by iteration (a load that comes and goes hits them all alike), the first
    round (warm-up) dropped."""
    from stable_baselines3.common.callbacks import BaseCallback

    marks: list[float] = []  # rollout start, rollout end (the update starts), update end

    class Marks(BaseCallback):
        def _on_rollout_start(self) -> None:
            marks.append(time.perf_counter())

        def _on_rollout_end(self) -> None:
            marks.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            marks.append(time.perf_counter())

    times: dict[str, list[tuple[float, float]]] = {kind: [] for kind in models}
    for i in range(iterations + 1):
        for kind, model in models.items():
            marks.clear()
            rollout = model.n_steps * model.n_envs
            model.learn(rollout, callback=Marks(), reset_num_timesteps=i == 0, progress_bar=False)
            t0, t1, t2 = marks
            if i > 0:
                times[kind].append(((t1 - t0) / rollout * 1e6, (t2 - t1) / rollout * 1e6))
    return {
        kind: Split(*(float(np.median(part)) for part in zip(*t, strict=True)))
        for kind, t in times.items()
    }


def _bench_config(n_envs: int) -> Any:
    """``configs/ppo.yaml`` with one rollout of :data:`ROLLOUT_STEPS` policy steps."""
    from residual_quad import configs
    from residual_quad.training.ppo_config import PPOTrainConfig

    base = configs.load(PPOTrainConfig, "ppo")
    ppo = configs.to_dict(base.ppo)
    ppo["n_steps"] = ROLLOUT_STEPS // n_envs
    ppo["batch_size"] = min(ppo["batch_size"], ROLLOUT_STEPS)  # a tiny test rollout
    return configs.load(
        PPOTrainConfig,
        {**configs.to_dict(base), "ppo": ppo, "total_steps": ROLLOUT_STEPS, "n_envs": n_envs},
    )


KINDS = ("ceiling", "ceiling, SB3's default Adam", "untrained policy", "from the shipped policy")


def _splits(n_envs: int, iterations: int) -> dict[str, Split]:
    """:class:`Split` of each of :data:`KINDS` at ``n_envs``."""
    import torch
    from stable_baselines3.common.vec_env import VecMonitor

    from residual_quad.evaluation.bench.train_env import load_shipped_policy
    from residual_quad.training.ppo_model import (
        make_training_env,
        multi_tensor_adam,
        new_model,
        normalized,
    )
    from residual_quad.training.ppo_vec import NullVecEnv

    cfg = _bench_config(n_envs)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, cfg.torch_threads))
    models, envs = {}, []
    try:
        real = {}
        for kind in KINDS:
            if not kind.startswith("ceiling"):
                real[kind] = make_training_env(cfg)
                envs.append(real[kind])
        probe = next(iter(real.values()))  # the ceiling's network is the recipe's own
        sizes = {
            "obs_dim": probe.observation_space.shape[0],
            "action_dim": probe.action_space.shape[0],
        }
        for kind in KINDS:
            venv = real.get(kind)
            if venv is None:
                venv = VecMonitor(NullVecEnv(n_envs, **sizes))
                envs.append(venv)
            venv.seed(cfg.seed)
            venv = normalized(venv, cfg)
            model = new_model(cfg, venv)
            if kind == "ceiling, SB3's default Adam":
                multi_tensor_adam(model, on=False)
            if kind == "from the shipped policy":
                load_shipped_policy(model, venv)
            models[kind] = model
        return _interleaved_splits(models, iterations)
    finally:
        for venv in envs:
            venv.close()
        torch.set_num_threads(threads)  # leave the process as found


def _rows(n: int, split: dict[str, Split]) -> list[BenchRow]:
    """The section's rows at ``n`` envs, every ratio to the ceiling of the same run."""
    ceiling = split["ceiling"]
    ref = ceiling.total_us

    def row(name: str, us: float, target: str = "") -> BenchRow:
        return BenchRow(SECTION, name, us, us / ref, "ceiling", target)

    rows = [
        row(f"SB3 ceiling = learner, N={n} ({1e6 / ref:,.0f} steps/s)", ref),
        row(f"  learner: update, N={n}", ceiling.update_us),
        row(f"  learner: its rollout share, N={n}", ceiling.rollout_us),
        row(f"  ceiling with SB3's default Adam, N={n}", split[KINDS[1]].total_us),
    ]
    for what in KINDS[2:]:
        e2e = split[what]
        steps_s = f"{1e6 / e2e.total_us:,.0f} steps/s"
        rows += [
            row(
                f"PPO end to end, vector env, N={n}, {what} ({steps_s})",
                e2e.total_us,
                ">= 15k steps/s (<= 66.7 us), ratio <= 2",
            ),
            row(f"  env per policy step, N={n}, {what}", e2e.rollout_us - ceiling.rollout_us),
            row(f"  learner: update, N={n}, {what}", e2e.update_us),
        ]
    return rows


def run(quick: bool = False) -> list[BenchRow]:
    sizes = (64,) if quick else (64, 256)
    from residual_quad.evaluation.bench.train_env import training_rows

    iterations = 2 if quick else 8  # timed PPO iterations per run: eight for a steady median
    rows = [row for n in sizes for row in _rows(n, _splits(n, iterations))]
    return [*rows, *training_rows(quick)]
