"""The reward of ``ResidualQuad-v0``: an alive bonus minus tracking, rate and smoothness costs.

``r = alive − w_pos·‖e_p‖ − w_vel·‖e_v‖ − w_rate·‖ω‖ − w_smooth·‖a_t − a_{t−1}‖²`` with the
position error ``e_p = p − p_ref`` (m), the velocity error ``e_v = v − v_ref`` (m/s), the body
rates ``ω`` (rad/s) and the normalized actions ``a``. Scalar code on Python floats (the
environment's step is dominated by such small sums; numpy calls would cost more than they do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from residual_quad import configs
from residual_quad.envs.checks import real
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.xp import FLOATS, Namespace

# ObsLayout entries bound once (module globals are looked up faster than class attributes)
_X, _Y, _Z = L.x, L.y, L.z
_VX, _VY, _VZ = L.vx, L.vy, L.vz
_OMEGA = L.omega_b

#: names of the reward terms, in the order they are added up
REWARD_TERMS: tuple[str, ...] = ("alive", "pos", "vel", "rate", "smooth")


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the reward terms (the reward is ``alive`` minus the weighted costs)."""

    alive: float = 1.0  # per step, forfeited when a crash ends the episode
    pos: float = 1.0  # 1/m, on ‖e_p‖
    vel: float = 0.1  # s/m, on ‖e_v‖
    rate: float = 0.02  # s/rad, on ‖ω‖
    smooth: float = 0.01  # on ‖a_t − a_{t−1}‖² (normalized action units)

    def __post_init__(self) -> None:
        for name in REWARD_TERMS:  # a NaN or inf weight would make every reward NaN or inf
            real(f"reward weight {name}", getattr(self, name))

    @classmethod
    def from_spec(cls, spec: RewardWeights | dict[str, Any] | None) -> RewardWeights:
        """Weights from an instance, a dict overriding some defaults (unknown keys are errors
        that list the valid ones) or ``None`` (defaults)."""
        if isinstance(spec, cls):
            return spec
        if spec is not None and not isinstance(spec, dict):
            raise ValueError(
                f"reward_weights must be a RewardWeights, a dict of overrides of "
                f"{', '.join(REWARD_TERMS)} or None, got {spec!r}"
            )
        return configs.load(cls, dict(spec or {}))


def position_error(obs: Sequence[float], ref_pos: Sequence[float], xp: Namespace = FLOATS) -> float:
    """``‖p − p_ref‖`` (m) of a true observation (list of floats) and a reference position.

    The vector environment passes the batch transposed (``obs`` of shape ``(OBS_DIM, N)``,
    ``ref_pos`` of ``(3, N)``) and ``xp=ARRAYS`` (:mod:`residual_quad.envs.xp`): the same
    formula, element by element."""
    ref_x, ref_y, ref_z = ref_pos
    return xp.sqrt((obs[_X] - ref_x) ** 2 + (obs[_Y] - ref_y) ** 2 + (obs[_Z] - ref_z) ** 2)


def reward_terms(
    weights: RewardWeights,
    obs: Sequence[float],
    ref_vel: Sequence[float],
    pos_error: float,
    action: Sequence[float],
    prev_action: Sequence[float],
    xp: Namespace = FLOATS,
) -> dict[str, float]:
    """The signed reward terms (``info["reward_terms"]``), keyed as :data:`REWARD_TERMS`.

    Args:
        weights: term weights.
        obs: true observation (list of floats in the :class:`ObsLayout` layout).
        ref_vel: reference velocity, world, m/s.
        pos_error: ``‖e_p‖``, m (see :func:`position_error`).
        action: this step's clipped action; ``prev_action``: the previous one.
        xp: :class:`~residual_quad.envs.xp.FLOATS`; the vector environment passes
            :class:`~residual_quad.envs.xp.ARRAYS` and the batch transposed (``obs``
            ``(OBS_DIM, N)``, ``ref_vel`` ``(3, N)``, actions ``(4, N)``).
    """
    ref_vx, ref_vy, ref_vz = ref_vel
    vel_error = xp.sqrt(
        (obs[_VX] - ref_vx) ** 2 + (obs[_VY] - ref_vy) ** 2 + (obs[_VZ] - ref_vz) ** 2
    )  # m/s
    omega_x, omega_y, omega_z = obs[_OMEGA]
    rate = xp.sqrt(omega_x**2 + omega_y**2 + omega_z**2)  # rad/s
    smooth = sum((a - b) ** 2 for a, b in zip(action, prev_action, strict=True))
    return {
        "alive": weights.alive,
        "pos": -weights.pos * pos_error,
        "vel": -weights.vel * vel_error,
        "rate": -weights.rate * rate,
        "smooth": -weights.smooth * smooth,
    }


def total_reward(terms: dict[str, float]) -> float:
    """The reward: the terms added up in the order of :data:`REWARD_TERMS`."""
    return terms["alive"] + terms["pos"] + terms["vel"] + terms["rate"] + terms["smooth"]
