"""``ResidualQuad-v0``: a MuJoCo quadrotor tracking a reference under unmodelled disturbances."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from residual_quad.envs import checks
from residual_quad.envs.actions import ACTION_MODES, clip_action, make_action_mapping
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import integer, real
from residual_quad.envs.disturbances import (
    DragModel,
    GroundEffect,
    WindModel,
    resolve_payload,
)
from residual_quad.envs.events import Event, event_truth, fire_due, parse_events
from residual_quad.envs.imu_bias import ImuBias
from residual_quad.envs.latency import Latency, hover_action
from residual_quad.envs.observation import ObsLayout, check_preview, true_observation
from residual_quad.envs.plant import QuadrotorPlant
from residual_quad.envs.presets import plant_options
from residual_quad.envs.preview import make_preview
from residual_quad.envs.registration import time_limit_warning
from residual_quad.envs.rendering import make_renderer
from residual_quad.envs.reward import RewardWeights
from residual_quad.envs.sensors import SensorNoise, Sensors
from residual_quad.envs.task import Task, reason, step_info, task_step
from residual_quad.envs.termination import CrashConditions
from residual_quad.envs.trajectories import (
    Trajectory,
    check_reference,
    make_trajectory,
    reference_fields,
)
from residual_quad.envs.turbulence import DrydenTurbulence

MAX_EPISODE_S = 3600.0
"""Longest episode accepted, s (one hour: 360 000 steps at 100 Hz)."""

MAX_RENDER_SIZE = 8192
"""Largest rendered image side, pixels."""

_ONE = slice(None)  # the single env's row in its latency lines (a batch of one)
_FULL_EFFICIENCY = np.ones(4)  # the rotors' efficiencies without events (info; copied)

RESET_OPTIONS: tuple[str, ...] = ("position_offset", "yaw_offset", "velocity")
"""The keys ``reset(options=...)`` accepts."""


def _reset_options(options: Any) -> tuple[np.ndarray, float, np.ndarray | None]:
    """``(position_offset m, yaw_offset rad, velocity m/s or None)`` from ``reset``'s options;
    a wrong key, type, shape or a non-finite value is a ``ValueError`` naming the option."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ValueError(
            f"reset options must be a dict with keys among {', '.join(RESET_OPTIONS)}, "
            f"got {options!r}"
        )
    unknown = [k for k in options if k not in RESET_OPTIONS]
    if unknown:
        raise ValueError(
            f"unknown reset options {sorted(map(str, unknown))}; valid: {', '.join(RESET_OPTIONS)}"
        )
    position_offset = np.zeros(3)
    if options.get("position_offset") is not None:
        position_offset = checks.vector("position_offset", options["position_offset"], 3, "m")
    yaw_offset = 0.0
    if options.get("yaw_offset") is not None:
        yaw_offset = real("yaw_offset", options["yaw_offset"], unit="rad")
    velocity = None
    if options.get("velocity") is not None:
        velocity = checks.vector("velocity", options["velocity"], 3, "m/s")
    return position_offset, yaw_offset, velocity


class ResidualQuadEnv(gym.Env):
    r"""Quadrotor trajectory tracking with drag, gusty wind, a hidden payload and ground effect.

    ## Description

    An F450-class X quadrotor (0.95 kg nominal, four rotors of 0–6 N, yaw-torque coefficient
    0.015 m) simulated in MuJoCo at ``physics_hz`` and controlled at ``control_hz``. The plant holds
    effects that the nominal model ``m·a = T·R·e_z − m·g·e_z`` does not: a payload welded under the
    frame (added with ``MjSpec``, so mass and inertia stay consistent), body-frame anisotropic
    quadratic + linear drag on the air-relative velocity, mean + Ornstein–Uhlenbeck (or Dryden)
    gusts and the Cheeseman–Bennett ground effect. The drag and ground-effect wrench is
    recomputed and assigned every physics substep. The task is to track a reference trajectory.

    The class is the specification and the glue; each task piece lives in its own module of
    :mod:`residual_quad.envs`: the plant (``plant``), the action mapping (``actions``), the
    observation layout (``observation``), the reward (``reward``, :class:`RewardWeights`), the
    episode end (``termination``, :class:`CrashConditions`), the sensor noise (``sensors``,
    :class:`SensorNoise`) and the period residual of the nominal model (``dynamics``).

    ## Action space

    ``action_mode="rotor"`` (default): ``Box(-1, 1, (4,))``, rotor thrusts ``f_i = (a_i + 1)/2 ·
    6 N`` in the rotor order of :mod:`residual_quad.envs.airframe`.

    ``action_mode="ctbr"``: ``Box(-1, 1, (4,))``, collective thrust ``T = (a_0 + 1)/2 · 24 N`` and
    body-rate setpoints ``ω_des = a_{1:4} · max_body_rate`` (rad/s), tracked by an onboard rate loop
    ``τ = J·k_rate·(ω_des − ω) + ω × Jω`` (nominal inertia) and the saturating mixer, at the control
    rate. Meant for RL. Both mappings: :mod:`residual_quad.envs.actions`.

    Actions outside ``[-1, 1]`` are clipped; an action that is not four real numbers of shape
    ``(4,)`` (another shape, strings, complex, objects, bools) or holds NaN or inf raises
    ``ValueError``.

    ## Observation space

    ``Box(low, high, (36 + 6K,), float64)`` with generous finite limits (``ObsLayout.bounds``),
    named slices in :class:`ObsLayout` (``K = 0``, 36 entries, without a ``preview``):

    | slice | size | quantity | unit |
    |---|---|---|---|
    | ``pos`` | 3 | position, world (z up) | m |
    | ``vel`` | 3 | velocity, world | m/s |
    | ``rot`` | 9 | rotation matrix body → world, row-major | – |
    | ``omega_b`` | 3 | angular rate, body frame | rad/s |
    | ``ref_pos`` / ``ref_vel`` / ``ref_acc`` | 3 each | reference, world | m, m/s, m/s² |
    | ``ref_yaw`` / ``ref_yaw_rate`` | 1 each | reference heading (wrapped), rate | rad, rad/s |
    | ``thrusts`` | 4 | rotor thrusts applied over the last period | N |
    | ``imu`` | 3 | accelerometer specific force, body frame | m/s² |
    | ``preview_pos(K)`` / ``preview_vel(K)`` | 3K each | reference at ``t + dt … t + K·dt``, ``t``
    the time of ``ref_pos``; past the episode's end, the end's (:mod:`.preview`) | m, m/s |

    Nothing in the observation reveals the payload, the wind or the true residual; those are in
    ``info`` for analysis only. Single entries have names too (``ObsLayout.z``, ``ObsLayout.R22``,
    ...). With sensor noise (a :class:`SensorNoise`) the returned observation is the true one
    plus white Gaussian noise on position, velocity, body rates and accelerometer, drawn from its
    own stream seeded by each ``reset`` (so switching noise on leaves the wind unchanged); with
    ``imu_bias`` the body rates and accelerometer also carry a bias that starts random and walks
    (:mod:`~residual_quad.envs.imu_bias`), from a second stream (the white noise stays the same).

    ## Info

    ``t`` (s), ``position_error`` (‖e_p‖, m), ``residual_accel`` (the true period residual
    ``(v₁ − v₀)/Δt − (R₀·e_z·ΣT/m − g·e_z)``, world, m/s², from
    :func:`residual_quad.envs.dynamics.period_residual`; zero at reset), ``wind`` (m/s, world),
    ``drag_force`` (N, world), ``ground_gain``, ``rotor_thrusts`` (N, the rotors' thrusts at the
    period's end before the ground-effect gain: the lagged command with ``rotor_tau_s > 0``, else
    the command), ``payload_kg``, ``true_mass`` (kg), ``gyro_bias`` (rad/s) and ``accel_bias``
    (m/s²) (the IMU bias of this step's sensing, body frame — with ``obs_delay_steps`` the
    observation returned is an older one; zeros without ``imu_bias``), the events' truth
    ``mean_wind`` (m/s, world), ``rotor_efficiency`` (4) and ``events_fired`` (how many of the
    scenario's events have fired), ``reward_terms``, ``diverged`` and ``termination``.

    ## Rewards

    ``r = alive − w_pos·‖e_p‖ − w_vel·‖e_v‖ − w_rate·‖ω‖ − w_smooth·‖a_t − a_{t−1}‖²`` with
    ``e_p = p − p_ref`` (m), ``e_v = v − v_ref`` (m/s) and defaults ``alive = 1``,
    ``w_pos = 1``, ``w_vel = 0.1``, ``w_rate = 0.02``, ``w_smooth = 0.01`` (the fields of
    :class:`RewardWeights`). A crash ends the episode, forfeiting the remaining alive bonus. The
    terms are in ``info["reward_terms"]``; a non-finite state ends the episode with reward 0 and
    no terms.

    ## Starting state

    At rest at the reference's initial position and heading (so the helix starts at yaw 90°),
    with the gusts drawn from their stationary distribution. ``reset(options=...)`` accepts
    ``position_offset`` (3-vector, m), ``yaw_offset`` (rad) and ``velocity`` (3-vector, m/s) for
    off-nominal starts (:data:`RESET_OPTIONS`); another key, a wrong shape or type, or a NaN or
    inf entry is a ``ValueError`` naming the option. ``reset`` also checks the trajectory's
    reference at ``t = 0`` (:func:`~residual_quad.envs.trajectories.check_reference`): a wrong
    return type is a ``TypeError``, a non-finite value a ``ValueError``, both naming the
    trajectory.

    ## Episode end

    Terminated (``info["diverged"] = True``, reason in ``info["termination"]``) when MuJoCo
    raised a warning in a substep of the period (``simulation_unstable``: a NaN, inf or huge
    position, velocity or acceleration, after which MuJoCo silently puts the vehicle back at its
    default pose — e.g. a start at 10⁶ m/s), the state is not finite (``non_finite``), the tilt
    exceeds ``max_tilt`` (default 90°: upside down), the position error exceeds
    ``max_position_error``, or a frame geom touches the floor faster than ``crash_speed``; the
    reasons are checked in that order (``termination.TERMINATION_REASONS``). After
    ``simulation_unstable`` and ``non_finite`` the step's reward is 0 with no terms (the state is
    meaningless). The limits are a :class:`CrashConditions` (``env.crash_conditions``).
    Truncated after ``episode_s`` seconds (``max_steps`` control steps).

    Once an episode has ended (terminated or truncated), ``step`` raises
    ``gymnasium.error.ResetNeeded`` until the next ``reset`` (so does a ``step`` before the first
    ``reset``): stepping on would fly a crashed vehicle and lose the crash flag.

    ``gym.make`` wraps the environment in a ``TimeLimit`` of the registered
    ``max_episode_steps`` (2000: the default 20 s at 100 Hz), Gymnasium's limit on top of the
    env's own: an episode lasts ``min(episode_s · control_hz, max_episode_steps)`` steps. A
    longer ``episode_s`` needs ``max_episode_steps`` too (``gym.make(..., episode_s=30,
    max_episode_steps=3000)``); the ``reset`` after an episode cut at the registered default warns.

    ## Arguments

    | argument | default | meaning |
    |---|---|---|
    | ``payload`` | ``"none"`` | ``none/light/heavy/extra`` (0/0.25/0.5/0.75 kg) or a mass in
    [0, 1e9] kg |
    | ``wind`` | ``"calm"`` | ``calm/breezy/windy``, ``(mean, sigma)`` m/s or a ``WindModel`` |
    | ``trajectory`` | ``"hover"`` | ``hover/helix/figure8`` or a :class:`Trajectory` instance |
    | ``ground_effect`` | ``True`` | Cheeseman–Bennett thrust gain near the floor |
    | ``control_hz`` / ``physics_hz`` | 100 / 500 | rates, Hz (physics a multiple of control,
    at most 1e5 Hz) |
    | ``episode_s`` | 20.0 | episode length, s: one control period to :data:`MAX_EPISODE_S`
    (3600 s) |
    | ``action_mode`` | ``"rotor"`` | ``rotor`` or ``ctbr`` |
    | ``render_mode`` | ``None`` | ``None`` or ``"rgb_array"`` (headless too: EGL/OSMesa) |
    | ``drag`` | ``DragModel()`` | k_h = 0.055, k_v = 0.090 N/(m/s)², c_lin = 0.020 N/(m/s) |
    | ``wind_tau`` / ``wind_direction`` | 2.0 s / 0 rad | gust correlation time, mean-wind heading |
    | ``turbulence`` | ``None`` | Dryden gusts in place of the OU ones: ``light``, ``moderate``,
    ``severe`` or a :class:`~residual_quad.envs.turbulence.DrydenTurbulence` |
    | ``airframe`` | ``Airframe()`` | nominal vehicle parameters |
    | ``seed`` | ``None`` | integer ≥ 0, used by the first ``reset`` that passes none |
    | ``max_tilt`` | π/2 | crash tilt, rad, in (0, π] |
    | ``crash_speed`` | 1.0 | floor contact faster than this is a crash, m/s, ≥ 0 |
    | ``max_position_error`` | 5.0 | tracking error that ends the episode, m, > 0 |
    | ``max_body_rate`` | (4, 4, 2) | ``ctbr`` rate scale, rad/s |
    | ``k_rate`` | 20.0 | ``ctbr`` rate-loop gain, 1/s |
    | ``reward_weights`` | see Rewards | :class:`RewardWeights` or a dict of overrides (strict) |
    | ``pos_noise`` / ``vel_noise`` | 0 / 0 | white sensor noise std on the observation, m, m/s |
    | ``gyro_noise`` / ``imu_noise`` | 0 / 0 | ... on body rates and accelerometer, rad/s, m/s² |
    | ``sensor_noise`` | ``None`` | the four levels as one :class:`SensorNoise` instead (not both) |
    | ``imu_bias`` | ``None`` | gyro/accelerometer bias random walks: ``adis16448``, an
    :class:`~residual_quad.envs.imu_bias.ImuBias` or a dict of its fields (strict) |
    | ``width`` / ``height`` | 640 / 480 | rendered image size, pixels (1 to 8192) |
    | ``preset`` | ``None`` | ``ideal`` or ``realistic`` plant options (:mod:`~residual_quad.envs.
    presets`); the three below, when given, override it |
    | ``rotor_tau_s`` | 0 | first-order rotor lag, s, in [0, 10] (:mod:`~residual_quad.envs.
    actuators`) |
    | ``action_delay_steps`` / ``obs_delay_steps`` | 0 / 0 | command / sensor latency, control
    periods, integers in [0, 1000] (:mod:`~residual_quad.envs.latency`) |
    | ``events`` | ``None`` | payload, wind and rotor events in the episode
    (:mod:`residual_quad.envs.events`; dataclasses or dicts with a ``kind``) |
    | ``preview`` | ``None`` | ``(K, dt)``: K future reference points dt s apart [DATT] (K an
    integer in [0, 1000], dt > 0 finite, s; ``None`` or K = 0: no preview) |

    Every argument is checked at construction: a wrong type, a NaN or inf, or a value out of its
    range is a ``ValueError`` that names the argument, shows the value and states the valid range
    (or lists the valid choices); rates, lengths, limits, gains, noise levels and drag, wind and
    reward parameters must be finite.

    ## Version history

    * v0: initial release; arguments, reset options and actions checked strictly, MuJoCo
      instability flagged as ``simulation_unstable``, ``step`` after the episode's end refused.
      Second stage: ``gym.make_vec`` builds :class:`~residual_quad.envs.vector_env.
      ResidualQuadVectorEnv`; ``max_episode_steps`` is a plain Gymnasium limit (it no longer
      follows a custom ``episode_s``; ``reset`` warns when the default cuts an episode).
      Third stage: off-by-default plant options ``rotor_tau_s``, ``action_delay_steps``,
      ``obs_delay_steps`` and the ``preset`` that sets them; ``turbulence`` (Dryden gusts) and
      ``imu_bias``; ``info`` gains ``rotor_thrusts``, ``gyro_bias`` and ``accel_bias``.
      Fourth stage: the off-by-default reference ``preview`` (``PreviewSpec``, ``preview_pos``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        payload: str | float = "none",
        wind: str | tuple[float, float] | WindModel = "calm",
        trajectory: str | Trajectory = "hover",
        ground_effect: bool = True,
        control_hz: float = 100.0,
        physics_hz: float = 500.0,
        episode_s: float = 20.0,
        action_mode: str = "rotor",
        render_mode: str | None = None,
        drag: DragModel | None = None,
        wind_tau: float | None = None,
        wind_direction: float | None = None,
        airframe: Airframe | None = None,
        seed: int | None = None,
        max_tilt: float = math.pi / 2,  # rad
        crash_speed: float = 1.0,  # m/s
        max_position_error: float = 5.0,  # m
        max_body_rate: tuple[float, float, float] = (4.0, 4.0, 2.0),  # rad/s
        k_rate: float = 20.0,  # 1/s
        reward_weights: RewardWeights | dict[str, float] | None = None,
        pos_noise: float = 0.0,  # m, std of white noise on the observed position
        vel_noise: float = 0.0,  # m/s, ... velocity
        gyro_noise: float = 0.0,  # rad/s, ... body rates
        imu_noise: float = 0.0,  # m/s², ... accelerometer
        width: int = 640,
        height: int = 480,
        sensor_noise: SensorNoise | None = None,
        turbulence: str | DrydenTurbulence | None = None,  # Dryden gusts instead of OU ones
        imu_bias: str | ImuBias | dict[str, float] | None = None,  # IMU bias random walks
        preset: str | None = None,  # named plant options; explicit ones below override it
        rotor_tau_s: float | None = None,  # s, first-order rotor lag (None: the preset's, or 0)
        action_delay_steps: int | None = None,  # control periods of command latency (None: ...)
        obs_delay_steps: int | None = None,  # control periods of sensor latency (None: ...)
        events: tuple[Event | dict[str, Any], ...] | None = None,  # see envs/events.py
        preview: tuple[int, float] | None = None,  # (K points, dt s): future reference window
    ):
        if not isinstance(action_mode, str) or action_mode not in ACTION_MODES:
            raise ValueError(
                f"unknown action_mode {action_mode!r}; valid choices: {', '.join(ACTION_MODES)}"
            )
        if render_mode is not None and (
            not isinstance(render_mode, str) or render_mode not in self.metadata["render_modes"]
        ):
            raise ValueError(
                f"unknown render_mode {render_mode!r}; valid choices: None, "
                f"{', '.join(self.metadata['render_modes'])}"
            )
        if not isinstance(ground_effect, bool | np.bool_):
            raise ValueError(f"ground_effect must be True or False, got {ground_effect!r}")
        seed = checks.seed_value(seed)
        checks.instance("drag", drag, DragModel | None, "a DragModel or None")
        checks.instance("airframe", airframe, Airframe | None, "an Airframe or None")
        checks.instance("sensor_noise", sensor_noise, SensorNoise | None, "a SensorNoise or None")
        if wind_tau is not None:
            real("wind_tau", wind_tau, low=0.0, low_open=True, unit="s")
        if wind_direction is not None:
            real("wind_direction", wind_direction, unit="rad")
        max_body_rate = checks.vector("max_body_rate", max_body_rate, 3, "rad/s")
        if not np.all(max_body_rate > 0):
            raise ValueError(f"max_body_rate must be positive, got {max_body_rate.tolist()}")
        k_rate = real("k_rate", k_rate, low=0.0, low_open=True, unit="1/s")
        width = integer("width", width, low=1, high=MAX_RENDER_SIZE)
        height = integer("height", height, low=1, high=MAX_RENDER_SIZE)
        control_hz = real("control_hz", control_hz, low=0.0, low_open=True, unit="Hz")
        episode_s = real(
            "episode_s", episode_s, low=0.0, high=MAX_EPISODE_S, low_open=True, unit="s"
        )
        if episode_s < 1.0 / control_hz:
            raise ValueError(
                f"episode_s ({episode_s:g} s) is shorter than one control period "
                f"(1/control_hz = {1.0 / control_hz:g} s)"
            )
        self.plant_options = plant_options(
            preset,
            rotor_tau_s=rotor_tau_s,
            action_delay_steps=action_delay_steps,
            obs_delay_steps=obs_delay_steps,
        )
        self.preview_spec = check_preview(preview)  # a PreviewSpec, None: no preview
        self.payload_kg = resolve_payload(payload)
        self.wind_model = WindModel.from_spec(
            wind, tau=wind_tau, direction=wind_direction, turbulence=turbulence
        )
        self.trajectory = make_trajectory(trajectory)
        self.airframe = airframe or Airframe()
        self.plant = QuadrotorPlant(
            airframe=self.airframe,
            payload_kg=self.payload_kg,
            drag=drag,
            wind=self.wind_model,
            ground_effect=GroundEffect(self.airframe.rotor_radius) if ground_effect else None,
            physics_hz=physics_hz,
            control_hz=control_hz,
            rotor_tau_s=self.plant_options.rotor_tau_s,
            events=parse_events(events, episode_s),
        )
        self.events = self.plant.events  # this episode's events and their state, or None
        self._mean_wind = self.wind_model.mean_vector  # m/s, world (info without events)
        self.control_dt = self.plant.control_dt  # s
        self.max_steps = max(1, int(round(episode_s / self.control_dt)))
        self.preview = make_preview(self.preview_spec, self.control_dt, self.max_steps)  # or None
        self.action_mode = action_mode
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": int(round(control_hz))}
        self._seed = seed
        self.crash_conditions = CrashConditions(max_tilt, crash_speed, max_position_error)
        self.action_mapping = make_action_mapping(action_mode, self.airframe, max_body_rate, k_rate)
        opts = self.plant_options
        self.latency = Latency(
            1,
            opts.action_delay_steps,
            opts.obs_delay_steps,
            hover_action(self.action_mapping, self.airframe.hover_thrust),
        )
        self.reward_weights = RewardWeights.from_spec(reward_weights)
        individual_noise = (pos_noise, vel_noise, gyro_noise, imu_noise)
        if sensor_noise is None:
            sensor_noise = SensorNoise(*individual_noise)
        elif any(std != 0.0 for std in individual_noise):
            raise ValueError(
                "give sensor noise either as sensor_noise=SensorNoise(...) or as "
                "pos_noise/vel_noise/gyro_noise/imu_noise, not both"
            )
        if imu_bias is None:  # the preset's level, if any
            imu_bias = self.plant_options.imu_bias
        self.sensors = Sensors(sensor_noise, ImuBias.from_spec(imu_bias), self.control_dt)
        self.task = Task(
            self.crash_conditions,
            self.reward_weights,
            self.control_dt,
            self.airframe.mass,
            self.airframe.gravity,
            self.max_steps,
        )  # what the task step (shared with the vector env) needs
        self._width, self._height = width, height
        self._renderer: mujoco.Renderer | None = None

        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        low, high = ObsLayout.bounds(self.preview_spec)
        self.obs_dim = len(low)  # OBS_DIM + 6K
        self.observation_space = spaces.Box(low, high, shape=(self.obs_dim,), dtype=np.float64)
        self._prev_action = [0.0, 0.0, 0.0, 0.0]  # clipped action of the last step
        self._steps = 0
        self._last_true_obs: list[float] = []  # true observation at the start of the period
        self._needs_reset = True  # before the first reset and after an episode's end
        self._limit_warned = False  # a TimeLimit cutting episode_s short was warned about

    # ------------------------------------------------------------------ API
    @property
    def nominal(self) -> Airframe:
        """What a controller may know: the nominal airframe (no payload, no disturbances)."""
        return self.airframe

    @property
    def steps(self) -> int:
        """Control steps taken in the current episode."""
        return self._steps

    @property
    def last_true_observation(self) -> np.ndarray:
        """The true (noise-free) observation of the last ``reset`` or ``step`` (a new array;
        the :data:`OBS_DIM` base entries, without a preview's)."""
        return np.array(self._last_true_obs, dtype=float)

    def set_state(self, physics_state: np.ndarray, steps: int) -> None:
        """Put the plant at MuJoCo full-physics state ``physics_state``
        (``mjSTATE_FULLPHYSICS``, see ``mj_getState``), ``steps`` control steps into the
        episode: to render a state kept elsewhere (the vector env keeps its envs' states)."""
        plant = self.plant
        mujoco.mj_setState(
            plant.model, plant.data, physics_state, mujoco.mjtState.mjSTATE_FULLPHYSICS
        )
        mujoco.mj_forward(plant.model, plant.data)
        self._steps = int(steps)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = checks.seed_value(seed)
        position_offset, yaw_offset, velocity = _reset_options(options)
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        if not self._limit_warned and not self._needs_reset:
            # an episode reset at exactly the registered limit was, almost surely, cut by
            # gym.make's TimeLimit (the env itself cannot see the wrappers around it)
            message = time_limit_warning(
                self.max_steps, self._steps, self.max_steps * self.control_dt
            )
            if message is not None:
                self._limit_warned = True
                gym.logger.warn(message)
        super().reset(seed=seed)
        ref = check_reference(self.trajectory, self.trajectory(0.0), 0.0)
        self.sensors.reseed(self.np_random)  # before the plant draws the wind
        self.plant.reset(self.np_random, ref.pos + position_offset, ref.yaw + yaw_offset, velocity)
        self._steps = 0
        self._prev_action = [0.0, 0.0, 0.0, 0.0]
        true_obs = self._observe(0.0)
        true_obs_array = np.array(true_obs)
        self._last_true_obs = true_obs
        self._needs_reset = False
        pos_error = float(np.linalg.norm(true_obs_array[ObsLayout.pos] - ref.pos))
        obs = self.sensors.sense(true_obs_array)  # before the info: it reports the bias in obs
        info = self._info(pos_error, np.zeros(3), {}, None)
        if self.latency.delays:
            self.latency.reset(_ONE, obs[None])
        if self.preview is not None:
            obs = np.concatenate((obs, self.preview.single(self.trajectory, 0)))
        return obs, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise ResetNeeded(
                "the episode has ended (terminated or truncated) or never started: "
                "call reset() first"
            )
        action = clip_action(action)
        plant = self.plant
        flown = action  # with command latency, the action of action_delay_steps steps ago
        if self.latency.action_delay_steps:
            flown = self.latency.action(_ONE, np.array([action]))[0].tolist()
        # physics: one control period of the plant, after the events due at its start
        if plant.events is not None:
            fire_due((plant,), (self._steps,))
        plant.step(self.action_mapping.rotor_thrusts(flown, plant.data))
        self._steps += 1
        t = self._steps * self.control_dt
        try:
            true_obs = self._observe(t)
            true_obs_array = np.array(true_obs, dtype=float)
            ahead = self.preview and self.preview.single(self.trajectory, self._steps)
        except (AttributeError, TypeError, ValueError):
            self._needs_reset = True
            check_reference(self.trajectory, self.trajectory(t), t)  # raises the clear error
            raise
        prev_true_obs, self._last_true_obs = self._last_true_obs, true_obs
        # task: the functions the vector env calls on its batch
        out = task_step(
            self.task,
            prev_true_obs,
            true_obs,
            action,
            self._prev_action,
            self._steps,
            plant.data.time,
            plant.unstable(),
            plant.floor_contact_speed() if plant.data.ncon else 0.0,
        )
        if out.terminated or out.truncated:
            self._needs_reset = True
        self._prev_action = action
        obs = self.sensors.sense(true_obs_array)  # before the info: it reports the bias in obs
        info = self._info(out.pos_error, out.residual, out.terms, reason(out.code))
        if self.latency.obs_delay_steps:
            obs = self.latency.observation(_ONE, obs[None])[0]
        if ahead is not None:
            obs = np.concatenate((obs, ahead))
        return obs, out.reward, out.terminated, out.truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            self._renderer = make_renderer(self.plant.model, self._height, self._width)
        renderer = self._renderer
        renderer.update_scene(self.plant.data, camera="chase")
        ref = self.trajectory(self._steps * self.control_dt)
        scene = renderer.scene
        if scene.ngeom < scene.maxgeom:  # a green marker at the reference position
            mujoco.mjv_initGeom(
                scene.geoms[scene.ngeom],
                mujoco.mjtGeom.mjGEOM_SPHERE,
                np.array([0.04, 0.0, 0.0]),
                ref.pos,
                np.eye(3).ravel(),
                np.array([0.1, 0.9, 0.2, 0.8], dtype=np.float32),
            )
            scene.ngeom += 1
        return renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ internals
    def _observe(self, t: float) -> list[float]:
        """The true observation at time ``t`` as a list (the attitude from the current
        quaternion)."""
        plant = self.plant
        data = plant.data
        return true_observation(
            data.qpos[0:7].tolist(),
            data.qvel[0:6].tolist(),
            reference_fields(self.trajectory, t),
            plant.command.tolist(),
            plant.imu_specific_force(),
        )

    def _info(
        self,
        pos_error: float,
        residual: np.ndarray,
        terms: dict[str, float],
        termination: str | None,
    ) -> dict[str, Any]:
        plant = self.plant
        if plant.events is None:
            mean_wind, efficiency, fired = self._mean_wind, _FULL_EFFICIENCY, 0
        else:
            truth = event_truth((plant.events,))
            mean_wind, efficiency = truth["mean_wind"][0], truth["rotor_efficiency"][0]
            fired = int(truth["events_fired"][0])
        return step_info(
            self._steps * self.control_dt,
            pos_error,
            residual,
            plant.wind,
            plant.drag_force,
            plant.ground_gain,
            plant.thrusts,
            plant.payload_kg,
            plant.true_mass,
            mean_wind,
            efficiency,
            fired,
            terms,
            termination,
            self.sensors.bias,
        )
