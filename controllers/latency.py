"""The latency predictor of the trackers: the state the next command will meet, from a delayed one.

Behind ``d_s`` control periods of sensor latency and ``d_a`` of command latency (the env's
``obs_delay_steps`` and ``action_delay_steps``), the observation shows the vehicle ``d_s`` periods
ago and the command computed now acts ``d_a`` periods from now: the loop has ``d_s + d_a``
periods of dead time, which the attitude loop's phase margin does not survive at two periods
each way and a slow rotor (docs/controllers.md, "Behind latency"). The predictor rolls the
observed state forward over those ``H = d_s + d_a`` periods with the commands already sent
(kept in its state) and hands the tracker the predicted state, a Smith-predictor-like
compensation:

* the rotors: the commands through the first-order rotor model at the plant's nominal time
  constant, as :mod:`~residual_quad.controllers.rotor_model` runs it, each period's thrust the
  exact mean of the lag over it (the command itself for ideal rotors);
* the rigid body, one step per period: ``v̇ = R e_z T/m − g e_z + â_d``, ``ω̇ = J⁻¹(τ + τ̂_d −
  ω × Jω)``, the rotation advanced by the mid-period rate (Rodrigues);
* the disturbances ``â_d`` (m/s², world) and ``τ̂_d`` (N·m, body): what the nominal model
  missed over the last observed period — the measured change of velocity and rate against the
  model's — low-passed with gain :data:`DISTURBANCE_GAIN` per period. Without them a constant
  disturbance (the payload's weight and its centre of mass) is predicted as motion that never
  happens, and the tracker follows a biased state: measured, the prediction without them doubles
  to sextuples ``pid``'s error, with them it is within 16 % at one period each way.

The reference is shifted by ``d_a`` periods along its velocity and acceleration, so the command
is computed for the state and the reference of the moment it acts. Everything is written once
for one vehicle (fields along the last axis) and a batch (a leading env axis), in explicit
component arithmetic, so a row of a batch has the one-vehicle bits.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

#: the disturbance estimates' low-pass gain per control period (time constant ≈ 4.5 periods)
DISTURBANCE_GAIN = 0.2


class PredictorState(NamedTuple):
    """The predictor's memory, one row per env (one vehicle: no leading axis)."""

    sent: np.ndarray  # N, (n, H, 4): the thrusts commanded over the last H periods, oldest first
    thrusts: np.ndarray  # N, (n, 4): the rotor model's thrusts at the observation's time
    period_thrusts: np.ndarray  # N, (n, 4): the mean thrust over the period that ended there
    prev_vel: np.ndarray  # m/s, world, (n, 3): the previous observation's velocity
    prev_omega: np.ndarray  # rad/s, body, (n, 3): the previous observation's rate
    have_prev: np.ndarray  # (n,) bool: the previous observation precedes this one
    accel_dist: np.ndarray  # m/s², world, (n, 3): â_d
    torque_dist: np.ndarray  # N·m, body, (n, 3): τ̂_d


class LatencyPredictor:
    """The predictor of a vehicle with ``airframe`` (the nominal model), control period ``dt``
    (s), ``obs_delay``/``action_delay`` control periods of sensor and command latency and rotors
    of nominal time constant ``rotor_tau_s`` (s, 0: ideal)."""

    def __init__(
        self,
        airframe: Airframe,
        dt: float,
        obs_delay: int,
        action_delay: int,
        rotor_tau_s: float = 0.0,
    ):
        self.horizon = int(obs_delay) + int(action_delay)  # periods predicted
        if self.horizon < 1:
            raise ValueError(
                "a latency predictor needs at least one period of latency, got "
                f"obs_delay={obs_delay!r}, action_delay={action_delay!r}"
            )
        self.dt = float(dt)  # s
        self.lead_s = int(action_delay) * self.dt  # s, the reference's shift
        self.decay = math.exp(-self.dt / rotor_tau_s) if rotor_tau_s > 0.0 else 0.0
        # the mean of f + (u − f)(1 − e^{−t/τ}) over a period is u + (f − u)·mean_gain
        self.mean_gain = rotor_tau_s / self.dt * (1.0 - self.decay) if rotor_tau_s > 0.0 else 0.0
        self.mass = airframe.mass  # kg
        self.gravity = airframe.gravity  # m/s²
        self.J = tuple(float(x) for x in np.asarray(airframe.inertia))  # kg·m², body axes
        self.Jv = np.array(self.J)  # the same as an array, for the (…, 3) products
        self.A = airframe.allocation.tolist()  # rotor thrusts → [T, τx, τy, τz]
        self.hover = airframe.hover_thrust / 4.0  # N per rotor

    def init_state(self, n: int) -> PredictorState:
        """Rotors at hover since long before the first observation, no disturbance known."""
        h = np.full((n, 4), self.hover)
        return PredictorState(
            sent=np.full((n, self.horizon, 4), self.hover),
            thrusts=h,
            period_thrusts=h.copy(),
            prev_vel=np.zeros((n, 3)),
            prev_omega=np.zeros((n, 3)),
            have_prev=np.zeros(n, dtype=bool),
            accel_dist=np.zeros((n, 3)),
            torque_dist=np.zeros((n, 3)),
        )

    def forget(self, state: PredictorState, rows: np.ndarray) -> PredictorState:
        """The next observation of ``rows`` (n,) bool does not follow the last one."""
        return state._replace(have_prev=state.have_prev & ~rows)

    def forget_one(self, state: PredictorState) -> PredictorState:
        """:meth:`forget` of one vehicle."""
        return state._replace(have_prev=np.zeros_like(np.asarray(state.have_prev)))

    # -- the model ------------------------------------------------------------------------------
    def _wrench(self, f: np.ndarray) -> tuple[np.ndarray, ...]:
        """Collective (N) and body torques (N·m) of rotor thrusts ``f`` (…, 4)."""
        f0, f1, f2, f3 = f[..., 0], f[..., 1], f[..., 2], f[..., 3]
        return tuple(a * f0 + b * f1 + c * f2 + d * f3 for a, b, c, d in self.A)

    def _dynamics(
        self, rot: np.ndarray, omega: np.ndarray, f: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nominal model's acceleration (…, 3) (m/s², world) and angular acceleration
        (…, 3) (rad/s², body) at rotation ``rot`` (…, 9) and rate ``omega`` (…, 3) under rotor
        thrusts ``f`` (…, 4), without the disturbance estimates."""
        T, tx, ty, tz = self._wrench(f)
        s = T / self.mass
        acc = np.stack((rot[..., 2] * s, rot[..., 5] * s, rot[..., 8] * s - self.gravity), axis=-1)
        Jx, Jy, Jz = self.J
        wx, wy, wz = omega[..., 0], omega[..., 1], omega[..., 2]
        wdot = np.stack(
            (
                (tx - (wy * Jz * wz - wz * Jy * wy)) / Jx,
                (ty - (wz * Jx * wx - wx * Jz * wz)) / Jy,
                (tz - (wx * Jy * wy - wy * Jx * wx)) / Jz,
            ),
            axis=-1,
        )
        return acc, wdot

    def _update_disturbances(self, state: PredictorState, obs: np.ndarray) -> PredictorState:
        """The disturbance estimates after the period that ended at ``obs``'s time: the measured
        change of velocity and rate against the nominal model's under the rotors' mean thrust."""
        vel, omega, rot = obs[..., L.vel], obs[..., L.omega_b], obs[..., L.rot]
        mid_w = 0.5 * (state.prev_omega + omega)
        acc, wdot = self._dynamics(rot, mid_w, state.period_thrusts)
        k = DISTURBANCE_GAIN
        a_meas = (vel - state.prev_vel) / self.dt
        w_meas = (omega - state.prev_omega) / self.dt
        da = state.accel_dist + k * ((a_meas - acc) - state.accel_dist)
        dt_ = state.torque_dist + k * ((w_meas - wdot) * self.Jv - state.torque_dist)
        have = np.asarray(state.have_prev)[..., None]
        return state._replace(
            accel_dist=np.where(have, da, state.accel_dist),
            torque_dist=np.where(have, dt_, state.torque_dist),
        )

    # -- the step -------------------------------------------------------------------------------
    def predict(self, state: PredictorState, obs: np.ndarray) -> tuple[PredictorState, np.ndarray]:
        """The observation ``obs`` ((D,) one vehicle, (n, D) a batch) with its position,
        velocity, rotation and rate predicted ``H`` periods ahead and its reference shifted by
        the command latency (a new array), and the next state."""
        state = self._update_disturbances(state, obs)
        state = state._replace(
            prev_vel=np.array(obs[..., L.vel]),
            prev_omega=np.array(obs[..., L.omega_b]),
            have_prev=np.ones_like(np.asarray(state.have_prev)),
        )
        pos, vel = obs[..., L.pos], obs[..., L.vel]
        rot, omega = obs[..., L.rot], obs[..., L.omega_b]
        dt, Jv = self.dt, self.Jv
        f = state.thrusts
        for k in range(self.horizon):
            u = state.sent[..., k, :]
            acc, wdot = self._dynamics(rot, omega, u + (f - u) * self.mean_gain)
            acc = acc + state.accel_dist
            wdot = wdot + state.torque_dist / Jv
            pos = pos + vel * dt + 0.5 * acc * (dt * dt)
            vel = vel + acc * dt
            rot = _rotate(rot, (omega + 0.5 * wdot * dt) * dt)
            omega = omega + wdot * dt
            f = u + (f - u) * self.decay
        out = np.array(obs, dtype=float)
        out[..., L.pos], out[..., L.vel] = pos, vel
        out[..., L.rot], out[..., L.omega_b] = rot, omega
        lead = self.lead_s
        ref_vel, ref_acc = obs[..., L.ref_vel], obs[..., L.ref_acc]
        out[..., L.ref_pos] = obs[..., L.ref_pos] + ref_vel * lead + 0.5 * ref_acc * (lead * lead)
        out[..., L.ref_vel] = ref_vel + ref_acc * lead
        return state, out

    def record(self, state: PredictorState, thrusts: np.ndarray) -> PredictorState:
        """The state after the command ``thrusts`` ((4,) or (n, 4), N) was sent: the oldest
        command has acted over the period after the observation's time (the rotor state moves
        on by it) and leaves the memory; the new one joins it."""
        u = state.sent[..., 0, :]
        f = u + (state.thrusts - u) * self.decay
        mean = u + (state.thrusts - u) * self.mean_gain
        sent = np.concatenate((state.sent[..., 1:, :], thrusts[..., None, :]), axis=-2)
        return state._replace(sent=sent, period_thrusts=mean, thrusts=f)


def _rotate(rot: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Rotation ``rot`` (…, 9) body → world, row-major, advanced by the body-frame rotation
    vector ``theta`` (…, 3) rad: ``R·exp([θ]×)`` (Rodrigues), in explicit components."""
    tx, ty, tz = theta[..., 0], theta[..., 1], theta[..., 2]
    ang2 = tx * tx + ty * ty + tz * tz
    ang = np.sqrt(ang2)
    small = ang2 < 1e-24
    safe = np.where(small, 1.0, ang)
    a = np.where(small, 1.0, np.sin(safe) / safe)  # sin θ/θ
    b = np.where(small, 0.5, (1.0 - np.cos(safe)) / (safe * safe))  # (1 − cos θ)/θ²
    # E = I + a K + b K², K = [θ]×
    e00, e11, e22 = (
        1.0 - b * (ty * ty + tz * tz),
        1.0 - b * (tx * tx + tz * tz),
        1.0 - b * (tx * tx + ty * ty),
    )
    e01, e10 = -a * tz + b * tx * ty, a * tz + b * tx * ty
    e02, e20 = a * ty + b * tx * tz, -a * ty + b * tx * tz
    e12, e21 = -a * tx + b * ty * tz, a * tx + b * ty * tz
    E = ((e00, e01, e02), (e10, e11, e12), (e20, e21, e22))
    rows = []
    for i in range(3):
        r0, r1, r2 = rot[..., 3 * i], rot[..., 3 * i + 1], rot[..., 3 * i + 2]
        rows += [r0 * E[0][j] + r1 * E[1][j] + r2 * E[2][j] for j in range(3)]
    return np.stack(rows, axis=-1)
