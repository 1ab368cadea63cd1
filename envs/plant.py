"""The disturbance plant: MuJoCo stepping with drag, wind and ground effect applied every substep.

The external wrench on the frame is *recomputed and assigned* before every physics substep (never
accumulated): drag depends on the velocity, which changes within a control period. Rotor thrusts
are held constant over a control period (zero-order hold), as a flight controller would; with
``rotor_tau_s > 0`` the rotors follow that command through a first-order lag that MuJoCo runs in
its step (:mod:`residual_quad.envs.actuators`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mujoco
import numpy as np

from residual_quad.envs.actuators import check_rotor_tau
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import real
from residual_quad.envs.disturbances import (
    DragModel,
    GroundEffect,
    WindModel,
    WindProcess,
    refill_blocks,
)
from residual_quad.envs.events import Event, EventRun, set_payload_mass, wind_offsets
from residual_quad.envs.model import BODY, build_model
from residual_quad.envs.substep import params, plant_wrench

DSBL_CONTACT = int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
"""MuJoCo's disable flag of collision detection (``model.opt.disableflags``)."""

MAX_PHYSICS_HZ = 100_000.0
"""Highest physics rate accepted, Hz (a 10 µs step; beyond it float time stamps lose meaning)."""


def specific_force(acc, rot, gravity: float):
    """Accelerometer specific force ``R^T (a + g·e_z)`` (m/s², body frame) of the world
    acceleration ``acc = (a_x, a_y, a_z)`` (m/s²) and the row-major rotation ``rot`` (9 entries).

    Operators only (floats or equal-shaped arrays alike): the one formula of the single and the
    vector environment."""
    ax, ay, az = acc
    az = az + gravity
    r = rot
    return [
        r[0] * ax + r[3] * ay + r[6] * az,
        r[1] * ax + r[4] * ay + r[7] * az,
        r[2] * ax + r[5] * ay + r[8] * az,
    ]


def finish_resets(plants: Sequence[QuadrotorPlant]) -> None:
    """Complete the resets :meth:`QuadrotorPlant.begin_reset` started, for a batch of distinct
    plants: their first wind blocks drawn together (:func:`refill_blocks`, one array expression
    per wind model), then each plant's forward pass. Bit for bit the plants' resets one by one."""
    refill_blocks([plant._wind_proc for plant in plants])
    for plant in plants:
        plant._finish_reset()


def check_rates(physics_hz: object, control_hz: object) -> tuple[float, float, int]:
    """``(physics_hz, control_hz, substeps)``: the rates as floats (Hz) if ``physics_hz`` is in
    (0, :data:`MAX_PHYSICS_HZ`] and a whole multiple ``substeps`` of ``control_hz`` (> 0), else
    a ``ValueError`` naming the rate (both when they disagree)."""
    physics_hz = real("physics_hz", physics_hz, low=0.0, high=MAX_PHYSICS_HZ, low_open=True)
    control_hz = real("control_hz", control_hz, low=0.0, low_open=True, unit="Hz")
    if control_hz > physics_hz:
        raise ValueError(
            f"control_hz ({control_hz:g} Hz) must not exceed physics_hz ({physics_hz:g} Hz): "
            "physics_hz must be a positive integer multiple of control_hz"
        )
    ratio = physics_hz / control_hz
    if abs(ratio - round(ratio)) > 1e-9:
        raise ValueError(
            f"physics_hz ({physics_hz}) must be a positive integer multiple of "
            f"control_hz ({control_hz})"
        )
    return physics_hz, control_hz, int(round(ratio))


class QuadrotorPlant:
    """MuJoCo quadrotor with unmodelled disturbances.

    Args:
        airframe: nominal vehicle parameters.
        payload_kg: payload welded under the frame, kg.
        drag: body-frame drag model.
        wind: wind model (mean + OU gusts).
        ground_effect: thrust gain near the ground, or ``None`` to disable.
        physics_hz: physics rate, Hz.
        control_hz: control rate, Hz; must divide ``physics_hz``.
        rotor_tau_s: rotor time constant, s (0: ideal rotors, the thrust follows the command at
            once).
        events: events during the episode (:mod:`residual_quad.envs.events`, parsed); fired by
            :func:`~residual_quad.envs.events.fire_due` before a period's :meth:`step`.
    """

    def __init__(
        self,
        airframe: Airframe | None = None,
        payload_kg: float = 0.0,
        drag: DragModel | None = None,
        wind: WindModel | None = None,
        ground_effect: GroundEffect | None = None,
        physics_hz: float = 500.0,
        control_hz: float = 100.0,
        rotor_tau_s: float = 0.0,  # s, first-order rotor lag (0: ideal rotors)
        events: tuple[Event, ...] = (),
    ):
        self.airframe = airframe or Airframe()
        physics_hz, control_hz, self.substeps = check_rates(physics_hz, control_hz)
        self.physics_dt = 1.0 / physics_hz
        self.control_dt = self.substeps * self.physics_dt
        self.payload_kg = float(payload_kg)
        self.drag = drag or DragModel()
        self.wind_model = wind or WindModel()
        self.ground_effect = ground_effect
        self.rotor_tau_s = check_rotor_tau(rotor_tau_s)
        self.events: EventRun | None = None
        if events:
            self.events = EventRun(
                events,
                self.control_dt,
                self.substeps,
                self.payload_kg,
                self.wind_model.mean_vector,
            )
        payload_body = self.events is not None and self.events.has_payload
        self.model = build_model(
            self.airframe,
            self.payload_kg,
            physics_hz,
            rotor_tau_s=self.rotor_tau_s,
            payload_body=payload_body,
        )
        self.data = mujoco.MjData(self.model)
        self.body_id = self.model.body(BODY).id
        self.true_mass = float(self.model.body_subtreemass[self.body_id])
        self._xfrc = self.data.xfrc_applied[self.body_id]
        self._floor_geom = self.model.geom("floor").id
        self.contact_height = 0.5  # m, collision detection runs below this height (+ margin)
        self._contact_off = False
        self._gain = self.model.actuator_gainprm[:, 0]  # view: thrust per unit command
        self._warnings = self.data.warning.number  # view: MuJoCo's warning counters since reset
        self._wind_proc: WindProcess | None = None
        self.wind = np.zeros(3)  # m/s, world, last substep
        self.command = np.zeros(4)  # N, last commanded (after saturation, before ground effect)
        self.thrust_sum = 0.0  # N, of the command
        self.thrusts = np.zeros(4)  # N, the rotors' at the period's end (the lagged command)
        self.ground_gain = 1.0
        self.drag_force = np.zeros(3)  # N, world, last substep
        self._params = params(self.drag, self.ground_effect)  # the substep wrench's constants
        self._unit_eff = np.ones(4)  # rotor efficiencies without events
        self._load_kernel()

    def _load_kernel(self) -> None:
        """Compile (or load from numba's cache) the substep kernel for this plant's arrays now,
        not inside the first control period: a ``--realtime`` server's clock runs from the first
        step, and a first period 0.3–1.2 s long overran it into a crash. The call is made on the
        plant's own arrays (the kernel is specialised on their layout) and undone."""
        gain = self._gain.copy()
        plant_wrench(
            self.data.qpos, self.data.qvel, np.zeros(3), self._params, self._unit_eff,
            self._xfrc, self._gain,
        )  # fmt: skip
        self._gain[:] = gain
        self._xfrc[:] = 0.0

    # ------------------------------------------------------------------ state
    def reset(
        self,
        rng: np.random.Generator,
        pos: np.ndarray,
        yaw: float,
        vel: np.ndarray | None = None,
    ) -> None:
        """Place the vehicle at rest (unless ``vel``) at ``pos`` (m) with heading ``yaw`` (rad)."""
        self.begin_reset(rng, pos, yaw, vel)
        finish_resets((self,))

    def begin_reset(
        self,
        rng: np.random.Generator,
        pos: np.ndarray,
        yaw: float,
        vel: np.ndarray | None,
    ) -> None:
        """The first half of :meth:`reset` (its arguments, ``vel`` given), one plant at a time:
        the state placed and the new wind process started on ``rng``; :func:`finish_resets`
        completes a batch of them."""
        if self.events is not None:
            self.events.reset()
            if self.payload_kg != self.events.base_payload_kg:
                self.set_payload(self.events.base_payload_kg)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[0:3] = pos
        self.data.qpos[3:7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        if vel is not None:
            self.data.qvel[0:3] = vel
        self._wind_proc = WindProcess(self.wind_model, self.physics_dt, rng, chunk=self.substeps)
        self.command = np.full(4, self.airframe.hover_thrust / 4.0)
        self.thrusts = self.command.copy()
        self.thrust_sum = self.airframe.hover_thrust
        self.data.ctrl[:] = self.command
        if self.model.na:  # lagged rotors start spun up to hover
            self.data.act[:] = self.command

    def _finish_reset(self) -> None:
        """The second half of :meth:`reset`, once the wind block is drawn."""
        self.wind = self._wind_proc.sample().copy()
        self._xfrc[:] = 0.0
        z = self.data.qpos[2]
        self._gain[:] = 1.0 if self.ground_effect is None else self.ground_effect.gain(z)
        self.ground_gain = float(self._gain[0])
        self._contact_off = False
        self.model.opt.disableflags &= ~DSBL_CONTACT
        mujoco.mj_forward(self.model, self.data)
        self._update_contact_flag()

    def unstable(self) -> bool:
        """Whether MuJoCo raised a warning since the last reset (NaN/inf/huge ``qpos``, ``qvel``
        or ``qacc``, ...). On such a warning MuJoCo resets its data to the default pose and goes
        on, so the state stops following the flight; the counters are cheap integers to test."""
        return any(self._warnings.tolist())

    def set_payload(self, mass_kg: float) -> None:
        """Make the payload ``mass_kg`` (kg) now, mass and inertia consistent
        (:func:`~residual_quad.envs.events.set_payload_mass`; the model needs its payload body)."""
        set_payload_mass(self.model, mass_kg, mujoco.MjData(self.model))
        self.payload_kg = float(mass_kg)
        self.true_mass = float(self.model.body_subtreemass[self.body_id])

    @property
    def wind_process(self) -> WindProcess | None:
        """The wind sampler of the current episode (a new one at every :meth:`reset`; ``None``
        before the first). The vector env mirrors its samples and sets its read position."""
        return self._wind_proc

    @property
    def time(self) -> float:
        return float(self.data.time)

    def floor_contact_speed(self) -> float:
        """Largest speed (m/s) of the frame while any of its geoms touches the floor, else 0."""
        d = self.data
        for i in range(d.ncon):
            c = d.contact[i]
            if c.geom1 == self._floor_geom or c.geom2 == self._floor_geom:
                return float(np.linalg.norm(d.qvel[0:3]))
        return 0.0

    def enable_contact_detection(self) -> None:
        """Switch MuJoCo's collision detection on now (benchmarks compare against it); the next
        :meth:`step` decides again from the height, as always."""
        self._contact_off = False
        self.model.opt.disableflags &= ~DSBL_CONTACT

    # ------------------------------------------------------------------ dynamics
    def _update_contact_flag(self) -> None:
        """Run MuJoCo's collision detection only when the vehicle can reach the floor this period.

        Exact, not an approximation: above ``contact_height + 2·|v_z|·Δt`` no geom can touch the
        floor before the next check, so skipping the (costly) broad phase changes nothing.
        """
        d = self.data
        reach = self.contact_height + 2.0 * abs(float(d.qvel[2])) * self.control_dt
        off = float(d.qpos[2]) > reach
        if off != self._contact_off:
            self._contact_off = off
            if off:
                self.model.opt.disableflags |= DSBL_CONTACT
            else:
                self.model.opt.disableflags &= ~DSBL_CONTACT

    def step(self, rotor_thrusts: Sequence[float]) -> None:
        """Advance one control period with the given rotor thrusts (N, clipped to the limits).

        Ground effect scales the rotors' actuator gain (thrust and reaction torque alike) with the
        current height; a command still saturates at ``max_rotor_thrust`` out of ground effect.
        With rotor lag the command is the filter's input and :attr:`thrusts` its output at the
        period's end; without, both are the command.
        Fired events (:attr:`events`) add their mean-wind change to the wind and scale each
        rotor's gain by its efficiency.
        """
        fmax = self.airframe.max_rotor_thrust
        f = [min(max(float(x), 0.0), fmax) for x in rotor_thrusts]
        self.command = np.array(f)
        self.thrust_sum = f[0] + f[1] + f[2] + f[3]
        d, m, xf = self.data, self.model, self._xfrc
        d.ctrl[:] = f
        self._update_contact_flag()
        gain, prm = self._gain, self._params
        qpos, qvel = d.qpos, d.qvel
        winds = self._wind_proc.take(self.substeps)
        eff = self._unit_eff
        if self.events is not None:
            winds = winds + wind_offsets([self.events])[0]
            eff = self.events.efficiency
        g = self.ground_gain
        for sub in range(self.substeps):  # the drag on the air-relative velocity, the gains
            g = plant_wrench(qpos, qvel, winds[sub], prm, eff, xf, gain)
            mujoco.mj_step(m, d)
        self.ground_gain = float(g)
        self.thrusts = d.act.copy() if m.na else self.command
        self.wind = winds[-1]
        self.drag_force = xf[0:3].copy()

    def imu_specific_force(self) -> list[float]:
        """Accelerometer at the frame centre (m/s², body frame), from the last physics substep.

        ``R^T (a − g)`` with the frame origin's acceleration, as an ideal accelerometer there
        measures it; both are those MuJoCo computed for the last substep (pre-integration state).
        """
        d = self.data
        return specific_force(
            d.qacc[0:3].tolist(), d.xmat[self.body_id].tolist(), self.airframe.gravity
        )
