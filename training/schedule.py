"""PPO's learning rate with a polish: the linear decay to ``lr_final``, then a slower tail.

SB3 saves the schedule with the model (pickled by reference), so the class keeps its name and
module. The linear decay alone is :class:`~residual_quad.training.ppo_model.LinearSchedule`.
"""

from __future__ import annotations

from typing import Any

from residual_quad.envs.checks import integer, is_real


class PolishedSchedule:
    """The rate from ``start`` to ``end`` linearly over the first ``1 − polish`` of the budget,
    then on from ``end`` to ``final`` over the last ``polish`` (a fraction in (0, 1)): the
    recipe's decay as before, and a last stretch at a rate the deterministic mean can settle at
    (docs/ppo.md, "A low-rate polish at the end of training")."""

    def __init__(self, start: float, end: float, final: float, polish: float):
        self.start, self.end, self.final, self.polish = start, end, final, polish

    def __call__(self, progress_remaining: float) -> float:
        done = 1.0 - progress_remaining  # SB3's progress: 1 at the start, 0 at the end
        knee = 1.0 - self.polish
        if done <= knee:
            return self.start + (self.end - self.start) * done / knee
        return self.end + (self.final - self.end) * (done - knee) / self.polish


def polished(h: Any, total_steps: int) -> PolishedSchedule | None:
    """The schedule of a ``ppo`` section with ``polish_steps`` (``None`` without)."""
    if not h.polish_steps:
        return None
    return PolishedSchedule(h.learning_rate, h.lr_final, h.polish_lr, h.polish_steps / total_steps)


def check_polish(h: Any, total_steps: int) -> None:
    """A one-line ``ValueError`` unless ``ppo.polish_steps`` is an integer in [0, total_steps)
    and, where it is not 0, ``ppo.lr_final`` is set and ``ppo.polish_lr`` is in (0, lr_final]."""
    steps = integer("ppo.polish_steps", h.polish_steps, low=0, high=total_steps - 1)
    lr = h.polish_lr
    if steps == 0:
        if lr is not None:
            raise ValueError(f"ppo.polish_lr is {lr!r} but ppo.polish_steps is 0: no polish")
        return
    if h.lr_final is None:
        raise ValueError("ppo.polish_steps continues the decay to ppo.lr_final: set lr_final")
    if not (is_real(lr) and 0 < lr <= h.lr_final):
        raise ValueError(
            f"ppo.polish_lr must be a number in (0, lr_final {h.lr_final:g}], got {lr!r}"
        )
