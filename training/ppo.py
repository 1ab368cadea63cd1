"""PPO baseline: stable-baselines3 PPO on ``ResidualQuad-v0`` with domain randomization.

Every episode of every training env draws a scenario — payload × wind × trajectory from the
config's lists (``extra`` is refused: it is held out for evaluation, as for the residual network)
— and a fresh env seed from its own seeded generator. The policy sees
:func:`residual_quad.controllers.ppo.ppo_features` of the observation (the one function the
deployed adapter uses too), optionally normalized by ``VecNormalize`` whose frozen statistics are
saved inside the policy file. Environments run in ``SubprocVecEnv`` worker processes (one per env).

Outputs of :func:`train` in ``out``: ``config.yaml`` (resolved), ``tb/`` (TensorBoard: SB3's
``train/*`` and ``rollout/*`` plus ``rollout/pos_err_m``, ``rollout/crash_rate`` and the tracking
evaluation ``eval/*``), ``checkpoints/ppo_<steps>.zip``, ``best.zip`` (best evaluation: fewest
crashes, then lowest mean RMSE), ``final.zip`` and ``summary.json`` (budget: steps, wall time,
envs, load average). Every ``.zip`` loads with ``make_controller("ppo", path=...)``.

stable-baselines3 and torch are imported when :func:`train` runs, never at import time.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from residual_quad import configs
from residual_quad.controllers.ppo import (
    FEATURE_DIM,
    ObsNormalizer,
    PPOController,
    import_sb3,
    ppo_features,
    write_meta,
)
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.episode import RunSpec, fly

HELD_OUT_PAYLOADS = ("extra",)


@dataclass
class PPOHyperparams:
    """SB3 ``PPO`` arguments (``n_steps`` is per env; one update uses ``n_steps·n_envs`` steps)."""

    learning_rate: float = 3e-4
    lr_final: float | None = 1e-4  # linear decay to this at the end; None = constant
    n_steps: int = 1024
    batch_size: int = 256
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    net_arch: list[int] = field(default_factory=lambda: [64, 64])  # pi and vf, each
    activation: str = "tanh"  # tanh | relu | elu
    log_std_init: float = -1.6  # initial exploration std = exp(log_std_init) in action units


@dataclass
class PPOTrainConfig:
    """``rquad train ppo`` settings (``configs/ppo.yaml``)."""

    seed: int = 0
    total_steps: int = 1_400_000  # policy decisions (PPO timesteps), all envs together
    n_envs: int | None = 2  # None → os.cpu_count(); part of the data, so fix it to reproduce
    action_mode: str = "rotor"  # beat ctbr at equal budget (docs/ppo.md)
    action_repeat: int = 2  # control periods each policy action is held (the adapter does too)
    payloads: list[str] = field(default_factory=lambda: ["none", "light", "heavy"])
    winds: list[str] = field(default_factory=lambda: ["calm", "breezy", "windy"])
    trajectories: list[str] = field(default_factory=lambda: ["hover", "helix", "figure8"])
    episode_s: float = 20.0  # s per training episode
    start_pos_noise: float = 0.0  # m, uniform start offset per axis (robustness to off starts)
    max_position_error: float = 1.5  # m, training episodes end beyond it (evaluation: env's 5 m)
    # env reward overrides; alive 2: with 1 the reward turns negative beyond ~1 m (docs/ppo.md)
    reward_weights: dict[str, float] = field(default_factory=lambda: {"alive": 2.0})
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # other ResidualQuad-v0 kwargs
    normalize_obs: bool = True  # VecNormalize on the features (stats saved with the policy)
    normalize_reward: bool = True  # VecNormalize return scaling (training only)
    clip_obs: float = 10.0
    eval_freq: int = 140_000  # policy steps between tracking evaluations (0: only at the end)
    eval_scenarios: list[list[str]] = field(
        default_factory=lambda: [
            ["heavy", "windy", "helix"],
            ["heavy", "windy", "figure8"],
            ["heavy", "windy", "hover"],
            ["none", "windy", "helix"],
            ["light", "breezy", "figure8"],
            ["none", "calm", "hover"],
        ]
    )  # [payload, wind, trajectory], flown deterministically for 20 s
    eval_seed: int = 1000
    checkpoint_freq: int = 280_000  # policy steps between checkpoints (0: none)
    torch_threads: int = 1  # intra-op threads of the learner (1: reproducible, leaves cores)
    ppo: PPOHyperparams = field(default_factory=PPOHyperparams)

    def __post_init__(self) -> None:
        if self.action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {self.action_mode!r}")
        for kind, values, valid in (
            ("payloads", self.payloads, PAYLOAD_LEVELS),
            ("winds", self.winds, WIND_LEVELS),
            ("trajectories", self.trajectories, TRAJECTORIES),
        ):
            if not values:
                raise ValueError(f"{kind} must not be empty")
            bad = [v for v in values if v not in valid]
            if bad:
                raise ValueError(f"unknown {kind} {bad}; valid: {', '.join(valid)}")
        held = sorted(set(self.payloads) & set(HELD_OUT_PAYLOADS))
        if held:
            raise ValueError(f"payload(s) {held} are held out for evaluation; never train on them")
        for sc in self.eval_scenarios:
            if len(sc) != 3:
                raise ValueError(f"eval_scenarios entries are [payload, wind, trajectory]: {sc}")
        if self.total_steps <= 0 or (self.n_envs is not None and self.n_envs < 1):
            raise ValueError("total_steps and n_envs must be positive")
        if self.action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {self.action_repeat}")
        reserved = {"payload", "wind", "trajectory", "action_mode", "episode_s", "seed"}
        reserved |= {"reward_weights", "max_position_error"}
        clash = sorted(reserved & set(self.env_kwargs))
        if clash:
            raise ValueError(f"env_kwargs may not set {clash}: they have their own keys")
        if self.ppo.activation not in _ACTIVATIONS:
            raise ValueError(f"ppo.activation must be one of {list(_ACTIVATIONS)}")

    def resolved_envs(self) -> int:
        """Number of training envs (one worker process each)."""
        return self.n_envs or os.cpu_count() or 1


_ACTIVATIONS = ("tanh", "relu", "elu")


class ScenarioEnv(gym.Env):
    """Domain-randomized ``ResidualQuad-v0`` that emits :func:`ppo_features`.

    On every ``reset`` a scenario (payload, wind, trajectory) is drawn uniformly from the lists,
    or taken from ``options["scenario"]``, and the inner env is rebuilt for it (≈3 ms) and reset
    with a seed drawn from this env's generator. Each action is held for ``action_repeat`` control
    periods (rewards summed), as :class:`~residual_quad.controllers.ppo.PPOController` does when
    flying. ``info`` carries the inner env's last info plus ``scenario``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        payloads: list[str],
        winds: list[str],
        trajectories: list[str],
        action_mode: str = "ctbr",
        action_repeat: int = 1,
        episode_s: float = 20.0,
        start_pos_noise: float = 0.0,
        reward_weights: dict[str, float] | None = None,
        **env_kwargs: Any,
    ):
        self.scenarios = [(p, w, t) for p in payloads for w in winds for t in trajectories]
        self.action_mode = action_mode
        self.action_repeat = action_repeat
        self.episode_s = episode_s
        self.start_pos_noise = start_pos_noise
        self.env_kwargs = {**env_kwargs, "reward_weights": reward_weights or None}
        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        # finite: the raw observation bounds (≤ 1e6) divided by feature scales ≥ 1
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(FEATURE_DIM,), dtype=np.float32)
        self.inner: ResidualQuadEnv | None = None
        self.scenario: tuple[str, str, str] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        if "scenario" in options:
            scenario = tuple(options.pop("scenario"))
        else:
            scenario = self.scenarios[int(self.np_random.integers(len(self.scenarios)))]
        payload, wind, trajectory = scenario
        self.inner = ResidualQuadEnv(
            payload=payload,
            wind=wind,
            trajectory=trajectory,
            action_mode=self.action_mode,
            episode_s=self.episode_s,
            **self.env_kwargs,
        )
        self.scenario = scenario
        if self.start_pos_noise > 0 and "position_offset" not in options:
            n = self.start_pos_noise
            offset = self.np_random.uniform(-n, n, 3)
            offset[2] = max(offset[2], -0.5 * n)  # not into the floor
            options["position_offset"] = offset
        obs, info = self.inner.reset(
            seed=int(self.np_random.integers(2**31)), options=options or None
        )
        info["scenario"] = scenario
        return ppo_features(obs), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.inner is not None, "call reset() first"
        total, k = 0.0, 0
        while True:
            obs, reward, terminated, truncated, info = self.inner.step(action)
            total, k = total + reward, k + 1
            if terminated or truncated or k == self.action_repeat:
                break
        info["scenario"] = self.scenario
        info["control_steps"] = k
        return ppo_features(obs), total, terminated, truncated, info


def _make_env(cfg: PPOTrainConfig) -> ScenarioEnv:
    return ScenarioEnv(
        cfg.payloads,
        cfg.winds,
        cfg.trajectories,
        action_mode=cfg.action_mode,
        action_repeat=cfg.action_repeat,
        episode_s=cfg.episode_s,
        start_pos_noise=cfg.start_pos_noise,
        reward_weights=cfg.reward_weights,
        max_position_error=cfg.max_position_error,
        **cfg.env_kwargs,
    )


class _EnvFactory:
    """Picklable env constructor for ``SubprocVecEnv`` (Monitor records episode stats)."""

    def __init__(self, cfg: PPOTrainConfig):
        self.cfg = cfg

    def __call__(self) -> gym.Env:
        from stable_baselines3.common.monitor import Monitor

        return Monitor(_make_env(self.cfg))


def obs_norm_stats(vec_env: Any) -> dict[str, Any] | None:
    """Frozen observation statistics of a ``VecNormalize`` (``None`` when not normalizing)."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(vec_env, VecNormalize) or not vec_env.norm_obs:
        return None
    return {
        "mean": vec_env.obs_rms.mean.tolist(),
        "var": vec_env.obs_rms.var.tolist(),
        "epsilon": float(vec_env.epsilon),
        "clip": float(vec_env.clip_obs),
    }


def save_policy(
    model: Any, path: str | Path, cfg: PPOTrainConfig, vec_env: Any, **record: Any
) -> Path:
    """Write ``model`` plus the ``residual_quad.json`` record (action mode, obs stats, config)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    if path.suffix != ".zip":  # SB3 appends .zip
        path = path.with_name(path.name + ".zip")
    env_kwargs = dict(cfg.env_kwargs)
    write_meta(
        path,
        {
            "action_mode": cfg.action_mode,
            "action_repeat": cfg.action_repeat,
            "env_kwargs": env_kwargs,
            "obs_norm": obs_norm_stats(vec_env),
            "config": configs.to_dict(cfg),
            **_clean(record),
        },
    )
    return path


def evaluate_tracking(
    controller: Any,
    scenarios: list[list[str]] | list[tuple[str, str, str]],
    seed: int = 0,
    episode_s: float = 20.0,
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """Fly ``controller`` once per scenario (``run_episode``: RMSE after 3 s, crash flag)."""
    rows = []
    for payload, wind, trajectory in scenarios:
        spec = RunSpec("ppo", payload, wind, trajectory, seed, episode_s=episode_s)
        r = fly(spec, env_kwargs, controller=controller)
        rows.append(
            {
                "payload": payload,
                "wind": wind,
                "trajectory": trajectory,
                "rmse": r.rmse,
                "max_error": r.max_error,
                "diverged": r.diverged,
                "termination": r.termination,
            }
        )
    return rows


def _callbacks(cfg: PPOTrainConfig, out: Path, vec_env: Any, progress: bool) -> list[Any]:
    """Progress bar, rollout tracking stats, tracking evaluation (+ best.zip) and checkpoints."""
    from stable_baselines3.common.callbacks import BaseCallback

    n_envs = vec_env.num_envs

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=cfg.total_steps,
                unit="step",
                unit_scale=True,
                desc="ppo",
                disable=not progress,
            )

        def _on_step(self) -> bool:
            self.bar.update(n_envs)
            return True

        def _on_training_end(self) -> None:
            self.bar.close()

    class RolloutStats(BaseCallback):
        """Mean position error and crash share of the training episodes (TensorBoard)."""

        def _on_training_start(self) -> None:
            self.control_steps = 0  # env control periods simulated, all envs

        def _on_rollout_start(self) -> None:
            self.err_sum, self.err_n, self.ends, self.crashes = 0.0, 0, 0, 0

        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                self.control_steps += info.get("control_steps", 1)
                self.err_sum += info.get("position_error", 0.0)
                self.err_n += 1
                if done:
                    self.ends += 1
                    self.crashes += bool(info.get("diverged"))
            return True

        def _on_rollout_end(self) -> None:
            if self.err_n:
                self.logger.record("rollout/pos_err_m", self.err_sum / self.err_n)
            if self.ends:
                self.logger.record("rollout/crash_rate", self.crashes / self.ends)

    class TrackingEval(BaseCallback):
        """Fly the eval scenarios deterministically; keep the best policy as ``best.zip``."""

        def __init__(self) -> None:
            super().__init__()
            self.next_eval = cfg.eval_freq if cfg.eval_freq > 0 else math.inf
            self.best: tuple[int, float] | None = None
            self.history: list[dict[str, Any]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += cfg.eval_freq
                self.evaluate()
            return True

        def evaluate(self) -> dict[str, Any]:
            normalizer = ObsNormalizer.from_meta(obs_norm_stats(vec_env))
            ctrl = PPOController.from_model(
                self.model, cfg.action_mode, normalizer, cfg.action_repeat
            )
            rows = evaluate_tracking(ctrl, cfg.eval_scenarios, seed=cfg.eval_seed, **cfg.env_kwargs)
            crashes = sum(r["diverged"] for r in rows)
            finite = [r["rmse"] for r in rows if math.isfinite(r["rmse"])]
            # mean over the flights that did not crash (the crash count ranks first anyway)
            mean_rmse = float(np.mean(finite)) if finite else math.inf
            self.logger.record("eval/crashes", crashes)
            if finite:
                self.logger.record("eval/rmse_mean_m", mean_rmse)
            for r in rows:
                if math.isfinite(r["rmse"]):
                    key = f"eval/rmse_{r['payload']}_{r['wind']}_{r['trajectory']}"
                    self.logger.record(key, r["rmse"])
            self.logger.dump(self.num_timesteps)
            entry = {"steps": self.num_timesteps, "crashes": crashes, "rmse_mean": mean_rmse}
            self.history.append({**entry, "rows": rows})
            score = (crashes, mean_rmse)
            if self.best is None or score < self.best:
                self.best = score
                save_policy(
                    self.model, out / "best.zip", cfg, vec_env, steps=self.num_timesteps, eval=rows
                )
            return entry

    class Checkpoint(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_save = cfg.checkpoint_freq if cfg.checkpoint_freq > 0 else math.inf

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_save:
                self.next_save += cfg.checkpoint_freq
                path = out / "checkpoints" / f"ppo_{self.num_timesteps}.zip"
                save_policy(self.model, path, cfg, vec_env, steps=self.num_timesteps)
            return True

    return [Progress(), RolloutStats(), TrackingEval(), Checkpoint()]


def train(
    cfg: PPOTrainConfig, out: str | Path, progress: bool = True, verbose: int = 0
) -> dict[str, Any]:
    """Train PPO per ``cfg``; write the run folder ``out`` (see module docstring); summary dict."""
    sb3 = import_sb3()
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    configs.dump(cfg, out / "config.yaml")
    n_envs = cfg.resolved_envs()
    torch.set_num_threads(max(1, cfg.torch_threads))
    factories = [_EnvFactory(cfg) for _ in range(n_envs)]
    venv = SubprocVecEnv(factories) if n_envs > 1 else DummyVecEnv(factories)
    venv.seed(cfg.seed)
    if cfg.normalize_obs or cfg.normalize_reward:
        venv = VecNormalize(
            venv,
            norm_obs=cfg.normalize_obs,
            norm_reward=cfg.normalize_reward,
            clip_obs=cfg.clip_obs,
            gamma=cfg.ppo.gamma,
        )
    h = cfg.ppo
    lr: Any = h.learning_rate
    if h.lr_final is not None:
        lr0, lr1 = h.learning_rate, h.lr_final
        lr = _LinearSchedule(lr0, lr1)
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[h.activation]
    model = sb3.PPO(
        "MlpPolicy",
        venv,
        learning_rate=lr,
        n_steps=h.n_steps,
        batch_size=h.batch_size,
        n_epochs=h.n_epochs,
        gamma=h.gamma,
        gae_lambda=h.gae_lambda,
        clip_range=h.clip_range,
        ent_coef=h.ent_coef,
        vf_coef=h.vf_coef,
        max_grad_norm=h.max_grad_norm,
        target_kl=h.target_kl,
        policy_kwargs={
            "net_arch": {"pi": list(h.net_arch), "vf": list(h.net_arch)},
            "activation_fn": act,
            "log_std_init": h.log_std_init,
        },
        tensorboard_log=str(out / "tb"),
        seed=cfg.seed,
        device="cpu",
        verbose=verbose,
    )
    callbacks = _callbacks(cfg, out, venv, progress)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        model.learn(
            total_timesteps=cfg.total_steps,
            callback=callbacks,
            tb_log_name="ppo",
            progress_bar=False,
        )
        train_wall = time.perf_counter() - t0
        evaluator = callbacks[2]
        final_eval = evaluator.evaluate()
    finally:
        venv.close()
    wall = time.perf_counter() - t0
    budget = {
        "steps": int(model.num_timesteps),  # policy decisions (PPO timesteps)
        "control_steps": int(callbacks[1].control_steps),  # 10 ms env periods simulated
        "train_wall_s": round(train_wall, 1),
        "wall_s": round(wall, 1),
        "n_envs": n_envs,
        "cpu_count": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "seed": cfg.seed,
        "action_mode": cfg.action_mode,
        "versions": _versions(),
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
        "evals": [{k: v for k, v in e.items() if k != "rows"} for e in evaluator.history],
        "tensorboard": str(out / "tb"),
    }
    (out / "summary.json").write_text(json.dumps(_clean(summary), indent=1))
    return summary


def export_policy(
    run_dir: str | Path, dest: str | Path, which: str = "best", command: str | None = None
) -> dict[str, Any]:
    """Copy a run's ``best``/``final`` policy to ``dest`` with its training budget.

    The budget (policy and control steps, wall time, envs, load, versions, the step at which the
    exported policy was saved, the command) goes into the policy's ``residual_quad.json`` record
    and into ``dest`` with the suffix ``.json`` next to it. Returns the budget.
    """
    from residual_quad.controllers.ppo import read_meta

    run_dir, dest = Path(run_dir), Path(dest)
    if which not in ("best", "final"):
        raise ValueError(f"which must be 'best' or 'final', got {which!r}")
    summary = json.loads((run_dir / "summary.json").read_text())
    src = run_dir / f"{which}.zip"
    meta = read_meta(src)
    keys = ("steps", "control_steps", "train_wall_s", "wall_s", "n_envs", "cpu_count")
    keys += ("load_avg_before", "load_avg_after", "seed", "action_mode", "versions", "host")
    budget = {k: summary[k] for k in keys}
    budget["action_repeat"] = meta.get("action_repeat", 1)
    budget["policy_saved_at_steps"] = meta.get("steps")
    budget["selection"] = which
    budget["eval_at_selection"] = meta.get("eval")
    budget["command"] = command or f"rquad train ppo --out {run_dir} --seed {summary['seed']}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(src.read_bytes())
    meta.pop("format", None), meta.pop("feature_version", None)
    write_meta(dest, {**meta, "budget": _clean(budget)})
    dest.with_suffix(".json").write_text(json.dumps(_clean(budget), indent=1) + "\n")
    return budget


class _LinearSchedule:
    """Learning rate linear in training progress (picklable, unlike a lambda)."""

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end

    def __call__(self, progress_remaining: float) -> float:
        return self.end + (self.start - self.end) * progress_remaining


def _versions() -> dict[str, str]:
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


def _clean(x: Any) -> Any:
    """JSON-safe copy: non-finite floats → None, numpy scalars → Python, tuples → lists."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
