"""IMU bias of ``ResidualQuad-v0``: gyro and accelerometer biases that drift as random walks.

A MEMS gyro or accelerometer reads the true value plus a bias that is random at power-up (the
turn-on bias) and then wanders (the bias random walk, rate random walk for a gyro) [IMU]; the
white noise beside it is :class:`~residual_quad.envs.sensors.SensorNoise`. Per axis and sensor,
``b(0) ~ N(0, σ₀²)`` and ``b(t + Δt) = b(t) + q·√Δt·n`` with ``n ~ N(0, 1)``: the exact sampling
of Brownian motion of density ``q`` at the control period, so ``Var b(t) = σ₀² + q²·t`` at any
step size. The bias is added to the observed body rates (``ObsLayout.omega_b``) and specific
force (``ObsLayout.imu``); the true values are in ``info["gyro_bias"]`` and
``info["accel_bias"]``.

The functions are written over a batch (a leading axis of envs, or none for one env).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from residual_quad.envs.checks import real
from residual_quad.envs.observation import ObsLayout

BIAS_DIM = 6
"""Entries of a bias vector: the gyro's three (rad/s, body), then the accelerometer's (m/s²)."""

_BIASED = np.r_[ObsLayout.omega_b, ObsLayout.imu]  # observation entries a bias lands on

MAX_BIAS_STD = 1e3
"""Largest accepted bias level (rad/s, m/s², per √s for the walks): far beyond any sensor, small
enough that a bias stays far from overflow over the longest (one-hour) episode."""


@dataclass(frozen=True)
class ImuBias:
    """Turn-on bias spread and bias random-walk densities of the gyro and accelerometer (all 0:
    no bias, the default)."""

    gyro_initial: float = 0.0  # rad/s, std of the turn-on gyro bias, each body axis
    gyro_walk: float = 0.0  # rad/s/√s, gyro bias random-walk density
    accel_initial: float = 0.0  # m/s², std of the turn-on accelerometer bias, each body axis
    accel_walk: float = 0.0  # m/s²/√s, accelerometer bias random-walk density

    def __post_init__(self) -> None:
        for f in fields(self):
            real(f"imu_bias {f.name}", getattr(self, f.name), low=0.0, high=MAX_BIAS_STD)

    @property
    def on(self) -> bool:
        """Whether any bias is drawn."""
        return any(getattr(self, f.name) != 0.0 for f in fields(self))

    def initial_std(self) -> np.ndarray:
        """Turn-on standard deviation of each bias entry, shape ``(BIAS_DIM,)``."""
        return np.repeat([self.gyro_initial, self.accel_initial], 3)

    def step_std(self, dt: float) -> np.ndarray:
        """Standard deviation of each entry's increment over ``dt`` s, ``q·√dt``."""
        return np.repeat([self.gyro_walk, self.accel_walk], 3) * np.sqrt(dt)

    @classmethod
    def from_spec(cls, spec: str | ImuBias | Mapping[str, Any] | None) -> ImuBias:
        """From a level name of :data:`IMU_BIAS_LEVELS`, an instance, a mapping of field values
        (unknown keys are errors that list the valid ones) or ``None`` (no bias)."""
        if isinstance(spec, cls):
            return spec
        if spec is None:
            return cls()
        names = [f.name for f in fields(cls)]
        if isinstance(spec, str) and spec in IMU_BIAS_LEVELS:
            return IMU_BIAS_LEVELS[spec]
        if not isinstance(spec, Mapping):
            raise ValueError(
                f"imu_bias must be one of {', '.join(IMU_BIAS_LEVELS)}, an ImuBias, a dict with "
                f"keys among {', '.join(names)} or None, got {spec!r}"
            )
        unknown = sorted(str(k) for k in spec if k not in names)
        if unknown:
            raise ValueError(f"unknown imu_bias keys {unknown}; valid: {', '.join(names)}")
        return cls(**spec)


IMU_BIAS_LEVELS: dict[str, ImuBias] = {
    # the EuRoC MAV datasets' ADIS16448 bias random walks [EUROC]; turn-on bias 0 (estimated at
    # start-up, as a flight stack does on the ground)
    "adis16448": ImuBias(gyro_walk=1.9393e-5, accel_walk=3.0e-3),
}
"""Named IMU bias levels."""


def walk_bias(bias: np.ndarray, step_std: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The biases one step later, ``b + step_std·n`` (``bias`` and standard normal ``noise`` of
    shape ``(..., BIAS_DIM)``)."""
    return bias + step_std * noise


def add_bias(obs: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Observations ``(OBS_DIM,)`` or ``(N, OBS_DIM)`` with the gyro bias added to the body rates
    and the accelerometer bias to the specific force (a new array)."""
    out = np.array(obs, dtype=float)
    if out.ndim == 1:  # one env: plain indexing (an Ellipsis doubles the cost)
        out[_BIASED] += bias
    else:
        out[:, _BIASED] += bias
    return out
