"""``rquad train ppo`` / ``ppo_res`` settings: the typed configs behind ``configs/ppo*.yaml``.

:class:`PPOTrainConfig` (the run: scenarios, envs, budget, evaluation, checkpoints) holds a
:class:`PPOHyperparams` (SB3 ``PPO``'s arguments); both load through
:func:`residual_quad.configs.load` (unknown keys are errors) and check themselves at
construction, so a setting that cannot work is an error before anything is built.

Training runs on the vector env (``backend: vector``). The ``subproc`` backend (one
``SubprocVecEnv`` worker process per env, how the first shipped policy was trained) is retired
(:data:`SUBPROC_RETIRED` says why).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from residual_quad.controllers.policy_file import MAX_ACCEL_SCALE, preview_points
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.trajectories import TRAJECTORIES

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
class FeatureConfig:
    """The ``features`` section: what the policy sees beyond the base features
    (:class:`~residual_quad.controllers.policy_inputs.FeatureSpec`; checked there)."""

    preview_k: int = 0  # reference points ahead (needs env_kwargs.preview = [K, dt])
    action_history: int = 0  # last actions, newest first
    error_integral: bool = False  # leaky integral of the heading-frame position error
    estimate: bool = False  # geo_rls's residual estimate Δâ (ppo_adapt)

    def __post_init__(self) -> None:
        self.spec()

    def spec(self) -> FeatureSpec:
        """The :class:`FeatureSpec` of this section."""
        return FeatureSpec(self.preview_k, self.action_history, self.error_integral, self.estimate)


@dataclass
class PPOTrainConfig:
    """``rquad train ppo`` settings (``configs/ppo.yaml``)."""

    seed: int = 0
    # ppo: actions are the env's; ppo_res: a correction to geo (m/s²); ppo_adapt: ppo seeing Δâ
    controller: str = "ppo"
    accel_scale: float = 8.0  # m/s², ppo_res: bound of the correction per heading-frame axis
    total_steps: int = 6_000_000  # policy decisions (PPO timesteps), all envs together
    n_envs: int | None = 256  # None → os.cpu_count(); part of the data, so fix it to reproduce
    backend: str = "vector"  # one ResidualQuadVectorEnv (subproc is retired: SUBPROC_RETIRED)
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
    features: FeatureConfig = field(default_factory=FeatureConfig)  # policy inputs beyond base

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
        spec = self.features.spec()
        if self.controller == "ppo_adapt":
            if self.action_mode != "rotor" or not spec.estimate:
                raise ValueError(
                    "ppo_adapt acts on rotor thrusts and sees the residual estimate: it needs "
                    f"action_mode 'rotor' and features.estimate true (got {self.action_mode!r}, "
                    f"{spec.estimate})"
                )
        elif spec.estimate:
            raise ValueError(
                f"features.estimate needs controller 'ppo_adapt' (its estimator), got "
                f"{self.controller!r}"
            )
        preview = preview_points(self.env_kwargs)
        if preview != spec.preview_k:
            raise ValueError(
                f"env_kwargs.preview gives {preview} preview points but features.preview_k is "
                f"{spec.preview_k}: they must agree"
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
        if self.backend == "subproc":
            raise ValueError(SUBPROC_RETIRED)
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
        """Number of training envs (the vector env's batch)."""
        return self.n_envs or os.cpu_count() or 1

    def _check_budget(self) -> None:
        """``n_envs`` and budgets that cannot work are errors before anything is built."""
        n = self.resolved_envs()
        if n > MAX_VECTOR_ENVS:
            raise ValueError(f"n_envs {n} is more than the vector backend's {MAX_VECTOR_ENVS}")
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
BACKENDS = ("vector",)
#: why ``backend: subproc`` is refused
SUBPROC_RETIRED = (
    "backend 'subproc' is retired: its worker processes drew each episode's scenario on their "
    "own, so one seed trained on other episodes than the vector backend, whose one "
    "ScenarioSampler draws every env's next scenario from one generator in the order episodes "
    "end (an order separate processes cannot follow); use backend 'vector' (every shipped "
    "policy was trained on it)"
)
POLICY_CONTROLLERS = ("ppo", "ppo_res", "ppo_adapt")  # what a training run's policy file flies as
MAX_VECTOR_ENVS = 4096  # vector backend: envs in one ResidualQuadVectorEnv
