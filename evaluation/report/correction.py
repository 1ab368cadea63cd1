"""Is a bounded correction smooth or bang-bang? Share of decisions at the bounds, share of the
power at high frequency, and jumps, for a policy that outputs a correction in [-1, 1]ᵏ
(``ppo_res``: scaled to ±``accel_scale`` m/s²).

A correction that saturates most of the time and flips sign between decisions ("chatter") wastes
control effort and excites the airframe even when the tracking error looks fine; these three
numbers expose it, for one flight (``rquad eval ppo_res`` prints them) or several.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

AT_BOUND = 0.99  # |u| at or above this fraction of the bound counts as saturated
HIGH_HZ = 5.0  # Hz, "high frequency": above a quadrotor's position-loop bandwidth
JUMP = 1.0  # a change of more than half the range [-1, 1] between two decisions


@dataclass(frozen=True)
class CorrectionStats:
    """One flight's correction, after the take-off transient (fractions in [0, 1])."""

    decisions: int  # decisions measured
    at_bounds: float  # share of decisions with some axis at its bound
    high_freq_power: float  # share of the (mean-removed) power at ≥ 5 Hz, all axes
    jumps: float  # share of decisions where some axis moves more than half the range

    def line(self, label: str) -> str:
        """One sentence for the terminal."""
        return (
            f"{label} correction: at its bounds {self.at_bounds:.1%} of {self.decisions} "
            f"decisions, {self.high_freq_power:.1%} of its power at ≥ {HIGH_HZ:g} Hz, a jump "
            f"of more than half its range at {self.jumps:.1%}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def correction_stats(u: np.ndarray, decision_dt: float) -> CorrectionStats:
    """Stats of the decisions ``u`` (n, k), each in [-1, 1], taken every ``decision_dt`` s."""
    u = np.asarray(u, dtype=float)
    if u.ndim != 2 or not np.isfinite(u).all():
        raise ValueError(f"u must be a finite (n, k) array, got shape {u.shape}")
    if not (np.isfinite(decision_dt) and decision_dt > 0):
        raise ValueError(f"decision_dt must be a positive number of seconds, got {decision_dt}")
    n = len(u)
    if n == 0:
        return CorrectionStats(0, 0.0, 0.0, 0.0)
    at = float((np.abs(u) >= AT_BOUND).any(axis=1).mean())
    jumps = float((np.abs(np.diff(u, axis=0)) > JUMP).any(axis=1).mean()) if n > 1 else 0.0
    dev = u - u.mean(axis=0)
    dev[np.abs(dev) < 1e-12] = 0.0  # a constant's round-off is no power
    power = np.abs(np.fft.rfft(dev, axis=0)) ** 2
    freq = np.fft.rfftfreq(n, d=decision_dt)
    total = power[freq > 0].sum()
    high = float(power[freq >= HIGH_HZ].sum() / total) if total > 0 else 0.0
    return CorrectionStats(n, at, high, jumps)


class CorrectionRecorder:
    """A ``run_episode`` callback that keeps the correction a controller holds after each step
    (its state's ``policy.u`` in [-1, 1]ᵏ, renewed every ``action_repeat`` control periods of
    ``context.control_dt``: ``ppo_res``), then :meth:`stats` from ``skip_s`` on."""

    def __init__(self, controller: Any):
        self.controller = controller
        self.control_dt = float(controller.context.control_dt)  # s
        self.action_repeat = int(controller.action_repeat)
        self.held: list[np.ndarray] = []

    @staticmethod
    def applies(controller: Any) -> bool:
        """Whether ``controller`` holds a bounded correction to record."""
        policy = getattr(getattr(controller, "state", None), "policy", None)
        return hasattr(policy, "u") and hasattr(controller, "action_repeat")

    def __call__(self, step: int, obs: Any, action: Any, info: Any) -> None:
        self.held.append(np.array(self.controller.state.policy.u, dtype=float))

    def stats(self, skip_s: float) -> CorrectionStats:
        """The decisions from ``skip_s`` on (one per ``action_repeat`` control periods)."""
        first = int(round(skip_s / self.control_dt))
        held = self.held[first :: self.action_repeat]
        if not held:
            return CorrectionStats(0, 0.0, 0.0, 0.0)
        return correction_stats(np.array(held), self.control_dt * self.action_repeat)
