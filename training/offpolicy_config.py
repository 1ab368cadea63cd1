"""``algo: sac | tqc`` settings: :class:`OffPolicyHyperparams`, the ``offpolicy`` section of
:class:`~residual_quad.training.ppo_config.PPOTrainConfig` (loaded with it; unknown keys are
errors)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: the networks' activations of ``ppo.activation`` and ``offpolicy.activation``
ACTIVATIONS = ("tanh", "relu", "elu")


@dataclass
class OffPolicyHyperparams:
    """SAC / TQC arguments [SAC] [TQC] (``algo: sac | tqc``), SB3-zoo-like defaults.

    With ``n_envs`` envs each vector step stores ``n_envs`` transitions, so the gradient steps
    per vector step scale with the batch: ``gradient_steps: null`` takes
    ``round(replay_ratio · n_envs · train_freq)`` (at least 1) — ``replay_ratio`` gradient steps
    per stored transition, whatever the number of envs.
    """

    learning_rate: float = 3e-4
    buffer_size: int = 1_000_000  # transitions
    batch_size: int = 256
    learning_starts: int = 10_000  # transitions stored before the first update
    train_freq: int = 1  # vector steps between updates
    gradient_steps: int | None = None  # per update; None: from replay_ratio (see above)
    replay_ratio: float = 0.25  # gradient steps per stored transition (gradient_steps None)
    gamma: float = 0.99
    tau: float = 0.005  # target network soft-update rate
    net_arch: list[int] = field(default_factory=lambda: [256, 256])  # actor and critics, each
    activation: str = "relu"  # tanh | relu | elu
    ent_coef: str | float = "auto"  # "auto" (learned, target entropy -dim(a)) or a number
    log_std_init: float = -3.0  # initial exploration std exp(-3) ≈ 0.05 before the tanh
    n_quantiles: int = 25  # tqc: quantiles per critic
    n_critics: int = 2  # tqc: critics
    top_quantiles_to_drop_per_net: int = 2  # tqc: overestimation control

    def resolved_gradient_steps(self, n_envs: int) -> int:
        """Gradient steps per update for ``n_envs`` envs (see the class docstring)."""
        if self.gradient_steps is not None:
            return self.gradient_steps
        return max(1, round(self.replay_ratio * n_envs * self.train_freq))

    def check(self) -> None:
        """``ValueError`` for settings SAC/TQC cannot run with."""
        for name in ("buffer_size", "batch_size", "train_freq", "n_quantiles", "n_critics"):
            if getattr(self, name) < 1:
                raise ValueError(f"offpolicy.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"offpolicy.learning_starts must be >= 0, got {self.learning_starts}")
        if self.gradient_steps is not None and self.gradient_steps < 1:
            raise ValueError(
                f"offpolicy.gradient_steps must be >= 1 or null, got {self.gradient_steps}"
            )
        if not (math.isfinite(self.replay_ratio) and self.replay_ratio > 0):
            raise ValueError(f"offpolicy.replay_ratio must be > 0, got {self.replay_ratio}")
        if not (0 < self.gamma <= 1 and 0 < self.tau <= 1 and self.learning_rate > 0):
            raise ValueError(
                "offpolicy needs 0 < gamma <= 1, 0 < tau <= 1 and learning_rate > 0, got "
                f"{self.gamma}, {self.tau}, {self.learning_rate}"
            )
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"offpolicy.batch_size {self.batch_size} is larger than buffer_size "
                f"{self.buffer_size}"
            )
        ent = self.ent_coef
        if isinstance(ent, str):
            if ent != "auto" and not (ent.startswith("auto_") and _is_float(ent[5:])):
                raise ValueError(
                    f"offpolicy.ent_coef must be 'auto', 'auto_<initial>' or a number > 0, "
                    f"got {ent!r}"
                )
        elif isinstance(ent, bool) or not (math.isfinite(ent) and ent > 0):
            raise ValueError(f"offpolicy.ent_coef must be 'auto' or a number > 0, got {ent!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"offpolicy.activation must be one of {list(ACTIVATIONS)}")
        if not self.net_arch or any(w < 1 for w in self.net_arch):
            raise ValueError(f"offpolicy.net_arch must be positive widths, got {self.net_arch}")
        total = self.n_quantiles * self.n_critics
        if not 0 <= self.top_quantiles_to_drop_per_net * self.n_critics < total:
            raise ValueError(
                "offpolicy.top_quantiles_to_drop_per_net must be >= 0 and leave quantiles: "
                f"got {self.top_quantiles_to_drop_per_net} of {self.n_quantiles} per critic"
            )


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
