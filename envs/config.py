"""The settings of ``ResidualQuad-v0``: one typed, checked :class:`EnvConfig`.

Every keyword argument of :class:`~residual_quad.envs.residual_quad_env.ResidualQuadEnv` (and of
the vector env, which builds its single envs from the same keywords) is a field of
:class:`EnvConfig`, with the same name and default. Building the config is the one place a
setting is checked: the env builds one from its arguments (``env.config``) and reads every
setting from it, and a caller that only needs to know whether some settings build an env (a
training config at load) builds the config — no MuJoCo model, no plant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from residual_quad.envs import checks
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import integer, real
from residual_quad.envs.disturbances import DragModel, WindModel, check_wind_tau, resolve_payload
from residual_quad.envs.events import Event, parse_events
from residual_quad.envs.imu_bias import ImuBias
from residual_quad.envs.observation import PreviewSpec, check_preview
from residual_quad.envs.plant import check_rates
from residual_quad.envs.presets import PlantOptions, plant_options
from residual_quad.envs.preview import check_preview_horizon
from residual_quad.envs.reward import RewardWeights
from residual_quad.envs.sensors import SensorNoise
from residual_quad.envs.termination import CrashConditions
from residual_quad.envs.trajectories import Trajectory, make_trajectory
from residual_quad.envs.turbulence import DrydenTurbulence

MAX_EPISODE_S = 3600.0
"""Longest episode accepted, s (one hour: 360 000 steps at 100 Hz)."""

MAX_RENDER_SIZE = 8192
"""Largest rendered image side, pixels."""

RENDER_MODES: tuple[str, ...] = ("rgb_array",)
"""The render modes besides ``None`` (the env's ``metadata["render_modes"]``)."""


@dataclass(frozen=True)
class EnvConfig:
    """The settings of one ``ResidualQuad-v0`` env, checked when built.

    The fields are the env's keyword arguments, in their order, with their defaults; the comment
    of each gives its unit and what it accepts. A bad value is a ``ValueError`` that names the
    argument, shows the value and states the valid range or lists the valid choices (a wrong
    type too); rates, lengths, limits, gains, noise levels and drag, wind and reward parameters
    must be finite. The settings are checked in field order, except that the ones that depend
    on others (``episode_s`` against the control period, ``events`` against ``episode_s``,
    ``physics_hz`` against ``control_hz``, the preview window) come after the single values.

    A few fields are kept normalized: ``seed`` an ``int`` or ``None``, ``control_hz``,
    ``episode_s`` and ``k_rate`` floats, ``width``/``height`` ints, ``max_body_rate`` a tuple
    of three floats. The fields after ``preview`` are not arguments: they are what the settings
    resolve to (a level name to its numbers, a dict to its dataclass, defaults filled in), built
    while checking and used by the env.
    """

    payload: str | float = "none"  # none/light/heavy/extra (PAYLOAD_LEVELS) or kg in [0, 1e9]
    wind: str | tuple[float, float] | WindModel = "calm"  # calm/breezy/windy, (mean, σ) m/s
    trajectory: str | Trajectory = "hover"  # hover/helix/figure8 or a Trajectory instance
    ground_effect: bool = True  # Cheeseman–Bennett thrust gain near the floor
    control_hz: float = 100.0  # Hz, > 0, divides physics_hz
    physics_hz: float = 500.0  # Hz, a whole multiple of control_hz, at most 1e5
    episode_s: float = 20.0  # s, one control period to MAX_EPISODE_S
    action_mode: str = "rotor"  # rotor or ctbr (ACTION_MODES)
    render_mode: str | None = None  # None or rgb_array (RENDER_MODES)
    drag: DragModel | None = None  # None: DragModel()
    wind_tau: float | None = None  # s, gust correlation time in (0, MAX_WIND_TAU_S]; None: wind's
    wind_direction: float | None = None  # rad, heading the mean wind blows towards; None: wind's
    airframe: Airframe | None = None  # nominal vehicle; None: Airframe()
    seed: int | None = None  # >= 0, used by the first reset that passes none
    max_tilt: float = math.pi / 2  # rad, in (0, π]: crash tilt
    crash_speed: float = 1.0  # m/s, >= 0: floor contact faster than this is a crash
    max_position_error: float = 5.0  # m, > 0: tracking error that ends the episode
    max_body_rate: tuple[float, float, float] = (4.0, 4.0, 2.0)  # rad/s, > 0: ctbr rate scale
    k_rate: float = 20.0  # 1/s, > 0: ctbr rate-loop gain
    reward_weights: RewardWeights | dict[str, float] | None = None  # dict: overrides (strict)
    pos_noise: float = 0.0  # m, std of white noise on the observed position, in [0, 1e3]
    vel_noise: float = 0.0  # m/s, ... velocity
    gyro_noise: float = 0.0  # rad/s, ... body rates
    imu_noise: float = 0.0  # m/s², ... accelerometer
    width: int = 640  # pixels, rendered image width in [1, MAX_RENDER_SIZE]
    height: int = 480  # pixels, rendered image height in [1, MAX_RENDER_SIZE]
    sensor_noise: SensorNoise | None = None  # the four noise levels at once (not both)
    turbulence: str | DrydenTurbulence | None = None  # Dryden gusts instead of OU: light/...
    imu_bias: str | ImuBias | dict[str, float] | None = None  # bias random walks; None: preset's
    preset: str | None = None  # ideal/realistic plant options; the explicit ones below override
    rotor_tau_s: float | None = None  # s, first-order rotor lag in [0, 10]; None: preset's or 0
    action_delay_steps: int | None = None  # control periods in [0, 1000]; None: preset's or 0
    obs_delay_steps: int | None = None  # control periods in [0, 1000]; None: preset's or 0
    events: tuple[Event | dict[str, Any], ...] | None = None  # envs/events.py, t_s < episode_s
    preview: tuple[int, float] | PreviewSpec | None = None  # (K points in [0, 1000], dt s > 0)

    # ---- what the settings resolve to (not arguments)
    plant_options: PlantOptions = field(init=False, repr=False, compare=False)
    preview_spec: PreviewSpec | None = field(init=False, repr=False, compare=False)
    payload_kg: float = field(init=False, repr=False, compare=False)  # kg
    wind_model: WindModel = field(init=False, repr=False, compare=False)
    reference: Trajectory = field(init=False, repr=False, compare=False)  # the trajectory object
    vehicle: Airframe = field(init=False, repr=False, compare=False)  # the nominal airframe
    scheduled_events: tuple[Event, ...] = field(init=False, repr=False, compare=False)  # by time
    crash_conditions: CrashConditions = field(init=False, repr=False, compare=False)
    rewards: RewardWeights = field(init=False, repr=False, compare=False)
    noise: SensorNoise = field(init=False, repr=False, compare=False)
    bias: ImuBias = field(init=False, repr=False, compare=False)  # ImuBias(): no bias

    def __post_init__(self) -> None:
        if not isinstance(self.action_mode, str) or self.action_mode not in ACTION_MODES:
            raise ValueError(
                f"unknown action_mode {self.action_mode!r}; valid choices: "
                f"{', '.join(ACTION_MODES)}"
            )
        if self.render_mode is not None and (
            not isinstance(self.render_mode, str) or self.render_mode not in RENDER_MODES
        ):
            raise ValueError(
                f"unknown render_mode {self.render_mode!r}; valid choices: None, "
                f"{', '.join(RENDER_MODES)}"
            )
        if not isinstance(self.ground_effect, bool | np.bool_):
            raise ValueError(f"ground_effect must be True or False, got {self.ground_effect!r}")
        self._set("seed", checks.seed_value(self.seed))
        checks.instance("drag", self.drag, DragModel | None, "a DragModel or None")
        checks.instance("airframe", self.airframe, Airframe | None, "an Airframe or None")
        checks.instance(
            "sensor_noise", self.sensor_noise, SensorNoise | None, "a SensorNoise or None"
        )
        if self.wind_tau is not None:
            check_wind_tau(self.wind_tau)
        if self.wind_direction is not None:
            real("wind_direction", self.wind_direction, unit="rad")
        max_body_rate = checks.vector("max_body_rate", self.max_body_rate, 3, "rad/s")
        if not np.all(max_body_rate > 0):
            raise ValueError(f"max_body_rate must be positive, got {max_body_rate.tolist()}")
        self._set("max_body_rate", tuple(max_body_rate.tolist()))
        self._set("k_rate", real("k_rate", self.k_rate, low=0.0, low_open=True, unit="1/s"))
        self._set("width", integer("width", self.width, low=1, high=MAX_RENDER_SIZE))
        self._set("height", integer("height", self.height, low=1, high=MAX_RENDER_SIZE))
        control_hz = real("control_hz", self.control_hz, low=0.0, low_open=True, unit="Hz")
        self._set("control_hz", control_hz)
        episode_s = real(
            "episode_s", self.episode_s, low=0.0, high=MAX_EPISODE_S, low_open=True, unit="s"
        )
        if episode_s < 1.0 / control_hz:
            raise ValueError(
                f"episode_s ({episode_s:g} s) is shorter than one control period "
                f"(1/control_hz = {1.0 / control_hz:g} s)"
            )
        self._set("episode_s", episode_s)
        options = plant_options(
            self.preset,
            rotor_tau_s=self.rotor_tau_s,
            action_delay_steps=self.action_delay_steps,
            obs_delay_steps=self.obs_delay_steps,
        )
        self._set("plant_options", options)
        preview_spec = check_preview(self.preview)
        self._set("preview_spec", preview_spec)
        self._set("payload_kg", resolve_payload(self.payload))
        wind_model = WindModel.from_spec(
            self.wind, tau=self.wind_tau, direction=self.wind_direction, turbulence=self.turbulence
        )
        self._set("wind_model", wind_model)
        self._set("reference", make_trajectory(self.trajectory))
        self._set("vehicle", self.airframe or Airframe())
        self._set("scheduled_events", parse_events(self.events, episode_s))
        check_rates(self.physics_hz, control_hz)
        if preview_spec is not None:
            check_preview_horizon(preview_spec)
        self._set(
            "crash_conditions",
            CrashConditions(self.max_tilt, self.crash_speed, self.max_position_error),
        )
        self._set("rewards", RewardWeights.from_spec(self.reward_weights))
        individual = (self.pos_noise, self.vel_noise, self.gyro_noise, self.imu_noise)
        if self.sensor_noise is None:
            noise = SensorNoise(*individual)
        elif any(std != 0.0 for std in individual):
            raise ValueError(
                "give sensor noise either as sensor_noise=SensorNoise(...) or as "
                "pos_noise/vel_noise/gyro_noise/imu_noise, not both"
            )
        else:
            noise = self.sensor_noise
        self._set("noise", noise)
        imu_bias = options.imu_bias if self.imu_bias is None else self.imu_bias
        self._set("bias", ImuBias.from_spec(imu_bias))

    def _set(self, name: str, value: Any) -> None:
        """Set a field of the frozen instance while it is built (a checked or resolved value)."""
        object.__setattr__(self, name, value)

    def kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments: ``ResidualQuadEnv(**config.kwargs())`` builds an
        env of this config."""
        return {name: getattr(self, name) for name in SETTINGS}


SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(EnvConfig) if f.init)
"""The names of the env's keyword arguments (the fields of :class:`EnvConfig` that are
arguments), in order."""
