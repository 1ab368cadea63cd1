"""A training run's policy files: what :func:`save_policy` writes and :func:`export_policy` ships.

:func:`save_policy` writes ``best.zip``, ``final.zip`` and the checkpoints of a run in the
:mod:`residual_quad.controllers.policy_file` format, with the record a controller needs (kind,
action mode and repeat, env arguments, frozen observation statistics) and the run's config;
:func:`export_policy` copies a run's ``best``/``final`` policy to ``controllers/weights/`` with
its training budget. Every file loads with ``make_controller(kind, path=...)``, ``kind`` the
record's ``controller`` (``ppo``, ``ppo_res``, ``sac``, ``tqc``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.attitude import default_attitude_gains
from residual_quad.controllers.obs_norm import obs_norm_stats
from residual_quad.controllers.policy_file import (
    ACCELERATION_KINDS,
    ACTION_DIMS,
    CORE_DEFAULTS,
    POLICY_ALGOS,
    read_meta,
    recorded_algo,
    save_model,
    write_meta,
)
from residual_quad.episode import control_context
from residual_quad.training.ppo_config import PPOTrainConfig


def save_policy(
    model: Any, path: str | Path, cfg: PPOTrainConfig, vec_env: Any, **record: Any
) -> Path:
    """Write ``model`` plus the ``residual_quad.json`` record (action mode, obs stats, config)."""
    kind: dict[str, Any] = {"controller": cfg.deployed_name(), "algo": cfg.algo}
    if cfg.controller in ACCELERATION_KINDS:
        kind["accel_scale"] = cfg.accel_scale
        if cfg.correction_rate is not None:  # rate mode; absolute files carry no entry
            kind["correction_rate"] = cfg.correction_rate
        if cfg.tracker != ACCELERATION_KINDS[cfg.controller][0]:  # a default: no entry
            kind["tracker"] = cfg.tracker
        gains = cfg.tracker_gains()
        if gains is None and cfg.core == "plant":
            # the plant's default gains, recorded: a later change of the defaults must not
            # change the loop this policy learned over
            told = control_context(dict(cfg.env_kwargs))
            gains = default_attitude_gains(told.rotor_tau_s, told.dead_time_s)
        if gains is not None:  # files of the default inner loop carry no entry
            kind["attitude"] = dataclasses.asdict(gains)
        if cfg.core != CORE_DEFAULTS[0]:  # files of the source's defaults carry no entry
            kind["core"] = cfg.core
    if cfg.controller == "ppo_adapt":
        from residual_quad.controllers.ppo_adapt import adapt_record

        kind.update(adapt_record(cfg.estimate_feedforward))
    spec = cfg.features.spec()
    if not spec.empty:  # files of the base features carry no entry (read as the empty spec)
        kind["features"] = spec.to_record()
        kind["observation_layout"] = spec.layout_name(ACTION_DIMS[cfg.controller])
    if cfg.privileged_critic:  # the model's inputs after the actor's (the critic's only)
        from residual_quad.training.privileged import PRIVILEGED_NAMES

        kind["privileged_columns"] = list(PRIVILEGED_NAMES)
    return save_model(
        model,
        path,
        {
            **kind,
            "action_mode": cfg.action_mode,
            "action_repeat": cfg.action_repeat,
            "env_kwargs": dict(cfg.env_kwargs),
            "obs_norm": obs_norm_stats(vec_env),
            "config": configs.to_dict(cfg),
            **json_safe(record),
        },
    )


def export_policy(
    run_dir: str | Path, dest: str | Path, which: str = "best", command: str | None = None
) -> dict[str, Any]:
    """Copy a run's ``best``/``final`` policy to ``dest`` with its training budget.

    The budget (policy and control steps, wall time, envs, load, versions, the step at which the
    exported policy was saved, the command) goes into the policy's ``residual_quad.json`` record
    and into ``dest`` with the suffix ``.json`` next to it. Returns the budget.
    """
    run_dir, dest = Path(run_dir), Path(dest)
    if which not in ("best", "final"):
        raise ValueError(f"which must be 'best' or 'final', got {which!r}")
    summary = json.loads((run_dir / "summary.json").read_text())
    src = run_dir / f"{which}.zip"
    meta = read_meta(src)
    keys = ("steps", "control_steps", "train_wall_s", "wall_s", "n_envs", "cpu_count")
    keys += ("load_avg_before", "load_avg_after", "seed", "action_mode", "versions", "host")
    budget = {k: summary[k] for k in keys}
    budget["backend"] = summary.get("backend", "subproc")  # runs before the vector backend
    budget["action_repeat"] = meta.get("action_repeat", 1)
    budget["policy_saved_at_steps"] = meta.get("steps")
    budget["selection"] = which
    budget["eval_at_selection"] = meta.get("eval")
    kind = meta.get("controller", "ppo")  # a rotor-level sac/tqc run's files name their learner
    # an acceleration policy learned off-policy: its kind's default config is PPO's, so the
    # command names the run's own
    config = "" if recorded_algo(meta, kind) == POLICY_ALGOS[kind][0] else f" {run_dir}/config.yaml"
    budget["command"] = (
        command or f"rquad train {kind}{config} --out {run_dir} --seed {summary['seed']}"
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(src.read_bytes())
    meta.pop("format", None), meta.pop("feature_version", None)
    write_meta(dest, {**meta, "budget": json_safe(budget)})
    dest.with_suffix(".json").write_text(json.dumps(json_safe(budget), indent=1) + "\n")
    return budget


def versions() -> dict[str, str]:
    """Versions of the libraries a training result depends on (for the run's budget)."""
    import gymnasium
    import mujoco
    import stable_baselines3
    import torch

    return {
        "stable_baselines3": stable_baselines3.__version__,
        "torch": torch.__version__,
        "mujoco": mujoco.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
    }


def json_safe(x: Any) -> Any:
    """JSON-safe copy: non-finite floats → None, numpy scalars → Python, tuples → lists."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
