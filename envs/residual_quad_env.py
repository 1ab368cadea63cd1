"""``ResidualQuad-v0``: a MuJoCo quadrotor tracking a reference under unmodelled disturbances."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from residual_quad.envs.airframe import Airframe, mix
from residual_quad.envs.disturbances import (
    DragModel,
    GroundEffect,
    WindModel,
    resolve_payload,
)
from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.plant import QuadrotorPlant, quat_to_rot
from residual_quad.envs.trajectories import Trajectory, make_trajectory

ACTION_MODES = ("rotor", "ctbr")


class ResidualQuadEnv(gym.Env):
    r"""Quadrotor trajectory tracking with drag, gusty wind, a hidden payload and ground effect.

    ## Description

    An F450-class X quadrotor (0.95 kg nominal, four rotors of 0–6 N, yaw-torque coefficient
    0.015 m) simulated in MuJoCo at ``physics_hz`` and controlled at ``control_hz``. The plant holds
    effects that the nominal model ``m·a = T·R·e_z − m·g·e_z`` does not: a payload welded under the
    frame (added with ``MjSpec``, so mass and inertia stay consistent), body-frame anisotropic
    quadratic + linear drag on the air-relative velocity, mean + Ornstein–Uhlenbeck gusts and the
    Cheeseman–Bennett ground effect. The drag and ground-effect wrench is recomputed and assigned
    every physics substep. The task is to track a reference trajectory.

    ## Action space

    ``action_mode="rotor"`` (default): ``Box(-1, 1, (4,))``, rotor thrusts ``f_i = (a_i + 1)/2 ·
    6 N`` in the rotor order of :mod:`residual_quad.envs.airframe`.

    ``action_mode="ctbr"``: ``Box(-1, 1, (4,))``, collective thrust ``T = (a_0 + 1)/2 · 24 N`` and
    body-rate setpoints ``ω_des = a_{1:4} · max_body_rate`` (rad/s), tracked by an onboard rate loop
    ``τ = J·k_rate·(ω_des − ω) + ω × Jω`` (nominal inertia) and the saturating mixer, at the control
    rate. Meant for RL.

    Actions outside ``[-1, 1]`` are clipped; NaN or inf raise ``ValueError``.

    ## Observation space

    ``Box(low, high, (36,), float64)`` with generous finite limits (``ObsLayout.bounds()``),
    named slices in :class:`ObsLayout`:

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

    Nothing in the observation reveals the payload, the wind or the true residual; those are in
    ``info`` for analysis only.

    ## Rewards

    ``r = alive − w_pos·‖e_p‖ − w_vel·‖e_v‖ − w_rate·‖ω‖ − w_smooth·‖a_t − a_{t−1}‖²`` with
    ``e_p = p − p_ref`` (m), ``e_v = v − v_ref`` (m/s) and defaults ``alive = 1``,
    ``w_pos = 1``, ``w_vel = 0.1``, ``w_rate = 0.02``, ``w_smooth = 0.01``. A crash ends the
    episode, forfeiting the remaining alive bonus. The terms are in ``info["reward_terms"]``.

    ## Starting state

    At rest at the reference's initial position and heading (so the helix starts at yaw 90°),
    with the gusts drawn from their stationary distribution. ``reset(options=...)`` accepts
    ``position_offset`` (3-vector, m), ``yaw_offset`` (rad) and ``velocity`` (3-vector, m/s) for
    off-nominal starts.

    ## Episode end

    Terminated (``info["diverged"] = True``, reason in ``info["termination"]``) when the tilt
    exceeds ``max_tilt`` (default 90°: upside down), a frame geom touches the floor faster than
    ``crash_speed``, the position error exceeds ``max_position_error``, or the state is not finite
    (including MuJoCo's own instability warning). Truncated after ``episode_s`` seconds.

    ## Arguments

    | argument | default | meaning |
    |---|---|---|
    | ``payload`` | ``"none"`` | ``none/light/heavy/extra`` (0/0.25/0.5/0.75 kg) or a mass in kg |
    | ``wind`` | ``"calm"`` | ``calm/breezy/windy``, ``(mean, sigma)`` m/s or a ``WindModel`` |
    | ``trajectory`` | ``"hover"`` | ``hover/helix/figure8`` or a :class:`Trajectory` instance |
    | ``ground_effect`` | ``True`` | Cheeseman–Bennett thrust gain near the floor |
    | ``control_hz`` / ``physics_hz`` | 100 / 500 | rates, Hz (physics a multiple of control) |
    | ``episode_s`` | 20.0 | episode length, s |
    | ``action_mode`` | ``"rotor"`` | ``rotor`` or ``ctbr`` |
    | ``render_mode`` | ``None`` | ``None`` or ``"rgb_array"`` (headless: ``MUJOCO_GL=egl``) |
    | ``drag`` | ``DragModel()`` | k_h = 0.055, k_v = 0.090 N/(m/s)², c_lin = 0.020 N/(m/s) |
    | ``wind_tau`` / ``wind_direction`` | 2.0 s / 0 rad | gust correlation time, mean-wind heading |
    | ``airframe`` | ``Airframe()`` | nominal vehicle parameters |
    | ``seed`` | ``None`` | seed used by the first ``reset`` that passes none |
    | ``max_tilt`` | π/2 | crash tilt, rad |
    | ``crash_speed`` | 1.0 | floor contact faster than this is a crash, m/s |
    | ``max_position_error`` | 5.0 | tracking error that ends the episode, m |
    | ``max_body_rate`` | (4, 4, 2) | ``ctbr`` rate scale, rad/s |
    | ``reward_weights`` | see Rewards | dict overriding ``alive/pos/vel/rate/smooth`` |
    | ``pos_noise`` / ``vel_noise`` | 0 / 0 | white sensor noise std on the observation, m, m/s |
    | ``gyro_noise`` / ``imu_noise`` | 0 / 0 | ... on body rates and accelerometer, rad/s, m/s² |

    ## Version history

    * v0: initial release.
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
        max_tilt: float = math.pi / 2,
        crash_speed: float = 1.0,
        max_position_error: float = 5.0,
        max_body_rate: tuple[float, float, float] = (4.0, 4.0, 2.0),
        k_rate: float = 20.0,
        reward_weights: dict[str, float] | None = None,
        pos_noise: float = 0.0,  # m, std of white noise on the observed position
        vel_noise: float = 0.0,  # m/s, ... velocity
        gyro_noise: float = 0.0,  # rad/s, ... body rates
        imu_noise: float = 0.0,  # m/s², ... accelerometer
        width: int = 640,
        height: int = 480,
    ):
        if action_mode not in ACTION_MODES:
            raise ValueError(
                f"unknown action_mode {action_mode!r}; valid choices: {', '.join(ACTION_MODES)}"
            )
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"unknown render_mode {render_mode!r}; valid choices: None, "
                f"{', '.join(self.metadata['render_modes'])}"
            )
        if episode_s <= 0:
            raise ValueError(f"episode_s must be > 0, got {episode_s}")
        self.payload_kg = resolve_payload(payload)
        self.wind_model = WindModel.from_spec(wind, tau=wind_tau, direction=wind_direction)
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
        )
        self.control_dt = self.plant.control_dt
        self.max_steps = int(round(episode_s / self.control_dt))
        self.action_mode = action_mode
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": int(round(control_hz))}
        self._seed = seed
        self.max_tilt_cos = math.cos(max_tilt)
        self.crash_speed = crash_speed
        self.max_position_error = max_position_error
        self.max_body_rate = np.asarray(max_body_rate, dtype=float)
        self.k_rate = k_rate
        weights = {"alive": 1.0, "pos": 1.0, "vel": 0.1, "rate": 0.02, "smooth": 0.01}
        unknown = set(reward_weights or {}) - set(weights)
        if unknown:
            raise ValueError(f"unknown reward_weights {sorted(unknown)}; valid: {list(weights)}")
        weights.update(reward_weights or {})
        self.reward_weights = weights
        noise = {"pos": pos_noise, "vel": vel_noise, "omega_b": gyro_noise, "imu": imu_noise}
        if any(not (v >= 0.0 and math.isfinite(v)) for v in noise.values()):
            raise ValueError(f"sensor noise levels must be finite and >= 0, got {noise}")
        self._noise_std = np.zeros(OBS_DIM)
        for name, std in noise.items():
            self._noise_std[getattr(ObsLayout, name)] = std
        self._noisy = bool(self._noise_std.any())
        self._noise_rng = np.random.default_rng(0)
        self._width, self._height = width, height
        self._renderer: mujoco.Renderer | None = None

        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        low, high = ObsLayout.bounds()
        self.observation_space = spaces.Box(low, high, shape=(OBS_DIM,), dtype=np.float64)
        self._prev_action = [0.0, 0.0, 0.0, 0.0]
        self._steps = 0
        self._J = np.asarray(self.airframe.inertia)

    # ------------------------------------------------------------------ API
    @property
    def nominal(self) -> Airframe:
        """What a controller may know: the nominal airframe (no payload, no disturbances)."""
        return self.airframe

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        super().reset(seed=seed)
        options = dict(options or {})
        pos_off = np.asarray(options.pop("position_offset", np.zeros(3)), dtype=float)
        yaw_off = float(options.pop("yaw_offset", 0.0))
        vel = options.pop("velocity", None)
        if options:
            raise ValueError(
                f"unknown reset options {sorted(options)}; valid: position_offset, yaw_offset, "
                "velocity"
            )
        if pos_off.shape != (3,) or not np.all(np.isfinite(pos_off)) or not math.isfinite(yaw_off):
            raise ValueError("position_offset must be a finite 3-vector and yaw_offset finite")
        # noise has its own stream so that switching it on leaves the wind realization unchanged
        self._noise_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        ref = self.trajectory(0.0)
        self.plant.reset(
            self.np_random,
            ref.pos + pos_off,
            ref.yaw + yaw_off,
            None if vel is None else np.asarray(vel, dtype=float),
        )
        self._steps = 0
        self._prev_action = [0.0, 0.0, 0.0, 0.0]
        o = self._observe(ref)
        obs = np.array(o)
        self._last_true = o
        info = self._info(
            float(np.linalg.norm(obs[ObsLayout.pos] - ref.pos)), np.zeros(3), {}, None
        )
        return self._sensed(obs), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        vals = np.asarray(action, dtype=float).ravel().tolist()
        if len(vals) != 4:
            raise ValueError(f"action must have 4 elements, got shape {np.shape(action)}")
        if not all(map(math.isfinite, vals)):
            raise ValueError(f"action must be finite, got {vals}")
        a = [min(max(v, -1.0), 1.0) for v in vals]
        self.plant.step(self._rotor_thrusts(a))
        self._steps += 1
        ref = self.trajectory(self._steps * self.control_dt)
        o = self._observe(ref)
        obs = np.array(o)
        p, self._last_true = self._last_true, o

        # true residual acceleration over the period vs the nominal model, world frame:
        # (v₁ − v₀)/Δt − (R₀·e_z·ΣT/m − g·e_z), R₀'s third column is p[8], p[11], p[14]
        k = self.plant.thrust_sum / self.airframe.mass
        inv_dt = 1.0 / self.control_dt
        residual = np.array(
            (
                (o[3] - p[3]) * inv_dt - p[8] * k,
                (o[4] - p[4]) * inv_dt - p[11] * k,
                (o[5] - p[5]) * inv_dt - p[14] * k + self.airframe.gravity,
            )
        )
        rx, ry, rz = ref.pos.tolist()
        e_p = math.sqrt((o[0] - rx) ** 2 + (o[1] - ry) ** 2 + (o[2] - rz) ** 2)
        termination = self._termination(obs, o, e_p)
        terminated = termination is not None
        truncated = not terminated and self._steps >= self.max_steps
        if termination == "non_finite":
            terms, reward = {}, 0.0
        else:
            terms = self._reward(o, ref, e_p, a)
            reward = terms["alive"] + terms["pos"] + terms["vel"] + terms["rate"] + terms["smooth"]
        self._prev_action = a
        info = self._info(e_p, residual, terms, termination)
        return self._sensed(obs), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.plant.model, self._height, self._width)
        r = self._renderer
        r.update_scene(self.plant.data, camera="chase")
        ref = self.trajectory(self._steps * self.control_dt)
        scn = r.scene
        if scn.ngeom < scn.maxgeom:
            mujoco.mjv_initGeom(
                scn.geoms[scn.ngeom],
                mujoco.mjtGeom.mjGEOM_SPHERE,
                np.array([0.04, 0.0, 0.0]),
                ref.pos,
                np.eye(3).ravel(),
                np.array([0.1, 0.9, 0.2, 0.8], dtype=np.float32),
            )
            scn.ngeom += 1
        return r.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ internals
    def _rotor_thrusts(self, a: list[float]) -> Sequence[float]:
        frame = self.airframe
        if self.action_mode == "rotor":
            k = 0.5 * frame.max_rotor_thrust
            return [(v + 1.0) * k for v in a]
        # ctbr: collective thrust + body rates through a P rate loop and the mixer
        thrust = (a[0] + 1.0) * 0.5 * frame.max_thrust
        omega = self.plant.data.qvel[3:6]
        omega_des = np.array(a[1:4]) * self.max_body_rate
        J = self._J
        torque = J * self.k_rate * (omega_des - omega) + np.cross(omega, J * omega)
        return mix(frame, thrust, torque)

    def _observe(self, ref) -> list[float]:
        """The true observation as a list (the attitude from the current quaternion)."""
        p = self.plant
        d = p.data
        x, y, z, qw, qx, qy, qz = d.qpos[0:7].tolist()
        return [
            x, y, z,
            *d.qvel[0:3].tolist(),
            *quat_to_rot(qw, qx, qy, qz),
            *d.qvel[3:6].tolist(),
            *ref.pos.tolist(),
            *ref.vel.tolist(),
            *ref.acc.tolist(),
            math.remainder(ref.yaw, 2.0 * math.pi),
            ref.yaw_rate,
            *p.thrusts.tolist(),
            *p.imu_specific_force(),
        ]  # fmt: skip

    def _sensed(self, obs: np.ndarray) -> np.ndarray:
        """The observation as the sensors report it (white noise if configured)."""
        if not self._noisy:
            return obs
        return obs + self._noise_std * self._noise_rng.standard_normal(OBS_DIM)

    def _termination(self, obs: np.ndarray, o: list[float], e_p: float) -> str | None:
        d = self.plant.data
        # MuJoCo resets the data (time included) when it detects an unstable acceleration
        unstable = abs(d.time - self._steps * self.control_dt) > 1e-6
        if unstable or not math.isfinite(sum(o)) and not np.all(np.isfinite(obs)):
            return "non_finite"
        if o[14] < self.max_tilt_cos:  # R[2, 2] = cos(tilt)
            return "tilt"
        if e_p > self.max_position_error:
            return "position_error"
        if d.ncon and self.plant.floor_contact_speed() > self.crash_speed:
            return "ground_contact"
        return None

    def _reward(self, o: list[float], ref, e_p: float, a: list[float]) -> dict[str, float]:
        w = self.reward_weights
        vx, vy, vz = ref.vel.tolist()
        e_v = math.sqrt((o[3] - vx) ** 2 + (o[4] - vy) ** 2 + (o[5] - vz) ** 2)
        rate = math.sqrt(o[15] ** 2 + o[16] ** 2 + o[17] ** 2)
        smooth = sum((x - y) ** 2 for x, y in zip(a, self._prev_action, strict=True))
        return {
            "alive": w["alive"],
            "pos": -w["pos"] * e_p,
            "vel": -w["vel"] * e_v,
            "rate": -w["rate"] * rate,
            "smooth": -w["smooth"] * smooth,
        }

    def _info(
        self,
        e_p: float,
        residual: np.ndarray,
        terms: dict[str, float],
        termination: str | None,
    ) -> dict[str, Any]:
        p = self.plant
        return {
            "t": self._steps * self.control_dt,
            "position_error": e_p,
            "residual_accel": residual,
            "wind": p.wind.copy(),
            "drag_force": p.drag_force.copy(),
            "ground_gain": p.ground_gain,
            "payload_kg": self.payload_kg,
            "true_mass": p.true_mass,
            "reward_terms": terms,
            "diverged": termination is not None,
            "termination": termination,
        }
