"""``rquad bench --sections rl``: the env side of PPO training per env-step, beside the floor.

The time of the training env's own step — the SB3 adapter
:class:`~residual_quad.training.ppo_vec.QuadVecEnv` over the vector env, built by
``rquad train ppo``'s code from ``configs/ppo.yaml`` (domain randomization, action repeat 2,
same-step autoresets, per-env ``infos``) — per control period simulated, the policy's forward
pass and SB3's wrappers outside the clock. The envs' episodes are first put out of step as in a
training run (an untrained policy's crashes end them at scattered times); then the shipped
``ppo`` policy flies (long episodes: most of a training run), its references tabulated (the
default) and called per env (``reference_table_bytes=0``, the path before the tables) side by
side, or the untrained policy goes on (resets every ≈ 40 steps: early training). Every block is
timed right after a block of the floor (raw ``mj_step`` × substeps,
:class:`~residual_quad.evaluation.bench_vector.Floor`); the ratio is the median of neighbouring
pairs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from residual_quad.evaluation.bench import BenchRow

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
    env_kwargs = dict(base["env_kwargs"])
    if reference_table_bytes is not None:
        env_kwargs["reference_table_bytes"] = reference_table_bytes
    ppo = {**base["ppo"], "n_steps": 8, "batch_size": 8 * n_envs}
    cfg = configs.load(
        PPOTrainConfig, {**base, "n_envs": n_envs, "ppo": ppo, "env_kwargs": env_kwargs}
    )
    torch.set_num_threads(max(1, cfg.torch_threads))
    venv = make_training_env(cfg)
    venv.seed(cfg.seed)
    venv = normalized(venv, cfg)
    return venv, new_model(cfg, venv)


def in_training(
    n_envs: int,
    *,
    flying: bool,
    reference_table_bytes: int | None,
    steps: int,  # policy steps per timed block
    repeats: int,
    floor: Any,
) -> tuple[float, float]:
    """(median µs per env-step, median ratio to the floor) of the training env's step."""
    venv, model = _training_env(n_envs, reference_table_bytes)
    inner = venv.unwrapped
    try:
        obs = venv.reset()

        def policy_step() -> tuple[float, int]:
            nonlocal obs
            action = model.predict(obs, deterministic=False)[0]
            t0 = time.perf_counter()
            raw, _, _, infos = inner.step(action)
            elapsed = time.perf_counter() - t0
            obs = venv.normalize_obs(raw)
            return elapsed, sum(info["control_steps"] for info in infos)

        for _ in range(DESYNC_STEPS):
            policy_step()
        if flying:
            load_shipped_policy(model, venv)
        for _ in range(10):
            policy_step()
        times, ratios = [], []
        for _ in range(repeats):
            f = floor()
            elapsed, periods = 0.0, 0
            for _ in range(steps):
                e, p = policy_step()
                elapsed += e
                periods += p
            times.append(elapsed / periods * 1e6)
            ratios.append(times[-1] / f)
    finally:
        venv.close()
    return float(np.median(times)), float(np.median(ratios))


def training_rows(quick: bool) -> list[BenchRow]:
    """The ``rl`` section's rows: the floor, then the env side in training at N = 64 (quick) or
    256."""
    from residual_quad.evaluation.bench_vector import Floor

    floor = Floor()
    n = 64 if quick else 256
    steps, repeats = (4, 2) if quick else (10, 5)
    for _ in range(3):  # warm-up
        floor()
    rows = []
    for what, flying, table in (
        ("shipped policy, references tabulated", True, None),
        ("shipped policy, references called per env", True, 0),
        ("untrained policy (resets)", False, None),
    ):
        t, ratio = in_training(
            n, flying=flying, reference_table_bytes=table, steps=steps, repeats=repeats, floor=floor
        )
        rows.append(BenchRow("rl", f"env side in PPO training, N={n}, {what}", t, ratio, "floor"))
    floor.env.close()
    floor_us = float(np.median(floor.times))
    head = BenchRow("rl", "raw mj_step x substeps, one model (the floor)", floor_us, 1.0)
    return [head, *rows]
