"""Sensor errors of ``ResidualQuad-v0``: white Gaussian noise on the observed state and the IMU
bias (:mod:`~residual_quad.envs.imu_bias`).

The noise has its own random stream, seeded from the environment's generator at every reset, so
that switching noise on leaves the wind realization (drawn from the environment's generator)
unchanged. The seed is drawn whether or not noise is configured, so the environment's generator
advances identically either way. The bias draws from a second stream spawned from the same seed,
so switching the bias on leaves the white noise unchanged too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from residual_quad.envs.checks import is_real
from residual_quad.envs.imu_bias import BIAS_DIM, ImuBias, add_bias, walk_bias
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
    """Turns the true observation into the reported one: ``obs + σ·n`` (``n ~ N(0, I)``) plus
    the IMU bias of the observation's time.

    Args:
        noise: white-noise levels.
        bias: IMU bias (``None``: none).
        dt: time between two observations (the control period), s.
    """

    def __init__(self, noise: SensorNoise, bias: ImuBias | None = None, dt: float = 0.01):
        self.noise = noise
        self.imu_bias = bias or ImuBias()
        self._std = noise.std()
        self._white = bool(self._std.any())
        self._biased = self.imu_bias.on
        self.noisy = self._white or self._biased
        self._rng = np.random.default_rng(0)
        self._bias_rng = np.random.default_rng(1)
        self._step_std = self.imu_bias.step_std(dt)
        self._bias = np.zeros(BIAS_DIM)
        self._first = True

    @property
    def bias(self) -> np.ndarray:
        """The IMU bias in the last observation :meth:`sense` reported (gyro rad/s, then
        accelerometer m/s², body frame), shape ``(BIAS_DIM,)``; zeros without bias."""
        return self._bias

    def reseed(self, env_rng: np.random.Generator) -> None:
        """Start new noise and bias streams from one draw of the environment's generator (every
        reset) and draw the turn-on bias."""
        seed = np.random.SeedSequence(int(env_rng.integers(2**63)))
        self._rng = np.random.default_rng(seed)
        self._first = True
        if self._biased:
            self._bias_rng = np.random.default_rng(seed.spawn(1)[0])
            self._bias = self.imu_bias.initial_std() * self._bias_rng.standard_normal(BIAS_DIM)

    def sense(self, obs: np.ndarray) -> np.ndarray:
        """The observation as the sensors report it (``obs`` itself when there is no noise and
        no bias). The first call after :meth:`reseed` reports the turn-on bias; every later one
        walks the bias one period first."""
        if not self.noisy:
            return obs
        if self._white:
            obs = obs + self._std * self._rng.standard_normal(OBS_DIM)
        if self._biased:
            if not self._first:
                noise = self._bias_rng.standard_normal(BIAS_DIM)
                self._bias = walk_bias(self._bias, self._step_std, noise)
            obs = add_bias(obs, self._bias)
        self._first = False
        return obs


def sense_batch(
    obs_out: np.ndarray,
    info: dict[str, Any],
    obs: np.ndarray,
    active: np.ndarray,
    noisy: np.ndarray,
    envs: Sequence[Any],
) -> None:
    """The vector env's sensing: rows ``active`` of ``obs_out`` get the reported observations of
    the true ones ``obs`` (through ``envs[i].sensors``, each env's own :class:`Sensors`, where
    ``noisy``), and the batched ``info`` the IMU biases in them (``gyro_bias``, ``accel_bias``
    and their masks)."""
    obs_out[active] = obs
    bias = np.zeros((len(active), BIAS_DIM))
    for k in np.flatnonzero(noisy).tolist():
        env_sensors = envs[int(active[k])].sensors
        obs_out[active[k]] = env_sensors.sense(obs[k])
        bias[k] = env_sensors.bias
    for key, value in (("gyro_bias", bias[:, 0:3]), ("accel_bias", bias[:, 3:6])):
        info[key][active] = value
        info[f"_{key}"][active] = True
