"""What a PPO training learns with: the SB3 env of a config and the SB3 ``PPO`` model on it.

:func:`make_training_env` builds the monitored :class:`~residual_quad.training.ppo_vec.QuadVecEnv`
(all envs in one vector env, domain randomization through :func:`training_sampler`: the
:class:`~residual_quad.training.ppo_vec.ScenarioSampler`, or off the evaluation matrix the
:class:`~residual_quad.training.scenarios.OffMatrixSampler`), :func:`normalized` puts it behind
``VecNormalize``, :func:`new_model` makes the seeded ``PPO`` and :func:`prepare_learner` gives a
model, new or loaded from a checkpoint, the config's learner settings: :func:`fix_std` freezes its
exploration scale where the config says so, :func:`multi_tensor_adam` switches Adam to its
multi-tensor kernels (speed only: the same numbers, bit for bit — docs/ppo.md, "The learner's
cost"). stable-baselines3 and torch are imported inside the functions, never at import time.
"""

from __future__ import annotations

from typing import Any

from residual_quad.controllers.policy_file import (
    ACCELERATION_KINDS,
    algo_module,
    import_sb3,
    rl_purpose,
)
from residual_quad.training.ppo_config import PPOTrainConfig
from residual_quad.training.schedule import polished


def training_sampler(cfg: PPOTrainConfig) -> Any:
    """The scenario sampler of ``cfg``'s training episodes: :class:`ScenarioSampler` over the
    lists (``trajectory_draw: fixed``, each trajectory with its default parameters) or
    :class:`~residual_quad.training.scenarios.OffMatrixSampler` (``randomized``)."""
    if cfg.trajectory_draw == "randomized":
        from residual_quad.training.scenarios import OffMatrixSampler

        focus = cfg.focus_lists()
        return OffMatrixSampler(
            cfg.payloads,
            cfg.winds,
            cfg.trajectories,
            cfg.start_pos_noise,
            cfg.trajectory_ranges,
            focus=[
                OffMatrixSampler(
                    f["payloads"], f["winds"], f["families"], cfg.start_pos_noise, f["ranges"]
                )
                for f in focus
            ],
            focus_fraction=[f["fraction"] for f in focus],
            efficiencies=cfg.rotor_efficiency,
        )
    from residual_quad.training.ppo_vec import ScenarioSampler

    return ScenarioSampler(cfg.payloads, cfg.winds, cfg.trajectories, cfg.start_pos_noise)


def make_training_env(cfg: PPOTrainConfig, **vector_kwargs: Any) -> Any:
    """The SB3 ``VecEnv`` of ``cfg`` (monitored, not yet normalized): :class:`QuadVecEnv` on the
    vector env, its scenarios drawn by :func:`training_sampler` (seeded ``cfg.seed``), its env
    seeds from ``cfg.env_seed_offset()`` up. ``vector_kwargs``: vector-env settings that are no
    env argument (``reference_table_bytes``, a benchmark's knob): never part of the config, so
    never recorded in a policy file."""
    from stable_baselines3.common.vec_env import VecMonitor

    from residual_quad.training.ppo_vec import QuadVecEnv

    n_envs = cfg.resolved_envs()
    sampler = training_sampler(cfg)
    pilot = None
    if cfg.controller in ACCELERATION_KINDS:
        from residual_quad.controllers.ppo_res import ResidualPilot

        pilot = ResidualPilot(
            n_envs,
            cfg.accel_scale,
            correction_rate=cfg.correction_rate,
            action_repeat=cfg.action_repeat,
            tracker=cfg.tracker,
            attitude=cfg.tracker_gains(),
            core=cfg.core,
            trained_on=cfg.env_kwargs,
        )
    estimator = None
    if cfg.features.estimate:  # ppo_adapt, or ppo_res with the estimate
        from residual_quad.controllers.ppo_adapt import AdaptEstimator

        estimator = AdaptEstimator(n_envs, feedforward=cfg.estimate_feedforward)
    venv = QuadVecEnv(
        n_envs,
        sampler,
        action_repeat=cfg.action_repeat,
        nthread=cfg.env_threads,
        scenario_seed=cfg.seed,
        seed_offset=cfg.env_seed_offset(),
        pilot=pilot,
        features=cfg.features.spec(),
        estimator=estimator,
        action_mode=cfg.action_mode,
        episode_s=cfg.episode_s,
        episode_lengths=cfg.episode_lengths,
        reward_weights=cfg.reward_weights or None,
        max_position_error=cfg.max_position_error,
        privileged=cfg.privileged_critic,
        action_cost=(cfg.action_smooth, cfg.action_magnitude),
        position_log=(cfg.position_log, cfg.position_log_scale),
        precision=cfg.precision if cfg.reward == "precision" else None,
        **cfg.env_kwargs,
        **vector_kwargs,
    )
    return VecMonitor(venv)


def normalized(venv: Any, cfg: PPOTrainConfig) -> Any:
    """``venv`` behind SB3's ``VecNormalize`` with the run's normalization settings."""
    from stable_baselines3.common.vec_env import VecNormalize

    return VecNormalize(
        venv,
        norm_obs=cfg.normalize_obs,
        norm_reward=cfg.normalize_reward,
        clip_obs=cfg.clip_obs,
        gamma=cfg.discount(),
    )


def new_model(
    cfg: PPOTrainConfig, venv: Any, tensorboard: str | None = None, verbose: int = 0
) -> Any:
    """A fresh SB3 ``PPO`` per ``cfg.ppo`` on ``venv`` (seeded ``cfg.seed``, CPU); with
    ``algo: sac | tqc`` the off-policy learner (:func:`new_offpolicy_model`)."""
    if cfg.algo != "ppo":
        return new_offpolicy_model(cfg, venv, tensorboard, verbose)
    import_sb3(rl_purpose(cfg.controller))  # the install hint names this controller

    h = cfg.ppo
    lr: Any = h.learning_rate
    if h.lr_final is not None:
        lr = polished(h, cfg.total_steps) or LinearSchedule(h.learning_rate, h.lr_final)
    act = activation(h.activation)
    policy: Any = "MlpPolicy"
    extra: dict[str, Any] = {}
    if cfg.privileged_critic:
        from residual_quad.training.privileged import AsymmetricActorCriticPolicy

        policy = AsymmetricActorCriticPolicy
        extra["actor_dim"] = int(venv.unwrapped.actor_dim)
    if h.anchored:
        from residual_quad.training.anchored import AnchoredActorCriticPolicy

        policy = AnchoredActorCriticPolicy
        spec = cfg.features.spec()
        extra["anchor_features"] = {**spec.to_record(), "preview_k": spec.preview_k}
        extra["anchor_action_dim"] = int(venv.unwrapped.action_dim)
        extra["clip_obs"] = float(cfg.clip_obs)
    model = learner_class(cfg)(
        policy,
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
            **extra,
        },
        tensorboard_log=tensorboard,
        seed=cfg.seed,
        device="cpu",
        verbose=verbose,
        **smoothness_kwargs(cfg),
    )
    prepare_learner(model, cfg)
    return model


def _smoothed(cfg: PPOTrainConfig) -> bool:
    """Whether ``cfg`` trains with CAPS's spatial smoothness term."""
    return cfg.algo == "ppo" and cfg.ppo.spatial_smoothness > 0


def learner_class(cfg: PPOTrainConfig) -> Any:
    """The SB3 class that trains (and resumes) ``cfg``: SB3's ``PPO``, or
    :class:`~residual_quad.training.smoothness.SmoothPPO` with a spatial smoothness term;
    ``algo: sac | tqc`` their classes."""
    if _smoothed(cfg):
        from residual_quad.training.smoothness import SmoothPPO

        return SmoothPPO
    return algo_module(cfg.algo)


def smoothness_kwargs(cfg: PPOTrainConfig) -> dict[str, Any]:
    """:class:`~residual_quad.training.smoothness.SmoothPPO`'s arguments of ``cfg`` (none for
    SB3's ``PPO``)."""
    if not _smoothed(cfg):
        return {}
    h = cfg.ppo
    return {"spatial_smoothness": h.spatial_smoothness, "smoothness_sigma": h.smoothness_sigma}


def new_offpolicy_model(
    cfg: PPOTrainConfig, venv: Any, tensorboard: str | None = None, verbose: int = 0
) -> Any:
    """A fresh SAC [SAC] or TQC [TQC] per ``cfg.offpolicy`` on ``venv`` (seeded ``cfg.seed``,
    CPU); gradient steps per update scale with the envs
    (:meth:`~residual_quad.training.ppo_config.OffPolicyHyperparams.resolved_gradient_steps`)."""

    h = cfg.offpolicy
    act = activation(h.activation)
    policy_kwargs: dict[str, Any] = {
        "net_arch": list(h.net_arch),
        "activation_fn": act,
        "log_std_init": h.log_std_init,
    }
    extra: dict[str, Any] = {}
    if cfg.algo == "tqc":
        policy_kwargs |= {"n_quantiles": h.n_quantiles, "n_critics": h.n_critics}
        extra["top_quantiles_to_drop_per_net"] = h.top_quantiles_to_drop_per_net
    model = algo_module(cfg.algo)(
        "MlpPolicy",
        venv,
        learning_rate=h.learning_rate,
        buffer_size=h.buffer_size,
        learning_starts=h.learning_starts,
        batch_size=h.batch_size,
        tau=h.tau,
        gamma=h.gamma,
        train_freq=h.train_freq,
        gradient_steps=h.resolved_gradient_steps(venv.num_envs),
        ent_coef=h.ent_coef,
        policy_kwargs=policy_kwargs,
        tensorboard_log=tensorboard,
        seed=cfg.seed,
        device="cpu",
        verbose=verbose,
        **extra,
    )
    prepare_learner(model, cfg)
    return model


def activation(name: str) -> Any:
    """The torch activation class of a config's ``activation`` name (tanh, relu, elu)."""
    import torch

    return {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[name]


def prepare_learner(model: Any, cfg: PPOTrainConfig) -> None:
    """The learner settings of ``cfg`` on ``model`` (a new one or one loaded from a checkpoint,
    whose saved optimizer state would otherwise bring back the settings it was saved with)."""
    fix_std(model, cfg)
    multi_tensor_adam(model)


def fix_std(model: Any, cfg: PPOTrainConfig) -> None:
    """Freeze the exploration scale when ``ppo.learn_std`` is off (a new or a loaded model)."""
    if cfg.algo == "ppo" and not cfg.ppo.learn_std:
        model.policy.log_std.requires_grad_(False)  # Adam skips a parameter without gradient


def multi_tensor_adam(model: Any, on: bool = True) -> None:
    """Run ``model``'s Adam with torch's multi-tensor (``foreach``) kernels, or, ``on=False``,
    its per-parameter loop (torch's default on the CPU, what SB3 gets).

    Speed only: both compute the same numbers bit for bit (tested on the first updates of a
    seeded run); the 13 small tensors of a 64×64 policy update in a few kernel calls instead of
    ≈ 10 per tensor. The setting lives in the optimizer's parameter groups, which a checkpoint
    saves and restores, hence it is applied again after every load.
    """
    policy = model.policy
    optimizers = [getattr(policy, "optimizer", None)]
    optimizers += [
        getattr(getattr(policy, k, None), "optimizer", None) for k in ("actor", "critic")
    ]
    optimizers.append(getattr(model, "ent_coef_optimizer", None))
    for optimizer in optimizers:
        for group in getattr(optimizer, "param_groups", ()):
            group["foreach"] = bool(on)


class LinearSchedule:
    """Learning rate linear in training progress (picklable, unlike a lambda; models pickle it
    by reference, so policies saved before it moved here name ``training.ppo._LinearSchedule``,
    which :mod:`residual_quad.training.ppo` keeps)."""

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end

    def __call__(self, progress_remaining: float) -> float:
        return self.end + (self.start - self.end) * progress_remaining
