"""The SB3 callbacks of a PPO training run, each a ``BaseCallback`` of its own.

:class:`TrainingProgress` (tqdm bar), :class:`RolloutStats` (position error and crash share of the
training episodes, TensorBoard ``rollout/*``), :class:`TrackingEval` (the evaluation flights,
``eval/*``, ``best.zip``) and :class:`RunCheckpoint` (``checkpoints/``). A callback that needs
another's state holds it explicitly — :class:`RunCheckpoint` is given the :class:`RolloutStats`
and the :class:`TrackingEval` whose counts and history its checkpoints record, as SB3's own
``EvalCallback(callback_on_new_best=...)`` is given its child. :class:`RewardProgress` tells a
precision reward's env the fraction of the budget done (its annealing). :func:`training_callbacks`
builds those of a run (:class:`TrainingCallbacks`), in the order SB3 calls them.

This module imports stable-baselines3: :mod:`residual_quad.training.ppo` imports it only when
training runs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from residual_quad.controllers.obs_norm import ObsNormalizer, obs_norm_stats
from residual_quad.controllers.policy_file import (
    ACCELERATION_KINDS,
    ACTION_DIMS,
)
from residual_quad.controllers.ppo import controller_class
from residual_quad.episode import RunSpec, fly
from residual_quad.training.checkpoints import RunState, save_checkpoint
from residual_quad.training.export import save_policy
from residual_quad.training.ppo_config import PPOTrainConfig


def policy_controller(model: Any, cfg: PPOTrainConfig, vec_env: Any) -> Any:
    """The deployed controller of the in-memory ``model`` (``ppo``, ``ppo_res``, ``ppo_adapt``,
    ``sac`` or ``tqc``), with the normalization statistics of ``vec_env`` as they are now."""
    spec = cfg.features.spec()
    dim = spec.dim(ACTION_DIMS[cfg.controller])
    normalizer = ObsNormalizer.from_meta(obs_norm_stats(vec_env), dim)
    if cfg.controller in ACCELERATION_KINDS:
        from residual_quad.controllers.base import resolve_factory

        return resolve_factory(cfg.controller).from_model(
            model,
            cfg.accel_scale,
            normalizer,
            cfg.action_repeat,
            spec,
            cfg.correction_rate,
            cfg.tracker,
            cfg.tracker_gains(),
            cfg.core,
            cfg.env_kwargs,
        )
    if cfg.controller == "ppo_adapt":
        from residual_quad.controllers.ppo_adapt import PPOAdaptController, adapt_record

        return PPOAdaptController.from_model(
            model,
            cfg.action_mode,
            normalizer,
            cfg.action_repeat,
            spec,
            adapt_record(cfg.estimate_feedforward),
        )
    cls = controller_class(cfg.deployed_name())
    return cls.from_model(model, cfg.action_mode, normalizer, cfg.action_repeat, spec)


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


def next_multiple(freq: int, steps: int) -> float:
    """The first multiple of ``freq`` above ``steps`` (``inf`` when ``freq`` is 0)."""
    return (steps // freq + 1) * freq if freq > 0 else math.inf


class TrainingProgress(BaseCallback):
    """A tqdm bar over the run's policy steps (from ``initial`` on a resume)."""

    def __init__(self, total: int, initial: int, n_envs: int, enabled: bool = True):
        super().__init__()
        self.total, self.initial, self.n_envs, self.enabled = total, initial, n_envs, enabled

    def _on_training_start(self) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=self.total,
            initial=self.initial,
            unit="step",
            unit_scale=True,
            desc="ppo",
            disable=not self.enabled,
        )

    def _on_step(self) -> bool:
        self.bar.update(self.n_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


class RolloutStats(BaseCallback):
    """Mean position error and crash share of the training episodes (TensorBoard), and the
    control periods simulated so far, all envs (``control_steps``, from ``control_steps`` on a
    resume).

    PPO records them per rollout (``window`` 0). An off-policy learner's collection is a few
    vector steps, so its figures are pooled over at least ``window`` policy steps (all envs)
    before each record."""

    def __init__(self, control_steps: int = 0, window: int = 0):
        super().__init__()
        self.initial_control_steps = control_steps
        self.window = int(window)

    def _on_training_start(self) -> None:
        self.control_steps = self.initial_control_steps
        self.err_sum, self.err_n, self.ends, self.crashes = 0.0, 0, 0, 0

    def _on_rollout_start(self) -> None:
        if self.err_n >= self.window:  # the last window was recorded: a new one
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
        if self.err_n < self.window:
            return
        if self.err_n:
            self.logger.record("rollout/pos_err_m", self.err_sum / self.err_n)
        if self.ends:
            self.logger.record("rollout/crash_rate", self.crashes / self.ends)


class TrackingEval(BaseCallback):
    """Every ``cfg.eval_freq`` steps, fly the eval scenarios deterministically; keep the best
    policy (fewest crashes, then lowest mean RMSE) as ``out/best.zip``.

    ``history`` holds every evaluation (with its per-flight ``rows``), ``best`` the best score
    ``(crashes, mean RMSE)``; a resume starts from the checkpoint's ``state``.
    """

    def __init__(self, cfg: PPOTrainConfig, out: Path, vec_env: Any, state: RunState):
        super().__init__()
        self.cfg, self.out, self.vec_env = cfg, out, vec_env
        self.next_eval = next_multiple(cfg.eval_freq, state.steps)
        self.best: tuple[int, float] | None = state.best
        self.history: list[dict[str, Any]] = list(state.evals)

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self.next_eval += self.cfg.eval_freq
            self.evaluate()
        return True

    def evaluate(self) -> dict[str, Any]:
        """One evaluation now (logged, kept in ``history``, ``best.zip`` if best); its entry."""
        cfg = self.cfg
        ctrl = policy_controller(self.model, cfg, self.vec_env)
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
                self.model,
                self.out / "best.zip",
                cfg,
                self.vec_env,
                steps=self.num_timesteps,
                eval=rows,
            )
        return entry

    def summaries(self) -> list[dict[str, Any]]:
        """``history`` without the per-flight rows (what checkpoints and the summary keep)."""
        return [{k: v for k, v in e.items() if k != "rows"} for e in self.history]


class RunCheckpoint(BaseCallback):
    """Every ``cfg.checkpoint_freq`` steps, ``checkpoints/ppo_<steps>.zip`` (a loadable policy
    whose record holds what ``--resume`` needs: the counts of ``stats``, the history and best
    score of ``evaluation``) + ``ppo_<steps>.vecnormalize.pkl`` (the full normalization state)."""

    def __init__(
        self,
        cfg: PPOTrainConfig,
        out: Path,
        vec_env: Any,
        state: RunState,
        stats: RolloutStats,
        evaluation: TrackingEval,
    ):
        super().__init__()
        self.cfg, self.out, self.vec_env = cfg, out, vec_env
        self.stats, self.evaluation = stats, evaluation
        self.wall_before = state.train_wall_s
        self.next_save = next_multiple(cfg.checkpoint_freq, state.steps)
        self.t0 = time.perf_counter()

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_save:
            self.next_save += self.cfg.checkpoint_freq
            save_checkpoint(
                self.model,
                self.out / "checkpoints",
                self.cfg,
                self.vec_env,
                RunState(
                    steps=self.num_timesteps,
                    control_steps=self.stats.control_steps,
                    train_wall_s=self.wall_before + time.perf_counter() - self.t0,
                    evals=self.evaluation.summaries(),
                    best=self.evaluation.best,
                ),
            )
        return True


class RewardProgress(BaseCallback):
    """Tell the training env (its :meth:`~residual_quad.training.ppo_vec.QuadVecEnv.
    set_progress`) the fraction of the budget done, ``num_timesteps / total``, before the first
    step and after every step: the precision reward anneals its finest tolerance on it. The
    count is the model's, which a checkpoint saves and a resume restores, so a resumed run
    continues the annealing where it stopped (a budget changed at the resume rescales it, as it
    does the learning-rate schedule)."""

    def __init__(self, total: int):
        super().__init__()
        self.total = int(total)

    def _tell(self) -> None:
        self.training_env.unwrapped.set_progress(self.num_timesteps / self.total)

    def _on_training_start(self) -> None:
        self._tell()

    def _on_step(self) -> bool:
        self._tell()
        return True


@dataclass
class TrainingCallbacks:
    """The callbacks of one run; :meth:`as_list` is what ``model.learn`` gets (``extra`` last:
    an anchored policy's :class:`~residual_quad.training.anchored.AnchorStats`;
    ``reward_progress`` with a precision reward only)."""

    progress: TrainingProgress
    stats: RolloutStats
    evaluation: TrackingEval
    checkpoint: RunCheckpoint
    extra: list[BaseCallback] = field(default_factory=list)
    reward_progress: RewardProgress | None = None

    def as_list(self) -> list[BaseCallback]:
        own = [self.progress, self.stats, self.evaluation, self.checkpoint]
        if self.reward_progress is not None:
            own.append(self.reward_progress)
        return [*own, *self.extra]


def training_callbacks(
    cfg: PPOTrainConfig, out: Path, vec_env: Any, progress: bool, state: RunState
) -> TrainingCallbacks:
    """Progress bar, rollout tracking stats, tracking evaluation (+ ``best.zip``),
    checkpoints of a run writing into ``out`` (a resume: from ``state``) and, with ``reward:
    precision``, the budget's progress for its annealing."""
    # off-policy: pool the rollout figures over 32 vector steps (PPO's shipped rollout length)
    window = 0 if cfg.algo == "ppo" else 32 * vec_env.num_envs
    stats = RolloutStats(state.control_steps, window)
    evaluation = TrackingEval(cfg, out, vec_env, state)
    return TrainingCallbacks(
        progress=TrainingProgress(cfg.total_steps, state.steps, vec_env.num_envs, progress),
        stats=stats,
        evaluation=evaluation,
        checkpoint=RunCheckpoint(cfg, out, vec_env, state, stats, evaluation),
        reward_progress=RewardProgress(cfg.total_steps) if cfg.reward == "precision" else None,
        extra=[anchor_stats()] if cfg.algo == "ppo" and cfg.ppo.anchored else [],
    )


def anchor_stats() -> BaseCallback:
    """The callback that keeps an anchored policy's normalizer statistics current."""
    from residual_quad.training.anchored import AnchorStats

    return AnchorStats()
