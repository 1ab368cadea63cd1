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
from residual_quad.envs.actions import clip_action, make_action_mapping
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import real
from residual_quad.envs.config import (
    MAX_EPISODE_S,
    MAX_RENDER_SIZE,
    RENDER_MODES,
    SETTINGS,
    EnvConfig,
)
from residual_quad.envs.disturbances import DragModel, GroundEffect, WindModel
from residual_quad.envs.events import Event, event_truth, fire_due
from residual_quad.envs.imu_bias import ImuBias
from residual_quad.envs.latency import Latency, hover_action
from residual_quad.envs.observation import ObsLayout, true_observation
from residual_quad.envs.plant import QuadrotorPlant
from residual_quad.envs.preview import make_preview
from residual_quad.envs.registration import time_limit_warning
from residual_quad.envs.rendering import make_renderer
from residual_quad.envs.resets import begin_resets, finish_resets
from residual_quad.envs.reward import RewardWeights
from residual_quad.envs.sensors import SensorNoise, Sensors
from residual_quad.envs.task import TaskParams, reason, step_info, task_step
from residual_quad.envs.trajectories import (
    Reference,
    Trajectory,
    check_reference,
    reference_fields,
)
from residual_quad.envs.turbulence import DrydenTurbulence

__all__ = [
    "MAX_EPISODE_S",
    "MAX_RENDER_SIZE",
    "RESET_OPTIONS",
    "EnvConfig",
    "ResidualQuadEnv",
]

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
    :mod:`residual_quad.envs`: the settings (``config``, :class:`EnvConfig`), the plant
    (``plant``), the action mapping (``actions``), the observation layout (``observation``), the
    reward (``reward``, :class:`RewardWeights`), the episode end (``termination``,
    :class:`CrashConditions`), the sensor noise (``sensors``, :class:`SensorNoise`) and the
    period residual of the nominal model (``dynamics``).

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

    The keyword arguments are the fields of :class:`~residual_quad.envs.config.EnvConfig`, with
    the same names and defaults; each field there gives its type, unit and valid range. The env
    builds one from its arguments (``env.config``) and reads every setting from it.

    | argument | meaning |
    |---|---|
    | ``payload`` | payload welded under the frame: ``none/light/heavy/extra`` (0/0.25/0.5/0.75 kg)
    or a mass |
    | ``wind`` / ``wind_tau`` / ``wind_direction`` | mean wind and OU gusts: ``calm/breezy/windy``,
    ``(mean, sigma)`` or a ``WindModel``; the gusts' correlation time; the mean wind's heading |
    | ``turbulence`` | Dryden gusts in place of the OU ones: ``light``, ``moderate``, ``severe`` or
    a :class:`~residual_quad.envs.turbulence.DrydenTurbulence` |
    | ``trajectory`` | the reference: ``hover/helix/figure8`` or a :class:`Trajectory` instance |
    | ``ground_effect`` / ``drag`` / ``airframe`` | the Cheeseman–Bennett gain on or off; the drag
    coefficients (:class:`DragModel`); the nominal vehicle (:class:`Airframe`) |
    | ``control_hz`` / ``physics_hz`` / ``episode_s`` | the rates (physics a whole multiple of
    control) and the episode's length, up to :data:`MAX_EPISODE_S` |
    | ``action_mode`` / ``max_body_rate`` / ``k_rate`` | ``rotor`` or ``ctbr`` (see Action space);
    ``ctbr``'s rate scale and rate-loop gain |
    | ``render_mode`` / ``width`` / ``height`` | ``None`` or ``"rgb_array"`` (headless too:
    EGL/OSMesa) and the image's size |
    | ``seed`` | used by the first ``reset`` that passes none |
    | ``max_tilt`` / ``crash_speed`` / ``max_position_error`` | the crash limits (see Episode end) |
    | ``reward_weights`` | :class:`RewardWeights` or a dict of overrides (see Rewards) |
    | ``pos_noise`` / ``vel_noise`` / ``gyro_noise`` / ``imu_noise`` or ``sensor_noise`` | white
    sensor noise on the observation, per quantity or as one :class:`SensorNoise` (not both) |
    | ``imu_bias`` | gyro/accelerometer bias random walks: ``adis16448``, an
    :class:`~residual_quad.envs.imu_bias.ImuBias` or a dict of its fields |
    | ``preset`` / ``rotor_tau_s`` / ``action_delay_steps`` / ``obs_delay_steps`` | plant options:
    a named set (:mod:`~residual_quad.envs.presets`) and the rotor lag and latencies that, when
    given, override it |
    | ``events`` | payload, wind and rotor events in the episode (:mod:`residual_quad.envs.events`;
    dataclasses or dicts with a ``kind``) |
    | ``preview`` | ``(K, dt)``: K future reference points dt s apart in the observation [DATT] |

    Every argument is checked at construction (when the config is built): a wrong type, a NaN or
    inf, or a value out of its range is a ``ValueError`` that names the argument, shows the value
    and states the valid range (or lists the valid choices); rates, lengths, limits, gains, noise
    levels and drag, wind and reward parameters must be finite.

    ## Version history

    * v0: initial release ("Plant, ResidualQuad-v0, trajectories, ..."). The id has not changed
      since; what changed in it, in order (**default** marks a change to what an env built with
      the default arguments returns):

      - **default**: every ``reset`` draws one number from the env's generator (the seed of the
        sensors' own stream) before the gusts, so a seed flies other gusts in ``breezy`` and
        ``windy`` wind than in the first release ("Env: optional white sensor noise ...").
      - **default**: the observation space's bounds are finite (``ObsLayout.bounds``, were ±inf),
        ``ref_yaw`` is wrapped to [−π, π] (it grew with the helix's heading) and the ``chase``
        camera looks from higher ("Foundation tests: ...; finite observation bounds").
      - **default**: ``rot`` is the current quaternion's rotation; it was MuJoCo's ``xmat``, one
        physics substep behind ("Env observation from the current quaternion ...").
      - **default**: a MuJoCo instability warning in a substep ends the episode as
        ``simulation_unstable`` (it was ``non_finite``, found by the clock MuJoCo resets); every
        argument, reset option and reference is checked, an action of another shape than
        ``(4,)`` is refused (it was flattened), ``step`` after the end raises ``ResetNeeded``,
        and ``gym.make`` adds a ``TimeLimit`` of 2000 steps, the default episode ("env: validate
        every constructor argument and reset option ...").
      - ``gym.make_vec`` builds :class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv`;
        ``max_episode_steps`` is a plain Gymnasium limit (it no longer follows a custom
        ``episode_s``; ``reset`` warns when the default cuts an episode).
      - Off by default: the plant options ``rotor_tau_s``, ``action_delay_steps``,
        ``obs_delay_steps`` and the ``preset`` that sets them; ``turbulence`` (Dryden gusts);
        ``imu_bias``; ``events``. ``info`` gains ``rotor_thrusts``, ``gyro_bias``,
        ``accel_bias``, ``mean_wind``, ``rotor_efficiency`` and ``events_fired``.
      - Off by default: the reference ``preview`` (``PreviewSpec``, ``preview_pos``).
      - The settings are one :class:`~residual_quad.envs.config.EnvConfig` (the same arguments,
        defaults and errors; the same episodes bit for bit); ``wind_tau`` above
        :data:`~residual_quad.envs.disturbances.MAX_WIND_TAU_S` (1e9 s) is refused (near the
        largest float it passed and overflowed at ``reset``).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 50}

    def __init__(  # the settings' types, units and ranges: EnvConfig's fields
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
        max_tilt: float = math.pi / 2,
        crash_speed: float = 1.0,
        max_position_error: float = 5.0,
        max_body_rate: tuple[float, float, float] = (4.0, 4.0, 2.0),
        k_rate: float = 20.0,
        reward_weights: RewardWeights | dict[str, float] | None = None,
        pos_noise: float = 0.0,
        vel_noise: float = 0.0,
        gyro_noise: float = 0.0,
        imu_noise: float = 0.0,
        width: int = 640,
        height: int = 480,
        sensor_noise: SensorNoise | None = None,
        turbulence: str | DrydenTurbulence | None = None,
        imu_bias: str | ImuBias | dict[str, float] | None = None,
        preset: str | None = None,
        rotor_tau_s: float | None = None,
        action_delay_steps: int | None = None,
        obs_delay_steps: int | None = None,
        events: tuple[Event | dict[str, Any], ...] | None = None,
        preview: tuple[int, float] | None = None,
    ):
        arguments = locals()  # the first statement: exactly the arguments (and self)
        config = EnvConfig(**{name: arguments[name] for name in SETTINGS})  # checks them all
        self.config = config
        self.plant_options = config.plant_options
        self.preview_spec = config.preview_spec  # a PreviewSpec, None: no preview
        self.payload_kg = config.payload_kg
        self.wind_model = config.wind_model
        self.trajectory = config.reference
        self.airframe = config.vehicle
        self.plant = QuadrotorPlant(
            airframe=self.airframe,
            payload_kg=self.payload_kg,
            drag=config.drag,
            wind=self.wind_model,
            ground_effect=GroundEffect(self.airframe.rotor_radius)
            if config.ground_effect
            else None,
            physics_hz=config.physics_hz,
            control_hz=config.control_hz,
            rotor_tau_s=self.plant_options.rotor_tau_s,
            events=config.scheduled_events,
        )
        self.events = self.plant.events  # this episode's events and their state, or None
        self._mean_wind = self.wind_model.mean_vector  # m/s, world (info without events)
        self.control_dt = self.plant.control_dt  # s
        self.max_steps = max(1, int(round(config.episode_s / self.control_dt)))
        self.preview = make_preview(self.preview_spec, self.control_dt, self.max_steps)  # or None
        self.action_mode = config.action_mode
        self.render_mode = config.render_mode
        self.metadata = {**self.metadata, "render_fps": int(round(config.control_hz))}
        self._seed = config.seed
        self.crash_conditions = config.crash_conditions
        self.action_mapping = make_action_mapping(
            config.action_mode, self.airframe, config.max_body_rate, config.k_rate
        )
        opts = self.plant_options
        self.latency = Latency(
            1,
            opts.action_delay_steps,
            opts.obs_delay_steps,
            hover_action(self.action_mapping, self.airframe.hover_thrust),
        )
        self.reward_weights = config.rewards
        self.sensors = Sensors(config.noise, config.bias, self.control_dt)
        self.task = TaskParams(
            self.crash_conditions,
            self.reward_weights,
            self.control_dt,
            self.airframe.mass,
            self.airframe.gravity,
            self.max_steps,
        )  # what the task step (shared with the vector env) needs
        self._width, self._height = config.width, config.height
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
        self._first_reference: Reference | None = None  # at t = 0, checked by the last reset

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
        begin_resets((self,), (seed,), (options,))
        sensed, infos = finish_resets((self,))
        obs, info = sensed[0], infos[0]
        if self.preview is not None:
            obs = np.concatenate((obs, self.preview.single(self.trajectory, 0)))
        return obs, info

    def _begin_reset(self, seed: object, options: object, reference: Reference) -> None:
        """One env's part of :func:`begin_resets`, its first ``reference`` checked."""
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
        self.sensors.reseed(self.np_random)  # before the plant draws the wind
        self.plant.begin_reset(
            self.np_random, reference.pos + position_offset, reference.yaw + yaw_offset, velocity
        )
        self._steps = 0
        self._prev_action = [0.0, 0.0, 0.0, 0.0]
        self._first_reference = reference

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
