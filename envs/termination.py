"""When an episode of ``ResidualQuad-v0`` ends early: the crash conditions and their check."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residual_quad.envs.checks import real
from residual_quad.envs.observation import ObsLayout as L

_R22 = L.R22  # cos(tilt), bound once (a module global is looked up faster)

#: every reason :func:`termination_code` can return (as its index), in the order they are checked
TERMINATION_REASONS: tuple[str, ...] = (
    "simulation_unstable",
    "non_finite",
    "tilt",
    "position_error",
    "ground_contact",
)

#: reasons after which the state is meaningless: the step's reward is 0 and has no terms
NO_REWARD_REASONS: frozenset[str] = frozenset({"simulation_unstable", "non_finite"})


@dataclass(frozen=True)
class CrashConditions:
    """Limits beyond which the flight counts as a crash and the episode is terminated."""

    max_tilt: float = math.pi / 2  # rad, angle between body z and world z (π/2: on its side)
    crash_speed: float = 1.0  # m/s, floor contact faster than this is a crash
    max_position_error: float = 5.0  # m, tracking error that ends the episode
    cos_max_tilt: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # NaN would silently switch a check off (every comparison with NaN is False)
        real("max_tilt", self.max_tilt, low=0.0, high=math.pi, low_open=True, unit="rad")
        real("crash_speed", self.crash_speed, low=0.0, unit="m/s")
        real("max_position_error", self.max_position_error, low=0.0, low_open=True, unit="m")
        object.__setattr__(self, "cos_max_tilt", math.cos(self.max_tilt))


def termination_code(
    conditions: CrashConditions,
    obs: Any,
    pos_error: Any,
    unstable: Any,
    sim_time: Any,
    expected_time: Any,
    contact_speed: Any,
) -> Any:
    """Why the episode ends now, as an index into :data:`TERMINATION_REASONS`; -1 when it goes on.

    Args:
        conditions: crash limits.
        obs: the true observation after the step: one as a list of floats (an int is returned),
            or an ``(N, OBS_DIM)`` array (an int array of N is returned, the other arguments
            arrays of N).
        pos_error: tracking error ``‖p − p_ref‖``, m.
        unstable: the physics saw MuJoCo warn in a substep of the period (a NaN, inf or huge
            position, velocity or acceleration, see :meth:`QuadrotorPlant.unstable`), after
            which MuJoCo reset its data to the default pose.
        sim_time: the physics' simulated time, s; ``expected_time`` the time it should have
            reached. A time that fell behind is how older MuJoCo versions showed the same reset.
        contact_speed: the frame's speed while a geom of it touches the floor, else 0, m/s.

    The reasons are checked in the order of :data:`TERMINATION_REASONS` (the first that holds
    wins). ``tilt`` tests ``R22 = cos(tilt)`` against ``cos(max_tilt)``.
    """
    batch = isinstance(obs, np.ndarray) and obs.ndim == 2
    checks = (
        unstable | (abs(sim_time - expected_time) > 1e-6),
        ~np.isfinite(obs).all(axis=1) if batch else not _all_finite(obs),
        (obs[:, _R22] if batch else obs[_R22]) < conditions.cos_max_tilt,
        pos_error > conditions.max_position_error,
        contact_speed > conditions.crash_speed,
    )
    if batch:
        return np.select(checks, range(len(checks)), -1)
    for code, hit in enumerate(checks):
        if hit:
            return code
    return -1


def termination_reason(
    conditions: CrashConditions,
    obs: Sequence[float],
    pos_error: float,
    unstable: bool,
    sim_time: float,
    expected_time: float,
    contact_speed: float,
) -> str | None:
    """:func:`termination_code` of one observation as the reason's name (``None``: goes on)."""
    code = termination_code(
        conditions, obs, pos_error, unstable, sim_time, expected_time, contact_speed
    )
    return TERMINATION_REASONS[code] if code >= 0 else None


def _all_finite(obs: Sequence[float]) -> bool:
    """Every entry of one observation is finite (one sum first: the common case is one call)."""
    return math.isfinite(sum(obs)) or all(map(math.isfinite, obs))
