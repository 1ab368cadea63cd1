"""When an episode of ``ResidualQuad-v0`` ends early: the crash conditions and their check."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from residual_quad.envs.checks import real
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.plant import QuadrotorPlant

_R22 = L.R22  # cos(tilt), bound once (a module global is looked up faster)

#: every reason :func:`termination_reason` can return, in the order they are checked
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


def termination_reason(
    conditions: CrashConditions,
    plant: QuadrotorPlant,
    obs: Sequence[float],
    obs_array: np.ndarray,
    pos_error: float,
    expected_time: float,
) -> str | None:
    """Why the episode ends now (one of :data:`TERMINATION_REASONS`), or ``None``.

    Args:
        conditions: crash limits.
        plant: the plant after the step (time, contacts, velocity).
        obs: the true observation as a list of floats; ``obs_array`` the same as an array.
        pos_error: tracking error ``‖p − p_ref‖``, m.
        expected_time: simulated time the plant should have reached, s.

    ``simulation_unstable``: MuJoCo raised a warning in a substep of the period (a NaN, inf or
    huge position, velocity or acceleration, see :meth:`QuadrotorPlant.unstable`) and reset its
    data to the default pose, so the state no longer follows the flight; a simulated time that
    fell behind ``expected_time`` (how older MuJoCo versions showed the same reset) counts too.
    ``tilt`` tests ``R22 = cos(tilt)`` against ``cos(max_tilt)``.
    """
    data = plant.data
    if plant.unstable() or abs(data.time - expected_time) > 1e-6:
        return "simulation_unstable"
    if not math.isfinite(sum(obs)) and not np.all(np.isfinite(obs_array)):
        return "non_finite"
    if obs[_R22] < conditions.cos_max_tilt:
        return "tilt"
    if pos_error > conditions.max_position_error:
        return "position_error"
    if data.ncon and plant.floor_contact_speed() > conditions.crash_speed:
        return "ground_contact"
    return None
