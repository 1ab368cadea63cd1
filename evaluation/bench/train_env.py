"""``rquad bench --sections rl``: the env side of PPO training per env-step, beside the floor.

The time of the training env's own step — the SB3 adapter
:class:`~residual_quad.training.ppo_vec.QuadVecEnv` over the vector env, built by
``rquad train ppo``'s code from ``configs/ppo.yaml`` (domain randomization, action repeat 2,
same-step autoresets, per-env ``infos``) — per control period simulated, the policy's forward
pass and SB3's wrappers outside the clock. The envs' episodes are first put out of step as in a
training run (an untrained policy's crashes end them at scattered times); then the shipped
``ppo`` policy flies (long episodes: most of a training run), its references tabulated (the
default) and called per env (``reference_table_bytes=0``, the path before the tables) side by
side, or the untrained policy goes on (resets every ≈ 40 steps: early training).

The clock is the process's CPU time, with one rollout thread: the work done per env-step, which
other processes on a shared machine barely move (its wall time there swings by 3× and more).
Every block is timed right after a block of the floor (raw ``mj_step`` × substeps,
:class:`~residual_quad.evaluation.bench.vector.Floor`, on the same clock); the ratio is the median
of neighbouring pairs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

DESYNC_STEPS = 60  # policy steps of the untrained policy before timing: scattered episode ends


def load_shipped_policy(model: Any, venv: Any) -> None:
    """Start ``model`` from the shipped ``ppo`` policy (weights and frozen observation
    statistics): its training episodes last (a trained run's cost), instead of crashing within
    ≈ 40 policy steps as an untrained policy's do (resets, envs on the ground)."""
    from residual_quad.controllers.policy_file import default_policy_path, import_sb3, read_meta

    path = default_policy_path()
    shipped = import_sb3().PPO.load(path, device="cpu")
    model.policy.load_state_dict(shipped.policy.state_dict())
    stats = read_meta(path)["obs_norm"]
    venv.obs_rms.mean = np.array(stats["mean"])
    venv.obs_rms.var = np.array(stats["var"])
    venv.obs_rms.count = 1e9  # frozen in effect: the statistics barely move


def _training_env(n_envs: int, reference_table_bytes: int | None) -> tuple[Any, Any]:
    """(``VecNormalize``-wrapped training env of ``configs/ppo.yaml`` at ``n_envs``, an SB3
    PPO model on it)."""
    import torch

    from residual_quad import configs
    from residual_quad.training.ppo_config import PPOTrainConfig
    from residual_quad.training.ppo_model import make_training_env, new_model, normalized

    base = configs.to_dict(configs.load(PPOTrainConfig, "ppo"))
    ppo = {**base["ppo"], "n_steps": 8, "batch_size": 8 * n_envs}
    cfg = configs.load(PPOTrainConfig, {**base, "n_envs": n_envs, "env_threads": 1, "ppo": ppo})
    torch.set_num_threads(max(1, cfg.torch_threads))
    tables: dict[str, int] = {}
    if reference_table_bytes is not None:
        tables["reference_table_bytes"] = reference_table_bytes
    venv = make_training_env(cfg, **tables)
    venv.seed(cfg.seed)
    venv = normalized(venv, cfg)
    return venv, new_model(cfg, venv)


class _Training:
    """One training env on its way: its policy steps, the env's step timed on ``clock``."""

    def __init__(
        self,
        n_envs: int,
        flying: bool,
        reference_table_bytes: int | None,
        clock: Callable[[], float],  # s
    ):
        self.venv, self.model = _training_env(n_envs, reference_table_bytes)
        self.inner = self.venv.unwrapped
        self.clock = clock
        self.obs = self.venv.reset()
        for _ in range(DESYNC_STEPS):
            self.step()
        if flying:
            load_shipped_policy(self.model, self.venv)
        for _ in range(10):
            self.step()

    def step(self) -> tuple[float, int]:
        """(seconds the env's step took, control periods it simulated, all envs)."""
        action = self.model.predict(self.obs, deterministic=False)[0]
        t0 = self.clock()
        raw, _, _, infos = self.inner.step(action)
        elapsed = self.clock() - t0
        self.obs = self.venv.normalize_obs(raw)
        return elapsed, sum(info["control_steps"] for info in infos)


def in_training(
    n_envs: int,
    variants: list[tuple[bool, int | None]],
    *,
    steps: int,  # policy steps per timed block
    repeats: int,
    floor: Any,
) -> list[tuple[float, float]]:
    """(median µs per env-step, median ratio to the floor) of the training env's step for each
    variant (``flying``, ``reference_table_bytes``), their blocks interleaved."""
    runs = [_Training(n_envs, flying, table, floor.clock) for flying, table in variants]
    times: list[list[float]] = [[] for _ in runs]
    ratios: list[list[float]] = [[] for _ in runs]
    try:
        for _ in range(repeats):
            for run, t, r in zip(runs, times, ratios, strict=True):
                f = floor()
                elapsed, periods = 0.0, 0
                for _ in range(steps):
                    e, p = run.step()
                    elapsed += e
                    periods += p
                t.append(elapsed / periods * 1e6)
                r.append(t[-1] / f)
    finally:
        for run in runs:
            run.venv.close()
    return [(float(np.median(t)), float(np.median(r))) for t, r in zip(times, ratios, strict=True)]


def training_rows(quick: bool) -> list[BenchRow]:
    """The ``rl`` section's rows: the floor, then the env side in training at N = 64 (quick) or
    256, in CPU time."""
    from residual_quad.evaluation.bench.vector import Floor

    floor = Floor(time.process_time)
    n = 64 if quick else 256
    steps, repeats = (4, 2) if quick else (10, 7)
    for _ in range(3):  # warm-up
        floor()
    variants = {
        "shipped policy, references tabulated": (True, None),
        "shipped policy, references called per env": (True, 0),
        "untrained policy (resets)": (False, None),
    }
    measured = in_training(n, list(variants.values()), steps=steps, repeats=repeats, floor=floor)
    floor.env.close()
    rows = [
        BenchRow(
            "rl",
            "raw mj_step x substeps, one model (the floor, CPU time)",
            float(np.median(floor.times)),
            1.0,
        )
    ]
    for what, (t, ratio) in zip(variants, measured, strict=True):
        rows.append(
            BenchRow("rl", f"env side in PPO training, N={n}, {what} (CPU time)", t, ratio, "floor")
        )
    return rows
