"""Sensor noise of ``ResidualQuad-v0``: white Gaussian noise on the observed state.

The noise has its own random stream, seeded from the environment's generator at every reset, so
that switching noise on leaves the wind realization (drawn from the environment's generator)
unchanged. The seed is drawn whether or not noise is configured, so the environment's generator
advances identically either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from residual_quad.envs.checks import is_real
from residual_quad.envs.observation import OBS_DIM, ObsLayout

MAX_NOISE_STD = 1e3
"""Largest accepted noise standard deviation (m, m/s, rad/s, m/s²): far beyond any sensor, and small
enough that ``σ·n`` can never overflow to an infinite observation."""


@dataclass(frozen=True)
class SensorNoise:
    """Standard deviations of white noise on the observation (0: exact)."""

    pos: float = 0.0  # m, position (``ObsLayout.pos``)
    vel: float = 0.0  # m/s, velocity (``ObsLayout.vel``)
    gyro: float = 0.0  # rad/s, body rates (``ObsLayout.omega_b``)
    imu: float = 0.0  # m/s², accelerometer (``ObsLayout.imu``)

    def __post_init__(self) -> None:
        levels = asdict(self)
        if any(not (is_real(v) and 0.0 <= v <= MAX_NOISE_STD) for v in levels.values()):
            raise ValueError(
                f"sensor noise levels must be finite, >= 0 and <= {MAX_NOISE_STD:g} "
                f"(in the units of each quantity), got {levels}"
            )

    def std(self) -> np.ndarray:
        """Per-entry standard deviation over the observation vector, shape ``(OBS_DIM,)``."""
        std = np.zeros(OBS_DIM)
        std[ObsLayout.pos] = self.pos
        std[ObsLayout.vel] = self.vel
        std[ObsLayout.omega_b] = self.gyro
        std[ObsLayout.imu] = self.imu
        return std


class Sensors:
    """Turns the true observation into the reported one (``obs + σ·n``, ``n ~ N(0, I)``)."""

    def __init__(self, noise: SensorNoise):
        self.noise = noise
        self._std = noise.std()
        self.noisy = bool(self._std.any())
        self._rng = np.random.default_rng(0)

    def reseed(self, env_rng: np.random.Generator) -> None:
        """Start a new noise stream from one draw of the environment's generator (every reset)."""
        self._rng = np.random.default_rng(int(env_rng.integers(2**63)))

    def sense(self, obs: np.ndarray) -> np.ndarray:
        """The observation as the sensors report it (``obs`` itself when there is no noise)."""
        if not self.noisy:
            return obs
        return obs + self._std * self._rng.standard_normal(OBS_DIM)
