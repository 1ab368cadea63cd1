"""The precision objective: a per-step reward that is positive, bounded and steep near zero error.

The env's own reward (``alive − w·‖e_p‖ − …``, :mod:`residual_quad.envs.reward`) pays as much for
taking a 6 cm error to 5 cm as for taking 1.06 m to 1.05 m, and 6 cm is worth 3 % of a step's
reward: it gives no pressure toward precision. A kernel on the position error does:

    r_pos(e) = Σ_i w_i · exp(−(e/σ_i)²),   Σ_i w_i = 1,   so 0 < r_pos ≤ 1,

with tolerances σ_i from coarse to fine (a multi-scale kernel: the coarse one still pulls a
vehicle that is far off, the fine one pays for the last centimetres). The action-smoothness term
is kept multiplicatively, so the reward stays in (0, 1]:

    r = r_pos(‖e_p‖) · exp(−w_smooth · ‖u_t − u_{t−1}‖²).

Every step of a flight earns a positive reward, so ending an episode early (a crash) never pays —
the failure of a negative shaped reward, which pays a policy to die. The finest tolerance may be
annealed over training, from a wide one that a random policy can find to the precision asked for
(as in [LEVELING]: 0.8 → 0.1 m). Written once for floats and arrays (NumPy broadcasting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from residual_quad.envs.checks import real


@dataclass(frozen=True)
class PrecisionReward:
    """The multi-scale position kernel and the smoothness factor (module docstring).

    ``tolerances`` (m) are the σ_i, coarse to fine, ``weights`` their w_i (normalized to sum 1).
    ``anneal_from`` (m): the finest tolerance at the start of training, shrunk geometrically to
    ``tolerances[-1]`` over the first ``anneal_fraction`` of the budget (``anneal_from`` 0: no
    annealing)."""

    tolerances: tuple[float, ...] = (0.5, 0.1, 0.02)  # m, coarse to fine
    weights: tuple[float, ...] = (0.2, 0.3, 0.5)
    smooth: float = 0.01  # on ‖u_t − u_{t−1}‖² (normalized action units)
    anneal_from: float = 0.0  # m, the finest tolerance at the start (0: no annealing)
    anneal_fraction: float = 0.5  # of the training budget over which it shrinks

    def __post_init__(self) -> None:
        if not self.tolerances or len(self.tolerances) != len(self.weights):
            raise ValueError(
                "precision reward: tolerances and weights need the same number (>= 1) of entries, "
                f"got {len(self.tolerances)} and {len(self.weights)}"
            )
        for i, sigma in enumerate(self.tolerances):
            real(f"precision reward tolerances[{i}]", sigma, low=0.0, low_open=True, unit="m")
        for i, w in enumerate(self.weights):
            real(f"precision reward weights[{i}]", w, low=0.0)
        if sum(self.weights) <= 0.0:
            raise ValueError("precision reward: the weights must not all be zero")
        real("precision reward smooth", self.smooth, low=0.0)
        real("precision reward anneal_from", self.anneal_from, low=0.0, unit="m")
        if 0.0 < self.anneal_from < self.tolerances[-1]:
            raise ValueError(
                f"precision reward anneal_from {self.anneal_from} m is finer than the final "
                f"tolerance {self.tolerances[-1]} m: annealing shrinks the tolerance"
            )
        real(
            "precision reward anneal_fraction",
            self.anneal_fraction,
            low=0.0,
            low_open=True,
            high=1.0,
        )

    def tolerances_at(self, progress: float) -> tuple[float, ...]:
        """The tolerances (m) at ``progress`` ∈ [0, 1] of the training budget: the finest one
        shrinks geometrically from ``anneal_from`` to its final value over ``anneal_fraction``."""
        if self.anneal_from <= 0.0:
            return self.tolerances
        t = min(1.0, max(0.0, progress) / self.anneal_fraction)
        finest = self.anneal_from * (self.tolerances[-1] / self.anneal_from) ** t
        return (*self.tolerances[:-1], finest)

    def position(self, error_m: float | np.ndarray, progress: float = 1.0) -> float | np.ndarray:
        """``r_pos`` of position errors ``error_m`` (m; a float or an array), in (0, 1]."""
        total = sum(self.weights)
        e = np.asarray(error_m, dtype=float)
        out = sum(
            (w / total) * np.exp(-((e / s) ** 2))
            for w, s in zip(self.weights, self.tolerances_at(progress), strict=True)
        )
        return float(out) if np.ndim(out) == 0 else out

    def __call__(
        self,
        error_m: float | np.ndarray,
        action_change_sq: float | np.ndarray = 0.0,
        progress: float = 1.0,
    ) -> float | np.ndarray:
        """The step reward ``r_pos(e)·exp(−w_smooth·‖Δu‖²)`` in [0, 1] for position errors
        ``error_m`` (m) and squared action changes ``action_change_sq``."""
        factor = np.exp(-self.smooth * np.asarray(action_change_sq, dtype=float))
        out = self.position(error_m, progress) * factor
        return float(out) if np.ndim(out) == 0 else out


def mean_precision(errors_m: Sequence[float] | np.ndarray, reward: PrecisionReward) -> float:
    """The mean position kernel over a flight's position errors (m): the tuning objective's
    per-flight score, 1 for a perfect flight (the smoothness factor is left out: a tracker's
    actions are not the policy's)."""
    e = np.asarray(errors_m, dtype=float)
    if e.size == 0 or not np.all(np.isfinite(e)):
        return 0.0
    return float(np.mean(reward.position(e)))
