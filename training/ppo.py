"""PPO baseline: stable-baselines3 PPO on ``ResidualQuad-v0`` with domain randomization.

Every episode of every training env draws a scenario — payload × wind × trajectory from the
config's lists (``extra`` is refused: it is held out for evaluation, as for the residual network)
— and a fresh env seed from its own seeded generator. The policy sees
:func:`residual_quad.controllers.ppo.ppo_features` of the observation (the one function the
deployed adapter uses too), optionally normalized by ``VecNormalize`` whose frozen statistics are
saved inside the policy file. Environments: ``backend: vector`` (default) — all of them in one
:class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv` behind the SB3 ``VecEnv`` adapter
:class:`~residual_quad.training.ppo_vec.QuadVecEnv` (domain randomization through the vector env's
sampler); ``backend: subproc`` — one :class:`ScenarioEnv` per ``SubprocVecEnv`` worker process
(how the first shipped ``ppo`` policy was trained).

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
import math
import os
import platform
import re
import sys
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
    MAX_ACCEL_SCALE,
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
    n_steps: int = 32
    batch_size: int = 1024
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
    # generalized state-dependent exploration (gSDE): noise a function of the state, its matrix
    # drawn every sde_sample_freq steps (-1: once per rollout) — smooth, correlated exploration
    use_sde: bool = False
    sde_sample_freq: int = -1
    learn_std: bool = True  # False: the exploration scale stays exp(log_std_init) (no collapse)


@dataclass
class PPOTrainConfig:
    """``rquad train ppo`` settings (``configs/ppo.yaml``)."""

    seed: int = 0
    controller: str = "ppo"  # ppo: actions are the env's; ppo_res: a correction to geo (m/s²)
    accel_scale: float = 8.0  # m/s², ppo_res: bound of the correction per heading-frame axis
    total_steps: int = 6_000_000  # policy decisions (PPO timesteps), all envs together
    n_envs: int | None = 256  # None → os.cpu_count(); part of the data, so fix it to reproduce
    backend: str = "vector"  # vector: one ResidualQuadVectorEnv; subproc: one process per env
    env_threads: int | None = None  # vector: rollout threads (None → the cores)
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
    eval_freq: int = 1_000_000  # policy steps between tracking evaluations (0: only at the end)
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
    checkpoint_freq: int = 1_000_000  # policy steps between checkpoints (0: none)
    torch_threads: int = 1  # intra-op threads of the learner (1: reproducible, leaves cores)
    ppo: PPOHyperparams = field(default_factory=PPOHyperparams)

    def __post_init__(self) -> None:
        if self.controller not in POLICY_CONTROLLERS:
            raise ValueError(
                f"controller must be one of {POLICY_CONTROLLERS}, got {self.controller!r}"
            )
        if self.controller == "ppo_res":
            if not (math.isfinite(self.accel_scale) and 0 < self.accel_scale <= MAX_ACCEL_SCALE):
                raise ValueError(
                    f"accel_scale must be in (0, {MAX_ACCEL_SCALE}] m/s², got {self.accel_scale}"
                )
            if self.action_mode != "rotor" or self.backend != "vector":
                raise ValueError(
                    "ppo_res acts through geo's inner loop on the vector env: it needs "
                    f"action_mode 'rotor' and backend 'vector' (got {self.action_mode!r}, "
                    f"{self.backend!r})"
                )
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
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.env_threads is not None and self.env_threads < 1:
            raise ValueError(f"env_threads must be >= 1 or null, got {self.env_threads}")
        self._check_budget()
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
        """Number of training envs (vector: the batch; subproc: one worker process each)."""
        return self.n_envs or os.cpu_count() or 1

    def _check_budget(self) -> None:
        """``n_envs`` and budgets that cannot work are errors before anything is built."""
        n = self.resolved_envs()
        limit = MAX_VECTOR_ENVS if self.backend == "vector" else MAX_SUBPROC_ENVS
        if n > limit:
            hint = "" if self.backend == "vector" else "; the vector backend takes more"
            raise ValueError(f"n_envs {n} is more than the {self.backend} backend's {limit}{hint}")
        h = self.ppo
        if h.n_steps < 1 or h.batch_size < 2 or h.n_epochs < 1:
            raise ValueError(
                f"ppo needs n_steps >= 1, batch_size >= 2 and n_epochs >= 1, got n_steps "
                f"{h.n_steps}, batch_size {h.batch_size}, n_epochs {h.n_epochs}"
            )
        rollout = h.n_steps * n
        if h.batch_size > rollout:
            raise ValueError(
                f"ppo.batch_size {h.batch_size} is larger than one rollout (ppo.n_steps {h.n_steps}"
                f" x n_envs {n} = {rollout} policy steps)"
            )
        if self.total_steps < rollout:
            raise ValueError(
                f"total_steps {self.total_steps} is less than one rollout (ppo.n_steps "
                f"{h.n_steps} x n_envs {n} = {rollout} policy steps): no PPO update would run"
            )


_ACTIVATIONS = ("tanh", "relu", "elu")
BACKENDS = ("vector", "subproc")
POLICY_CONTROLLERS = ("ppo", "ppo_res")  # what a training run's policy file flies as
MAX_VECTOR_ENVS = 4096  # vector backend: envs in one ResidualQuadVectorEnv
MAX_SUBPROC_ENVS = 64  # subproc backend: one worker process per env


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
    kind: dict[str, Any] = {"controller": cfg.controller}
    if cfg.controller == "ppo_res":
        kind["accel_scale"] = cfg.accel_scale
    write_meta(
        path,
        {
            **kind,
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


@dataclass
class _RunState:
    """What a resumed run carries over from its checkpoint (fresh run: the zeros)."""

    steps: int = 0
    control_steps: int = 0
    train_wall_s: float = 0.0
    evals: list[dict[str, Any]] = field(default_factory=list)  # without the per-flight rows
    best: tuple[int, float] | None = None


def _next_multiple(freq: int, steps: int) -> float:
    """The first multiple of ``freq`` above ``steps`` (``inf`` when ``freq`` is 0)."""
    return (steps // freq + 1) * freq if freq > 0 else math.inf


def _callbacks(
    cfg: PPOTrainConfig, out: Path, vec_env: Any, progress: bool, state: _RunState
) -> list[Any]:
    """Progress bar, rollout tracking stats, tracking evaluation (+ best.zip) and checkpoints."""
    from stable_baselines3.common.callbacks import BaseCallback

    n_envs = vec_env.num_envs

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=cfg.total_steps,
                initial=state.steps,
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
            self.control_steps = state.control_steps  # env control periods simulated, all envs

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
            self.next_eval = _next_multiple(cfg.eval_freq, state.steps)
            self.best: tuple[int, float] | None = state.best
            self.history: list[dict[str, Any]] = list(state.evals)

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += cfg.eval_freq
                self.evaluate()
            return True

        def evaluate(self) -> dict[str, Any]:
            ctrl = policy_controller(self.model, cfg, vec_env)
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

    callbacks: list[Any] = [Progress(), RolloutStats(), TrackingEval()]

    class Checkpoint(BaseCallback):
        """``checkpoints/ppo_<steps>.zip`` (a loadable policy whose record holds what
        ``--resume`` needs) + ``ppo_<steps>.vecnormalize.pkl`` (the full normalization state)."""

        def __init__(self) -> None:
            super().__init__()
            self.next_save = _next_multiple(cfg.checkpoint_freq, state.steps)
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_save:
                self.next_save += cfg.checkpoint_freq
                evaluator = callbacks[2]
                save_checkpoint(
                    self.model,
                    out / "checkpoints",
                    cfg,
                    vec_env,
                    _RunState(
                        steps=self.num_timesteps,
                        control_steps=callbacks[1].control_steps,
                        train_wall_s=state.train_wall_s + time.perf_counter() - self.t0,
                        evals=[
                            {k: v for k, v in e.items() if k != "rows"} for e in evaluator.history
                        ],
                        best=evaluator.best,
                    ),
                )
            return True

    callbacks.append(Checkpoint())
    return callbacks


CHECKPOINT_RE = re.compile(r"^ppo_(\d+)\.zip$")
VECNORM_SUFFIX = ".vecnormalize.pkl"


def save_checkpoint(
    model: Any, folder: Path, cfg: PPOTrainConfig, vec_env: Any, state: _RunState
) -> Path:
    """Write ``folder/ppo_<steps>.zip`` (+ the ``VecNormalize`` pickle next to it) atomically:
    the zip appears last, under its final name, so a run killed mid-write leaves no checkpoint
    that looks complete."""
    from stable_baselines3.common.vec_env import VecNormalize

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ppo_{state.steps}.zip"
    if isinstance(vec_env, VecNormalize):
        tmp = folder / f".ppo_{state.steps}{VECNORM_SUFFIX}.tmp"
        vec_env.save(tmp)
        os.replace(tmp, path.with_suffix(VECNORM_SUFFIX))
    tmp_zip = save_policy(
        model,
        folder / f".ppo_{state.steps}.tmp.zip",
        cfg,
        vec_env,
        steps=state.steps,
        resume={
            "control_steps": state.control_steps,
            "train_wall_s": state.train_wall_s,
            "evals": state.evals,
            "best": list(state.best) if state.best is not None else None,
        },
    )
    os.replace(tmp_zip, path)
    return path


def checkpoints(out: str | Path) -> list[Path]:
    """The checkpoints in ``out/checkpoints``, the most steps first; ``FileNotFoundError``
    naming the folder when there is none."""
    folder = Path(out) / "checkpoints"
    found = []
    if folder.is_dir():
        for p in folder.iterdir():
            m = CHECKPOINT_RE.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
    if not found:
        raise FileNotFoundError(f"no checkpoint (ppo_<steps>.zip) in {folder} to resume from")
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(out: str | Path) -> Path:
    """The checkpoint with the most steps in ``out/checkpoints``; ``FileNotFoundError`` naming
    the folder when there is none."""
    return checkpoints(out)[0]


def _load_newest_good(
    paths: list[Path], venv: Any, cfg: PPOTrainConfig
) -> tuple[Any, Any, _RunState]:
    """:func:`_load_checkpoint` of the newest of ``paths`` that loads: a corrupt newest
    checkpoint (a run killed while its disk filled, a damaged file) costs the steps since the
    one before, not the run. Each skipped file is named on stderr; when none loads, the error
    of the only one, or one line naming every file and why."""
    from residual_quad.controllers.ppo import PolicyFileError

    errors: list[tuple[Path, Exception]] = []
    for path in paths:
        try:
            loaded = _load_checkpoint(path, venv, cfg)
        except (PolicyFileError, FileNotFoundError) as err:
            errors.append((path, err))
            continue
        for bad, err in errors:
            print(
                f"resume: skipped the checkpoint {bad}, which does not load ({err}); "
                f"resuming from {path.name}",
                file=sys.stderr,
            )
        return loaded
    if len(errors) == 1:
        raise errors[0][1]
    reasons = "; ".join(f"{p.name}: {err}" for p, err in errors)
    raise PolicyFileError(
        f"no checkpoint in {paths[0].parent} loads, nothing to resume from ({reasons})"
    )


#: what a run folder holds once a training has written into it
RUN_FILES = ("final.zip", "best.zip", "summary.json")


def _refuse_existing_run(out: Path) -> None:
    """A fresh training never writes over another run's policies: ``ValueError`` naming what
    ``out`` holds and what to do instead."""
    held = [name for name in RUN_FILES if (out / name).exists()]
    ckpt = out / "checkpoints"
    if ckpt.is_dir() and any(CHECKPOINT_RE.match(p.name) for p in ckpt.iterdir()):
        held.append("checkpoints/")
    if not held:
        return
    if (out / "final.zip").exists():
        raise ValueError(
            f"{out} already holds a finished training run ({', '.join(held)}); choose a new "
            "--out (or delete that folder) to train again"
        )
    raise ValueError(
        f"{out} already holds an interrupted training run ({', '.join(held)}); --resume "
        "continues it, or choose a new --out"
    )


def _load_checkpoint(path: Path, venv: Any, cfg: PPOTrainConfig) -> tuple[Any, Any, _RunState]:
    """The model, the normalized env and the run state of checkpoint ``path``; every problem a
    :class:`~residual_quad.controllers.ppo.PolicyFileError` or ``FileNotFoundError`` naming the
    file."""
    import pickle

    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from residual_quad.controllers.ppo import PolicyFileError, read_meta

    meta = read_meta(path)  # missing, corrupt or foreign zip: an error naming it
    record = meta.get("resume")
    if not isinstance(record, dict) or not isinstance(meta.get("steps"), int):
        raise PolicyFileError(
            f"{path} is a policy but not a training checkpoint (no resume record)"
        )
    saved = dict(meta["config"]) if isinstance(meta.get("config"), dict) else {}
    try:  # keys added to the config after the checkpoint load as their defaults
        saved = configs.to_dict(configs.load(PPOTrainConfig, saved))
    except ValueError:
        pass  # compared as written: the difference names the keys
    now = configs.to_dict(cfg)
    saved.pop("total_steps", None), now.pop("total_steps")
    if saved != now:
        diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        raise PolicyFileError(
            f"{path} was written by another training config (differs in {diff}) than the one "
            f"given; resume with the run's own {path.parent.parent / 'config.yaml'}"
        )
    if cfg.normalize_obs or cfg.normalize_reward:
        pkl = path.with_suffix(VECNORM_SUFFIX)
        if not pkl.is_file():
            raise FileNotFoundError(f"normalization state of {path.name} not found: {pkl}")
        try:
            venv = VecNormalize.load(str(pkl), venv)
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
            raise PolicyFileError(f"cannot load the normalization state {pkl}: {err}") from None
    try:
        model = PPO.load(path, env=venv, device="cpu")
    except Exception as err:  # SB3 raises many kinds on a damaged archive
        raise PolicyFileError(f"cannot load checkpoint {path}: {err}") from None
    fix_std(model, cfg)
    best = record.get("best")
    state = _RunState(
        steps=int(meta["steps"]),
        control_steps=int(record.get("control_steps", 0)),
        train_wall_s=float(record.get("train_wall_s", 0.0)),
        evals=[  # JSON wrote a crashed-out mean (inf) as null
            {**e, "rmse_mean": math.inf if e.get("rmse_mean") is None else e["rmse_mean"]}
            for e in record.get("evals") or []
        ],
        best=(int(best[0]), math.inf if best[1] is None else float(best[1])) if best else None,
    )
    return model, venv, state


def policy_controller(model: Any, cfg: PPOTrainConfig, vec_env: Any) -> Any:
    """The deployed controller of the in-memory ``model`` (``ppo`` or ``ppo_res``), with the
    normalization statistics of ``vec_env`` as they are now."""
    normalizer = ObsNormalizer.from_meta(obs_norm_stats(vec_env))
    if cfg.controller == "ppo_res":
        from residual_quad.controllers.ppo_res import ResidualPPOController

        return ResidualPPOController.from_model(
            model, cfg.accel_scale, normalizer, cfg.action_repeat
        )
    return PPOController.from_model(model, cfg.action_mode, normalizer, cfg.action_repeat)


def make_training_env(cfg: PPOTrainConfig) -> Any:
    """The SB3 ``VecEnv`` of ``cfg`` (monitored, not yet normalized): :class:`QuadVecEnv` on the
    vector env (``backend: vector``) or ``SubprocVecEnv`` workers (``subproc``)."""
    n_envs = cfg.resolved_envs()
    if cfg.backend == "vector":
        from stable_baselines3.common.vec_env import VecMonitor

        from residual_quad.training.ppo_vec import QuadVecEnv, ScenarioSampler

        sampler = ScenarioSampler(cfg.payloads, cfg.winds, cfg.trajectories, cfg.start_pos_noise)
        pilot = None
        if cfg.controller == "ppo_res":
            from residual_quad.controllers.ppo_res import ResidualPilot

            pilot = ResidualPilot(n_envs, cfg.accel_scale)
        venv = QuadVecEnv(
            n_envs,
            sampler,
            action_repeat=cfg.action_repeat,
            nthread=cfg.env_threads,
            scenario_seed=cfg.seed,
            pilot=pilot,
            action_mode=cfg.action_mode,
            episode_s=cfg.episode_s,
            reward_weights=cfg.reward_weights or None,
            max_position_error=cfg.max_position_error,
            **cfg.env_kwargs,
        )
        return VecMonitor(venv)
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    factories = [_EnvFactory(cfg) for _ in range(n_envs)]
    return SubprocVecEnv(factories) if n_envs > 1 else DummyVecEnv(factories)


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
    import_sb3(cfg.controller)
    import torch

    out = Path(out)
    if resume:
        found = checkpoints(out)
        if (out / "final.zip").exists():
            raise ValueError(f"{out} is a finished run (final.zip exists): nothing to resume")
    else:
        _refuse_existing_run(out)
        out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, cfg.torch_threads))
    venv = make_training_env(cfg)
    n_envs = venv.num_envs
    state = _RunState()
    try:
        if resume:
            model, venv, state = _load_newest_good(found, venv, cfg)
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
    callbacks = _callbacks(cfg, out, venv, progress, state)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        model.learn(
            total_timesteps=max(0, cfg.total_steps - state.steps),
            callback=callbacks,
            tb_log_name="ppo",
            reset_num_timesteps=not resume,
            progress_bar=False,
        )
        train_wall = state.train_wall_s + time.perf_counter() - t0
        evaluator = callbacks[2]
        final_eval = evaluator.evaluate()
    finally:
        venv.close()
    wall = state.train_wall_s + time.perf_counter() - t0
    budget = {
        "steps": int(model.num_timesteps),  # policy decisions (PPO timesteps)
        "control_steps": int(callbacks[1].control_steps),  # 10 ms env periods simulated
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


def normalized(venv: Any, cfg: PPOTrainConfig) -> Any:
    """``venv`` behind SB3's ``VecNormalize`` with the run's normalization settings."""
    from stable_baselines3.common.vec_env import VecNormalize

    return VecNormalize(
        venv,
        norm_obs=cfg.normalize_obs,
        norm_reward=cfg.normalize_reward,
        clip_obs=cfg.clip_obs,
        gamma=cfg.ppo.gamma,
    )


def new_model(
    cfg: PPOTrainConfig, venv: Any, tensorboard: str | None = None, verbose: int = 0
) -> Any:
    """A fresh SB3 ``PPO`` per ``cfg.ppo`` on ``venv`` (seeded ``cfg.seed``, CPU)."""
    sb3 = import_sb3(cfg.controller)
    import torch

    h = cfg.ppo
    lr: Any = h.learning_rate
    if h.lr_final is not None:
        lr = _LinearSchedule(h.learning_rate, h.lr_final)
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
        use_sde=h.use_sde,
        sde_sample_freq=h.sde_sample_freq,
        policy_kwargs={
            "net_arch": {"pi": list(h.net_arch), "vf": list(h.net_arch)},
            "activation_fn": act,
            "log_std_init": h.log_std_init,
        },
        tensorboard_log=tensorboard,
        seed=cfg.seed,
        device="cpu",
        verbose=verbose,
    )
    fix_std(model, cfg)
    return model


def fix_std(model: Any, cfg: PPOTrainConfig) -> None:
    """Freeze the exploration scale when ``ppo.learn_std`` is off (a new or a loaded model)."""
    if not cfg.ppo.learn_std:
        model.policy.log_std.requires_grad_(False)  # Adam skips a parameter without gradient


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
    budget["backend"] = summary.get("backend", "subproc")  # runs before the vector backend
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
