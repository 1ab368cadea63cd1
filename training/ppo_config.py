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

import inspect
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from residual_quad.controllers.anchor import check_anchorable
from residual_quad.controllers.attitude import AttitudeGains, optional_attitude_gains
from residual_quad.controllers.policy_file import (
    ACCELERATION_KINDS,
    CORE_DEFAULTS,
    MAX_ACCEL_SCALE,
    MAX_CORRECTION_RATE,
    RESERVED_ENV_KWARGS,
    is_correction_rate,
    preview_points,
)
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.checks import integer
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS, resolve_payload
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.training.offpolicy_config import ACTIVATIONS as _ACTIVATIONS
from residual_quad.training.offpolicy_config import OffPolicyHyperparams
from residual_quad.training.precision import PrecisionReward
from residual_quad.training.scenarios import (
    FIRST_OFF_MATRIX_SEED,
    FocusDraw,
    check_focus,
    check_randomized_draw,
    focus_draws,
)
from residual_quad.training.schedule import check_polish

HELD_OUT_PAYLOADS = ("extra",)
#: ``reward_weights``'s default: the env reward's weights training uses
REWARD_WEIGHTS = {"alive": 2.0}


@dataclass
class PPOHyperparams:
    """SB3 ``PPO`` arguments (``n_steps`` is per env; one update uses ``n_steps·n_envs`` steps)."""

    learning_rate: float = 3e-4
    lr_final: float | None = 1e-4  # linear decay to this at the end; None = constant
    polish_steps: int = 0  # the budget's last steps: the rate falls on from lr_final ...
    polish_lr: float | None = None  # ... to this (training/schedule.py; 0 steps: no polish)
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
    # CAPS spatial smoothness [CAPS] (training/smoothness.py): every minibatch step also descends
    # spatial_smoothness·mean‖μ(s) − μ(s + σε)‖², σ = smoothness_sigma in normalized-feature units
    spatial_smoothness: float = 0.0  # λ_S ≥ 0 (0: SB3's PPO as is)
    smoothness_sigma: float = 0.1  # σ > 0
    # the mean action μ(x) − μ(x̄), x̄ the inputs on the reference (controllers/anchor.py):
    # zero at zero tracking error, whatever the network learned (acceleration policies only)
    anchored: bool = False


@dataclass
class FeatureConfig:
    """The ``features`` section: what the policy sees beyond the base features
    (:class:`~residual_quad.controllers.policy_inputs.FeatureSpec`; checked there)."""

    preview_k: int = 0  # reference points ahead (needs env_kwargs.preview = [K, dt])
    action_history: int = 0  # last actions, newest first
    error_integral: bool = False  # leaky integral of the heading-frame position error
    estimate: bool = False  # geo_rls's residual estimate Δâ (ppo_adapt, ppo_res)

    def __post_init__(self) -> None:
        self.spec()

    def spec(self) -> FeatureSpec:
        """The :class:`FeatureSpec` of this section."""
        return FeatureSpec(self.preview_k, self.action_history, self.error_integral, self.estimate)


@dataclass
class PPOTrainConfig:
    """``rquad train ppo`` settings (``configs/ppo.yaml``)."""

    seed: int = 0
    # ppo: actions are the env's; ppo_res: a correction to geo (m/s²); ppo_acc: the desired
    # acceleration itself (the policy is the outer loop); ppo_adapt: ppo seeing Δâ
    controller: str = "ppo"
    # m/s², ppo_res / ppo_acc: bound of the correction / acceleration per heading-frame axis
    accel_scale: float = 8.0
    # m/s³, ppo_res: null — the action is the correction; a number r — the action is its rate of
    # change (the correction moves by at most r·T per decision; an action history shows it)
    correction_rate: float | None = None
    # ppo_res: the tracker the correction adds to — geo, or pid (geo + the PID's error integral,
    # so a constant offset of the correction is integrated away: it rests only at zero error);
    # ppo_acc: feedforward (the reference's acceleration, no feedback); null: the first of these
    tracker: str | None = None
    # ppo_res: the tracker's inner-loop gains (AttitudeGains fields: wn_rp, zeta_rp, wn_yaw,
    # zeta_yaw, max_tilt, budget_tilt, thrust_budget); null: the defaults. A plant with lagging
    # rotors needs softer ones
    attitude: dict[str, float] | None = None
    # ppo_res / ppo_acc: the defaults the tracker takes where attitude and its other options are
    # not given — ideal: the source's on any plant; plant: its own for the training plant (behind
    # lagging rotors the lag-tuned gains, INDI, the rotor model and the latency predictor)
    core: str = "ideal"
    estimate_feedforward: bool = False  # ppo_adapt: Δâ also as thrust feed-forward (−m·b3·Δâ)
    total_steps: int = 6_000_000  # policy decisions (PPO timesteps), all envs together
    n_envs: int | None = 256  # None → os.cpu_count(); part of the data, so fix it to reproduce
    backend: str = "vector"  # one ResidualQuadVectorEnv (subproc is retired: SUBPROC_RETIRED)
    env_threads: int | None = None  # vector: rollout threads (None → the cores)
    action_mode: str = "rotor"  # beat ctbr at equal budget (docs/ppo.md)
    action_repeat: int = 2  # control periods each policy action is held (the adapter does too)
    # drawn uniformly: level names or masses in kg (a grid of masses randomizes the payload
    # beyond the named levels; an entry listed k times is drawn k times as often, as in the
    # winds and trajectories); all lighter than the held-out payloads
    payloads: list[Any] = field(default_factory=lambda: ["none", "light", "heavy"])
    winds: list[str] = field(default_factory=lambda: ["calm", "breezy", "windy"])
    trajectories: list[str] = field(default_factory=lambda: ["hover", "helix", "figure8"])
    # how an episode's trajectory is drawn (TRAJECTORY_DRAWS): fixed — a listed trajectory with
    # its default parameters (for hover, helix and figure8: the evaluation matrix's own), env
    # seeds seed + i (how every shipped policy was trained); randomized — a listed family with
    # random parameters (training/scenarios.py, the draw rquad tune uses: a hover from a random
    # start offset) and env seeds from FIRST_OFF_MATRIX_SEED (10 000) up: training never flies
    # a scenario of the matrix (docs/rl.md)
    trajectory_draw: str = "fixed"
    # randomized only: some families' parameter ranges replaced ({helix: {period: [4.0, 12.0]}};
    # the rest keep training/scenarios.py's TRAJECTORY_RANGES, which rquad tune draws from)
    trajectory_ranges: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    episode_s: float = 20.0  # s per training episode
    # s: each episode's length drawn uniformly from this list (an entry listed k times k times
    # as often; each ≤ episode_s), ending as a time limit: more starts per sample without losing
    # the long flights; null: every episode lasts episode_s
    episode_lengths: list[float] | None = None
    start_pos_noise: float = 0.0  # m, uniform start offset per axis (robustness to off starts)
    max_position_error: float = 1.5  # m, training episodes end beyond it (evaluation: env's 5 m)
    # env reward overrides; alive 2: with 1 the reward turns negative beyond ~1 m (docs/ppo.md)
    reward_weights: dict[str, float] = field(default_factory=lambda: dict(REWARD_WEIGHTS))
    # the policy's own action cost per decision, w_smooth·‖u − u_prev‖² + w_magnitude·‖u‖² (u in
    # [-1, 1]; ppo_res: its correction, which the env's rotor-level terms do not see)
    action_smooth: float = 0.0
    action_magnitude: float = 0.0
    # a log-shaped position cost per control period, w·ln(1 + ‖e_p‖/s) (s in m), on top of the
    # env's linear one: millimetres in calm air weigh as much as centimetres in a gust
    position_log: float = 0.0
    position_log_scale: float = 0.01  # m
    # the training reward (REWARDS): env — the env's reward summed over the held periods, with
    # the shaping terms above; precision — the `precision` section's kernel in their place, each
    # decision paying in (0, 1] (training/precision.py, docs/rl_reward.md)
    reward: str = "env"
    precision: PrecisionReward = field(default_factory=PrecisionReward)  # reward: precision
    # randomized only: a share of episodes drawn from the section's own lists (FocusDraw; a
    # list of them for several hard cases, their fractions summing below 1)
    focus: FocusDraw | list[FocusDraw] = field(default_factory=FocusDraw)
    # randomized only: every rotor's efficiency (thrust and torque), one draw per episode from
    # this list (weaker motors: a lower thrust-to-weight ratio without another mass); []: none
    rotor_efficiency: list[float] = field(default_factory=list)
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
    # the learner: ppo (on-policy, the ``ppo`` section) or sac / tqc (off-policy, ``offpolicy``)
    algo: str = "ppo"
    offpolicy: OffPolicyHyperparams = field(default_factory=OffPolicyHyperparams)
    # ppo: the critic also sees PRIVILEGED_NAMES (truth from the env's info), the actor never
    privileged_critic: bool = False

    def _check_payloads(self, payloads: list[Any] | None = None, key: str = "payloads") -> None:
        """Names or masses (kg), each lighter than every held-out payload: the held-out mass is
        never trained on, nor anything at or beyond it (that would make it an interpolation)."""
        payloads = self.payloads if payloads is None else payloads
        if not payloads:
            raise ValueError(f"{key} must not be empty")
        lightest_held = min(PAYLOAD_LEVELS[h] for h in HELD_OUT_PAYLOADS)
        for p in payloads:
            if isinstance(p, str) and p not in PAYLOAD_LEVELS:
                raise ValueError(
                    f"unknown {key} [{p!r}]; valid: {', '.join(PAYLOAD_LEVELS)} or a mass in kg"
                )
            if p in HELD_OUT_PAYLOADS:
                raise ValueError(f"{key} [{p!r}] are held out for evaluation; never train on them")
            try:  # a ValueError for a bool, NaN, inf or a negative mass
                mass = resolve_payload(p)
            except ValueError as err:
                raise ValueError(f"{key}: {err}") from None
            if mass >= lightest_held:
                held = ", ".join(f"{h} ({PAYLOAD_LEVELS[h]:g} kg)" for h in HELD_OUT_PAYLOADS)
                raise ValueError(
                    f"{key}: {p!r} ({mass:g} kg) reaches the held-out {held}: training payloads "
                    "must stay lighter"
                )

    def _check_focus(self) -> None:
        """``focus``: :func:`~residual_quad.training.scenarios.check_focus` against this config's
        draw and lists, its payloads checked as the main ones."""
        lists = (self.trajectory_draw, self.trajectories, self.trajectory_ranges)
        check_focus(self.focus, *lists, self._check_payloads)

    def focus_lists(self) -> list[dict[str, Any]]:
        """Each active focus draw's payloads, winds, families, ranges (:meth:`FocusDraw.lists`
        over this config's lists) and ``fraction``."""
        lists = (self.payloads, self.winds, self.trajectories, self.trajectory_ranges)
        return [
            {**d.lists(*lists), "fraction": d.fraction}
            for d in focus_draws(self.focus)
            if d.active()
        ]

    def __post_init__(self) -> None:
        for name in ("seed", "eval_seed"):
            integer(name, getattr(self, name), low=0)
        self._check_learner()
        self._check_episode_lengths()
        if self.controller not in POLICY_CONTROLLERS:
            raise ValueError(
                f"controller must be one of {POLICY_CONTROLLERS}, got {self.controller!r}"
            )
        if self.controller in ACCELERATION_KINDS:
            self._check_acceleration_policy()
        else:
            self._check_no_tracker()
        spec = self.features.spec()
        if self.controller == "ppo_adapt":
            if self.action_mode != "rotor" or not spec.estimate:
                raise ValueError(
                    "ppo_adapt acts on rotor thrusts and sees the residual estimate: it needs "
                    f"action_mode 'rotor' and features.estimate true (got {self.action_mode!r}, "
                    f"{spec.estimate})"
                )
        if self.estimate_feedforward and self.controller != "ppo_adapt":
            raise ValueError(
                "estimate_feedforward needs controller 'ppo_adapt' (the rotor-level policy with "
                f"geo_rls's estimator in its loop), got {self.controller!r}"
            )
        if spec.estimate and self.controller not in (*ACCELERATION_KINDS, "ppo_adapt"):
            raise ValueError(
                "features.estimate needs controller 'ppo_adapt', 'ppo_res' or 'ppo_acc' "
                f"(geo_rls's estimator runs in their loop), got {self.controller!r}"
            )
        preview = preview_points(self.env_kwargs)
        if preview != spec.preview_k:
            raise ValueError(
                f"env_kwargs.preview gives {preview} preview points but features.preview_k is "
                f"{spec.preview_k}: they must agree"
            )
        if self.action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {self.action_mode!r}")
        self._check_payloads()
        for kind, values, valid in (
            ("winds", self.winds, WIND_LEVELS),
            ("trajectories", self.trajectories, TRAJECTORIES),
        ):
            if not values:
                raise ValueError(f"{kind} must not be empty")
            bad = [v for v in values if v not in valid]
            if bad:
                raise ValueError(f"unknown {kind} {bad}; valid: {', '.join(valid)}")
        self._check_trajectory_draw()
        self._check_focus()
        for sc in self.eval_scenarios:
            if len(sc) != 3:
                raise ValueError(f"eval_scenarios entries are [payload, wind, trajectory]: {sc}")
        for name in ("action_smooth", "action_magnitude", "position_log"):
            w = getattr(self, name)
            if isinstance(w, bool) or not (math.isfinite(w) and w >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {w!r}")
        s = self.position_log_scale
        if isinstance(s, bool) or not (math.isfinite(s) and s > 0):
            raise ValueError(f"position_log_scale must be a finite number > 0 (m), got {s!r}")
        self._check_reward()
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
        self._check_env_kwargs()
        if self.ppo.activation not in _ACTIVATIONS:
            raise ValueError(f"ppo.activation must be one of {list(_ACTIVATIONS)}")
        self._check_smoothness()

    def _check_episode_lengths(self) -> None:
        """``episode_lengths``: null, or a non-empty list of numbers in (0, episode_s] s."""
        lengths = self.episode_lengths
        if lengths is None:
            return
        ok = (
            isinstance(lengths, list)
            and lengths
            and all(
                isinstance(s, int | float) and not isinstance(s, bool) and 0 < s <= self.episode_s
                for s in lengths
            )
        )
        if not ok:
            raise ValueError(
                f"episode_lengths must be null or a non-empty list of numbers in (0, "
                f"{self.episode_s:g}] s (each at most episode_s), got {lengths!r}"
            )

    def _check_acceleration_policy(self) -> None:
        """``ppo_res`` / ``ppo_acc``: the acceleration bound, the correction rate, the tracker
        (``null``: the kind's first, :data:`ACCELERATION_KINDS`), the rotor action mode, the
        vector backend and the tracker's inner-loop gains."""
        if not (math.isfinite(self.accel_scale) and 0 < self.accel_scale <= MAX_ACCEL_SCALE):
            raise ValueError(
                f"accel_scale must be in (0, {MAX_ACCEL_SCALE}] m/s², got {self.accel_scale}"
            )
        self._check_correction_rate()
        trackers = ACCELERATION_KINDS[self.controller]
        if self.tracker is None:
            self.tracker = trackers[0]
        if self.tracker not in trackers:
            raise ValueError(
                f"tracker must be one of {trackers} for {self.controller} (the tracker its "
                f"acceleration goes through), got {self.tracker!r}"
            )
        if self.action_mode != "rotor" or self.backend != "vector":
            raise ValueError(
                f"{self.controller} acts through the trackers' inner loop on the vector env: it "
                f"needs action_mode 'rotor' and backend 'vector' (got {self.action_mode!r}, "
                f"{self.backend!r})"
            )
        try:
            self.tracker_gains()
        except TypeError as err:  # not a mapping
            raise ValueError(str(err)) from None
        if self.core not in CORE_DEFAULTS:
            raise ValueError(f"core must be one of {CORE_DEFAULTS}, got {self.core!r}")

    def _check_no_tracker(self) -> None:
        """A policy that sets the rotors itself has no correction rate, inner-loop gains or
        tracker (``tracker: geo``, what every record before ``ppo_acc`` carries, reads as none)."""
        if self.correction_rate is not None:
            raise ValueError(
                f"correction_rate is ppo_res's (the rate of its correction), not "
                f"{self.controller!r}'s"
            )
        if self.core != CORE_DEFAULTS[0]:
            raise ValueError(
                f"core is ppo_res's and ppo_acc's (their tracker's defaults), not "
                f"{self.controller!r}'s"
            )
        if self.attitude is not None:
            raise ValueError(
                f"attitude is ppo_res's (its tracker's inner-loop gains), not "
                f"{self.controller!r}'s: a {self.controller} policy sets the rotors itself"
            )
        if self.tracker not in (None, "geo"):
            raise ValueError(
                f"tracker is ppo_res's and ppo_acc's (the tracker their acceleration goes "
                f"through), not {self.controller!r}'s"
            )
        self.tracker = None

    def _check_trajectory_draw(self) -> None:
        """``trajectory_draw`` one of :data:`TRAJECTORY_DRAWS`; ``randomized`` draws every listed
        trajectory as a family, so each needs its parameter ranges
        (:data:`~residual_quad.training.scenarios.TRAJECTORY_RANGES`)."""
        if self.trajectory_draw not in TRAJECTORY_DRAWS:
            raise ValueError(
                f"trajectory_draw must be one of {list(TRAJECTORY_DRAWS)}, got "
                f"{self.trajectory_draw!r}"
            )
        lists = (self.trajectories, self.trajectory_ranges, self.rotor_efficiency)
        check_randomized_draw(self.trajectory_draw, *lists)

    def env_seed_offset(self) -> int:
        """What the training envs' seeds start from: 0 (``trajectory_draw: fixed``, env ``i``
        seeded ``seed + i``) or :data:`~residual_quad.training.scenarios.FIRST_OFF_MATRIX_SEED`
        (``randomized``: never a seed of the matrix)."""
        return FIRST_OFF_MATRIX_SEED if self.trajectory_draw == "randomized" else 0

    def _check_reward(self) -> None:
        """``reward`` one of :data:`REWARDS`; ``precision`` a :class:`PrecisionReward` (checked
        at its construction, whichever reward is used); ``reward: precision`` replaces the env
        reward and its shaping, so it is refused beside a shaping term or other env reward
        weights (they would do nothing)."""
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {self.reward!r}")
        if not isinstance(self.precision, PrecisionReward):
            raise ValueError(
                "precision must be a mapping of PrecisionReward's fields (tolerances, weights, "
                f"smooth, anneal_from, anneal_fraction), got {self.precision!r}"
            )
        if self.reward != "precision":
            return
        shaping = [k for k in PRECISION_REPLACES if getattr(self, k)]
        if shaping:
            raise ValueError(
                f"reward 'precision' replaces the env reward and its shaping terms: set "
                f"{', '.join(shaping)} to 0 (precision.smooth weighs the action change)"
            )
        if self.reward_weights != REWARD_WEIGHTS:
            raise ValueError(
                f"reward 'precision' replaces the env reward: reward_weights "
                f"{self.reward_weights} would do nothing (leave the default {REWARD_WEIGHTS})"
            )

    def _check_env_kwargs(self) -> None:
        """``env_kwargs``: ``ResidualQuad-v0`` arguments (the ones a policy file may record:
        not those with their own keys here), with values that build an env; a ``ValueError``
        naming ``env_kwargs`` and the key."""
        from residual_quad.envs.residual_quad_env import ResidualQuadEnv

        clash = sorted(RESERVED_ENV_KWARGS & set(self.env_kwargs))
        if clash:
            raise ValueError(f"env_kwargs may not set {clash}: they have their own keys")
        valid = sorted(set(inspect.signature(ResidualQuadEnv).parameters) - RESERVED_ENV_KWARGS)
        unknown = sorted(set(map(str, self.env_kwargs)) - set(valid))
        if unknown:
            raise ValueError(f"env_kwargs: unknown key(s) {unknown}; valid keys: {valid}")
        try:
            ResidualQuadEnv(**self.env_kwargs).close()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"env_kwargs: {exc}") from None

    def _check_smoothness(self) -> None:
        """``ppo.spatial_smoothness`` finite ≥ 0 and ``ppo.smoothness_sigma`` finite > 0."""
        lam, sigma = self.ppo.spatial_smoothness, self.ppo.smoothness_sigma
        if isinstance(lam, bool) or not (math.isfinite(lam) and lam >= 0):
            raise ValueError(f"ppo.spatial_smoothness must be a finite number >= 0, got {lam!r}")
        if isinstance(sigma, bool) or not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"ppo.smoothness_sigma must be a finite number > 0, got {sigma!r}")

    def _check_correction_rate(self) -> None:
        """``correction_rate``: null, or a finite rate in (0, MAX_CORRECTION_RATE] m/s³."""
        rate = self.correction_rate
        if rate is not None and not is_correction_rate(rate):
            raise ValueError(
                f"correction_rate must be null or a number in (0, {MAX_CORRECTION_RATE}] m/s³, "
                f"got {rate!r}"
            )

    def _check_learner(self) -> None:
        """``algo``, ``offpolicy`` and ``privileged_critic`` (separate from the PPO checks)."""
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        for key in ("privileged_critic", "estimate_feedforward"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be true or false, got {getattr(self, key)!r}")
        self.offpolicy.check()  # a section that cannot run is an error whichever algo is used
        check_anchorable(self, ACCELERATION_KINDS)  # ppo.anchored
        if self.algo == "ppo":
            return
        if self.controller not in OFFPOLICY_CONTROLLERS:
            raise ValueError(
                f"algo {self.algo!r} trains env actions (controller 'ppo') or an acceleration "
                f"(ppo_res, ppo_acc); ppo_adapt is PPO only, got controller {self.controller!r}"
            )
        if self.privileged_critic:
            raise ValueError(
                f"privileged_critic is PPO only (an actor-critic with a value head); algo "
                f"{self.algo!r} has none"
            )

    def deployed_name(self) -> str:
        """The controller the run's policy files fly as (``ppo``, ``ppo_res``, ``ppo_acc``,
        ``ppo_adapt``; ``sac``/``tqc`` for env actions learned off-policy: an acceleration
        policy flies as its kind whichever learner trained it)."""
        return self.algo if self.algo != "ppo" and self.controller == "ppo" else self.controller

    def tracker_gains(self) -> AttitudeGains | None:
        """``ppo_res``'s tracker inner-loop gains (``None``: the defaults), which the training's
        pilot flies and the policy file records."""
        return optional_attitude_gains(self.attitude)

    def discount(self) -> float:
        """The learner's discount (VecNormalize's return scaling uses it)."""
        return self.ppo.gamma if self.algo == "ppo" else self.offpolicy.gamma

    def resolved_envs(self) -> int:
        """Number of training envs (the vector env's batch)."""
        return self.n_envs or os.cpu_count() or 1

    def _check_budget(self) -> None:
        """``n_envs`` and budgets that cannot work are errors before anything is built."""
        n = self.resolved_envs()
        if n > MAX_VECTOR_ENVS:
            raise ValueError(f"n_envs {n} is more than the vector backend's {MAX_VECTOR_ENVS}")
        if self.algo != "ppo":
            return  # offpolicy.check
        h = self.ppo
        check_polish(h, self.total_steps)
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


def recorded_reward(record: Mapping[str, Any]) -> str:
    """The training reward a policy file's record names, from the run config it records whole
    (``config.reward`` and ``config.precision``): ``"env"`` — also for a file written before
    the key existed, the reward it was trained with — or ``"precision"`` with its tolerances, e.g.
    ``"precision (σ 0.5, 0.1, 0.02 m; the finest from 0.8 m over 50 % of the budget)"``; a
    section that does not read is named so, never an error (the record is a note here)."""
    config = record.get("config")
    config = config if isinstance(config, Mapping) else {}
    reward = config.get("reward", "env")
    if reward != "precision":
        return str(reward)
    section = config.get("precision")
    try:
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(section or {}).items()}
        p = PrecisionReward(**given)
    except (TypeError, ValueError):
        return f"precision (unreadable settings {section!r})"
    text = f"precision (σ {', '.join(f'{s:g}' for s in p.tolerances)} m"
    if p.anneal_from > 0:
        share = f"{100 * p.anneal_fraction:g} %"
        text += f"; the finest from {p.anneal_from:g} m over {share} of the budget"
    return text + ")"


#: the training rewards of ``reward``: the env's (shaped), or :mod:`~residual_quad.training.
#: precision`'s
REWARDS = ("env", "precision")
#: the shaping terms of the env reward that ``reward: precision`` replaces (must be 0 with it)
PRECISION_REPLACES = ("position_log", "action_smooth", "action_magnitude")
#: the trajectory draws of ``trajectory_draw`` (:class:`PPOTrainConfig`)
TRAJECTORY_DRAWS = ("fixed", "randomized")
#: the learners of ``algo``: SB3's PPO and SAC [SAC], sb3-contrib's TQC [TQC]
ALGOS = ("ppo", "sac", "tqc")
BACKENDS = ("vector",)
#: why ``backend: subproc`` is refused
SUBPROC_RETIRED = (
    "backend 'subproc' is retired: its worker processes drew each episode's scenario on their "
    "own, so one seed trained on other episodes than the vector backend, whose one "
    "ScenarioSampler draws every env's next scenario from one generator in the order episodes "
    "end (an order separate processes cannot follow); use backend 'vector' (every shipped "
    "policy was trained on it)"
)
#: what a training run's policy file flies as
POLICY_CONTROLLERS = ("ppo", "ppo_res", "ppo_acc", "ppo_adapt")
#: the controllers an off-policy learner (``algo: sac | tqc``) may train: env actions, or a
#: tracker's desired acceleration (``ppo_adapt``'s estimator pairing is PPO's only)
OFFPOLICY_CONTROLLERS = ("ppo", "ppo_res", "ppo_acc")
MAX_VECTOR_ENVS = 4096  # vector backend: envs in one ResidualQuadVectorEnv
