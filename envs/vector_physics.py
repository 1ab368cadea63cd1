"""The vector env's physics: one control period of N plants, batched on ``mujoco.rollout``.

The physics half of the vector env's step (the task half is :mod:`residual_quad.envs.task`,
shared with the single env). An env that flies above the contact band (the plant's exact rule:
collision detection cannot matter this period) is stepped by one ``rollout`` call per physics
substep, all such envs together: the drag on the air-relative velocity and the ground-effect gain
are recomputed before every substep by the single env's compiled substep wrench
(:mod:`~residual_quad.envs.substep`, which holds no GIL) and passed in the control vector
(``mjSTATE_CTRL | mjSTATE_XFRC_APPLIED``); :attr:`BatchPhysics.compiled` false computes them in
numpy instead (the reference, same bits). An env in the contact band is stepped by its own plant
(:meth:`QuadrotorPlant.step`, contacts included). Events (:mod:`residual_quad.envs.events`) fire
on the envs' plants by the single env's function before the period; a batched env's wind and
rotor gains take their effects through the same functions the plant calls.

With rotor lag (:mod:`residual_quad.envs.actuators`) the control is the command ``f`` itself:
MuJoCo's filter must see the command, not ``gain·f`` (the filtered ``gain·f`` would lag the ground
effect and a rotor's efficiency too). MuJoCo keeps an actuator's gain in the model, so a lagged env
with ground effect or events has a rollout model of its own whose gains (ground effect × rotor
efficiency) are written before every substep; the force is then MuJoCo's ``gain·a`` in both envs,
the same arithmetic on the same numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import mujoco
import mujoco.rollout
import numpy as np

from residual_quad.envs.disturbances import drag_world_force
from residual_quad.envs.events import event_truth, fire_due, rotor_gains, wind_offsets
from residual_quad.envs.plant import DSBL_CONTACT, QuadrotorPlant, specific_force
from residual_quad.envs.rotations import quat_to_rot
from residual_quad.envs.substep import NUM_ROTORS, lane_after, lane_wrench, params
from residual_quad.envs.wind_mirror import WindMirror
from residual_quad.envs.xp import ARRAYS

FULL_PHYSICS = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)
"""MuJoCo's state spec of the vector env's per-env state rows (``mj_getState``)."""

CONTROL_SPEC = int(mujoco.mjtState.mjSTATE_CTRL) | int(mujoco.mjtState.mjSTATE_XFRC_APPLIED)
"""The ``rollout`` control spec of the vector env (rotor commands and the applied wrench); the
benches' floors use it too."""

MIN_LANE_ENVS = 64
"""Fewest envs a thread steps on its own: a smaller batch runs on fewer threads, because a
thread's share of the Python and numpy work (which holds the GIL) would outweigh its share of
the engine's (which does not)."""


def contiguous(rows: np.ndarray) -> slice | np.ndarray:
    """``rows`` (increasing, distinct indices) as a slice where they are one run, else as they
    are: indexing by a slice copies blocks (a 1024 × 3 assignment ≈ 1 µs against ≈ 15 µs by
    fancy index), and the whole batch is one run at almost every step."""
    if len(rows) and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def take_rows(a: np.ndarray, rows: slice | np.ndarray) -> np.ndarray:
    """A copy of ``a[rows]`` (``rows`` from :func:`contiguous`)."""
    return a[rows].copy() if isinstance(rows, slice) else a[rows]


def lane_plan(nbody: np.ndarray, nthread: int) -> list[list[np.ndarray]]:
    """How a period's batch is shared among threads: ``nbody[j]`` is env ``j``'s model size
    signature (one ``rollout`` call takes one size); returns, per lane, its pieces (indices into
    ``nbody``, each of one size). The envs, ordered by size, are cut into up to ``nthread`` lanes
    of equal count, at least :data:`MIN_LANE_ENVS` each, so the lanes end together whatever the
    mix of sizes (a size group is split only where a cut falls in it)."""
    order = np.argsort(nbody, kind="stable")
    lanes = max(1, min(nthread, len(order) // MIN_LANE_ENVS))
    plan = []
    for span in np.array_split(order, lanes):
        cuts = np.flatnonzero(np.diff(nbody[span])) + 1
        plan.append(np.split(span, cuts))
    return plan


class PeriodResult(NamedTuple):
    """What the physics reports of one period, one row per stepped env."""

    imu: np.ndarray  # m/s², body, (m, 3): accelerometer
    wind: np.ndarray  # m/s, world, (m, 3): last substep's wind
    drag: np.ndarray  # N, world, (m, 3): last substep's drag force
    gain: np.ndarray  # (m,): last substep's ground-effect gain
    unstable: np.ndarray  # (m,) bool: MuJoCo found the period unstable
    contact_speed: np.ndarray  # m/s, (m,): frame speed while touching the floor, else 0
    sim_time: np.ndarray  # s, (m,): simulated time reached
    thrusts: np.ndarray  # N, (m, 4): the rotors' thrusts at the period's end (before the gain)
    truth: dict[str, np.ndarray]  # the events' ground truth, (m, ...) (events.event_truth)
    true_mass: np.ndarray  # kg, (m,): the model's total mass now


class BatchPhysics:
    """The plants of ``num_envs`` envs stepped together; their states live in the caller's
    ``(num_envs, nstate)`` array of MuJoCo full-physics states.

    Args:
        num_envs: batch size.
        plant: env 0's plant (rates, drag, ground effect and model layout shared by all).
        plant_of: ``plant_of(i)``: env ``i``'s current plant (its model gives the rollout model,
            its wind process the samples).
        nthread: threads (1: the calling thread only). A batch is split into up to ``nthread``
            lanes of at least :data:`MIN_LANE_ENVS` envs; each lane flies its whole period
            (substep wrench and ``rollout`` substeps alike) on its own thread, so the engine's
            work and the compiled wrench of one lane overlap the Python work of the others and
            the threads meet once per period instead of once per substep. Every env's arithmetic
            is the same in any lane.
    """

    def __init__(
        self,
        num_envs: int,
        plant: QuadrotorPlant,
        plant_of: Callable[[int], QuadrotorPlant],
        nthread: int,
    ):
        self._plant_of = plant_of
        self.plant0 = plant
        self.substeps = plant.substeps
        self.physics_dt = plant.physics_dt  # s
        self.control_dt = plant.control_dt  # s
        nq, nv = plant.model.nq, plant.model.nv
        self.nstate = mujoco.mj_stateSize(plant.model, FULL_PHYSICS)
        self.qpos = slice(1, 1 + nq)  # in a state row
        self.qvel = slice(1 + nq, 1 + nq + nv)
        self.act = slice(1 + nq + nv, 1 + nq + nv + plant.model.na)  # lagged rotor thrusts, N
        self.lagged = plant.model.na > 0  # rotor lag: one shared setting of the batch
        self._gains_in_model = self.lagged and plant.ground_effect is not None  # module doc
        self._own: set[int] = set()  # ids of the rollout models of one env each (module doc)
        self.nthread = int(nthread)
        self.wind = WindMirror(num_envs, lambda i: plant_of(i).wind_process)
        self._pools = [mujoco.rollout.Rollout(nthread=0) for _ in range(self.nthread)]
        self._lanes = ThreadPoolExecutor(self.nthread - 1) if self.nthread > 1 else None
        self._models: dict[tuple[float, int], mujoco.MjModel] = {}  # per (payload kg, nbody)
        self._env_models: list[mujoco.MjModel | None] = [None] * num_envs
        self._datas: dict[int, list[mujoco.MjData]] = {}  # per nbody: one MjData per lane
        self._plan: tuple[bytes, list[list[np.ndarray]]] = (b"", [])  # (sizes, lane_plan)
        self._fallen: dict[int, np.ndarray] = {}  # per rollout model: see _rollout_period
        self._env_nbody = np.zeros(num_envs, dtype=np.int64)  # of its rollout model; 0: none yet
        self._env_fallen = np.zeros((num_envs, self.nstate))  # its rollout model's _fallen
        # address of its own rollout model's actuator_gainprm (0: a shared model); the model is
        # kept alive in _env_models until forget
        self._env_gain_at = np.zeros(num_envs, dtype=np.intp)
        gainprm = plant.model.actuator_gainprm
        self._gain_stride = gainprm.strides[0] // gainprm.itemsize  # entries from rotor to rotor
        # per-env facts read from its plant when first stepped after (re)placement (see forget)
        self._known = np.zeros(num_envs, dtype=bool)
        self._has_events = np.zeros(num_envs, dtype=bool)
        self._payload = np.zeros(num_envs)  # kg
        self._true_mass = np.zeros(num_envs)  # kg
        self._mean_wind = np.zeros((num_envs, 3))  # m/s, world, the wind model's mean
        self._params = params(plant.drag, plant.ground_effect)  # the substep wrench's constants
        self._qpos0 = np.ascontiguousarray(plant.model.qpos0)  # m, the default pose
        self.compiled = True
        """Between substeps the compiled wrench (:mod:`~residual_quad.envs.substep`, the single
        env's; no GIL held); false: the numpy reference (:meth:`_numpy_wrench`, same bits), which
        the benches measure beside it."""

    def forget(self, index: int) -> None:
        """Env ``index`` was replaced (or its payload changed): its rollout model and facts are
        looked up again."""
        self._env_models[index] = None
        self._env_nbody[index] = 0
        self._env_gain_at[index] = 0
        self._known[index] = False

    def _refresh(self, active: np.ndarray) -> None:
        """Read the facts of the envs ``active`` not stepped since they were (re)placed."""
        for i in active[~self._known[active]].tolist():
            plant = self._plant_of(i)
            self._known[i] = True
            self._has_events[i] = plant.events is not None
            self._payload[i], self._true_mass[i] = plant.payload_kg, plant.true_mass
            self._mean_wind[i] = plant.wind_model.mean_vector

    def close(self) -> None:
        if self._lanes is not None:
            self._lanes.shutdown()
        for pool in self._pools:
            pool.close()

    # ------------------------------------------------------------------ models
    def _env_model(self, index: int) -> mujoco.MjModel:
        """The rollout model of env ``index`` (cached until the env is replaced)."""
        model = self._env_models[index]
        if model is None:
            model = self._env_models[index] = self._rollout_model(self._plant_of(index))
            self._env_nbody[index] = model.nbody
            self._env_fallen[index] = self._fallen[id(model)]
            if id(model) in self._own:
                self._env_gain_at[index] = model.actuator_gainprm.ctypes.data
        return model

    def _rollout_model(self, plant: QuadrotorPlant) -> mujoco.MjModel:
        """The plant's model for ``rollout``: unit actuator gain, no control clamp (the force
        ``gain·f`` arrives in the control), collision detection off (only envs above the contact
        band are batched). One per distinct payload and model layout (a payload event's model
        keeps its payload body at 0 kg); one per env with lagged rotors and ground effect or
        events (its gains are written every substep)."""
        own = self.lagged and (self._gains_in_model or plant.events is not None)
        key = (plant.payload_kg, plant.model.nbody)
        model = None if own else self._models.get(key)
        if model is None:
            model = copy.copy(plant.model)
            model.actuator_gainprm[:, 0] = 1.0
            model.actuator_ctrllimited[:] = 0
            model.opt.disableflags |= DSBL_CONTACT
            if own:
                self._own.add(id(model))
            else:
                self._models[key] = model
            data = mujoco.MjData(model)
            mujoco.mj_step(model, data)  # what MuJoCo's reset on a warning leaves after a substep
            fallen = np.zeros(self.nstate)
            mujoco.mj_getState(model, data, fallen, FULL_PHYSICS)
            self._fallen[id(model)] = fallen
        return model

    # ------------------------------------------------------------------ the period
    def step(
        self,
        active: np.ndarray,
        f: np.ndarray,
        state: np.ndarray,
        qacc: np.ndarray,
        steps: np.ndarray,
    ) -> PeriodResult:
        """Control period ``steps[k]`` (0: the first) of the envs ``active`` with rotor thrusts
        ``f`` (N, clipped), after the events due at its start, updating their ``state`` rows and
        last-substep accelerations ``qacc`` (warm start) in place (both ``(len(active), ·)``)."""
        m = len(active)
        self._refresh(active)
        ev = np.flatnonzero(self._has_events[active])  # rows of the envs with events
        ev_plants = [self._plant_of(i) for i in active[ev].tolist()]
        for j in fire_due(ev_plants, steps[ev]):
            self.forget(int(active[ev[j]]))
        qpos, qvel = state[:, self.qpos], state[:, self.qvel]
        reach = self.plant0.contact_height + 2.0 * np.abs(qvel[:, 2]) * self.control_dt
        batched = qpos[:, 2] > reach  # above the contact band: no collision check can matter
        imu = np.zeros((m, 3))
        wind = np.zeros((m, 3))
        drag = np.zeros((m, 3))
        gain = np.ones(m)
        unstable = np.zeros(m, dtype=bool)
        contact_speed = np.zeros(m)
        thrusts = f.copy()

        # envs in the contact band: their own plant, exactly the single env's step
        for k in np.flatnonzero(~batched).tolist():
            i = int(active[k])
            plant = self._plant_of(i)
            d = plant.data
            mujoco.mj_setState(plant.model, d, state[k], FULL_PHYSICS)
            d.qacc_warmstart[:] = qacc[k]
            plant.wind_process.position = self.wind.position(i)  # the mirror read ahead of it
            plant.step(f[k].tolist())
            self.wind.mirror(i)
            mujoco.mj_getState(plant.model, d, state[k], FULL_PHYSICS)
            qacc[k] = d.qacc
            imu[k] = plant.imu_specific_force()
            wind[k], drag[k], gain[k] = plant.wind, plant.drag_force, plant.ground_gain
            unstable[k] = plant.unstable()
            contact_speed[k] = plant.floor_contact_speed() if d.ncon else 0.0
            thrusts[k] = plant.thrusts

        rows = np.flatnonzero(batched)
        if len(rows):
            out = (imu, wind, drag, gain)
            unstable[rows] = self._rollout_period(active, rows, f, state, qacc, out)
            if self.lagged:
                thrusts[rows] = state[rows, self.act]
        truth = {
            "payload_kg": self._payload[active],
            "mean_wind": self._mean_wind[active],
            "rotor_efficiency": np.ones((m, 4)),
            "events_fired": np.zeros(m, dtype=np.int64),
        }
        true_mass = self._true_mass[active]
        if len(ev):
            for key, value in event_truth([p.events for p in ev_plants]).items():
                truth[key][ev] = value
            true_mass[ev] = [p.true_mass for p in ev_plants]
        return PeriodResult(
            imu,
            wind,
            drag,
            gain,
            unstable,
            contact_speed,
            state[:, 0].copy(),
            thrusts,
            truth,
            true_mass,
        )

    def _rollout_period(
        self,
        active: np.ndarray,
        rows: np.ndarray,
        f: np.ndarray,
        state: np.ndarray,
        qacc: np.ndarray,
        out: tuple[np.ndarray, ...],
    ) -> np.ndarray:
        """One control period of the envs ``active[rows]`` on ``rollout``: one call per substep
        and model size signature, the drag and ground-effect wrench recomputed between calls;
        ``out`` = (imu, wind, drag, gain) rows filled.

        Returns which of them MuJoCo found unstable. ``rollout`` clears MuJoCo's warning counters,
        so the instability is read from what MuJoCo does on it: it puts the data back at the
        model's default pose at rest and finishes the substep from there without controls: a
        substep that lands exactly on that state, from anywhere but the default pose at rest, was
        unstable."""
        winds = self.wind.take(active[rows], self.substeps)
        with_events = np.flatnonzero(self._has_events[active[rows]])
        eff = None
        if len(with_events):
            runs = [self._plant_of(i).events for i in active[rows[with_events]].tolist()]
            winds[with_events] += wind_offsets(runs)
            eff = np.ones((len(rows), 4))
            eff[with_events] = [run.efficiency for run in runs]
        ids = active[rows]
        for i in ids[self._env_nbody[ids] == 0].tolist():
            self._env_model(i)
        env_models = self._env_models
        nbody = self._env_nbody[ids]
        unstable = np.zeros(len(rows), dtype=bool)
        key = nbody.tobytes()
        if key != self._plan[0]:  # the plan is a function of the sizes: kept while they stay
            self._plan = (key, lane_plan(nbody, self.nthread))
            for nb in np.unique(nbody).tolist():  # one MjData per lane and size, made beforehand
                if nb not in self._datas:
                    model = env_models[int(ids[np.flatnonzero(nbody == nb)[0]])]
                    self._datas[nb] = [mujoco.MjData(model) for _ in range(self.nthread)]
        plan = self._plan[1]

        def fly(lane: int, pieces: list[np.ndarray]) -> None:
            for g in pieces:  # one group's envs each
                r = rows[g]
                unstable[g] = self._rollout_group(
                    ids[g],
                    f[r],
                    state,
                    r,
                    qacc,
                    winds[g],
                    out,
                    None if eff is None else eff[g],
                    lane,
                )

        pending = [self._lanes.submit(fly, i, p) for i, p in enumerate(plan[1:], 1)]
        fly(0, plan[0])  # the calling thread flies the first lane
        for job in pending:
            job.result()
        return unstable

    def _rollout_group(
        self,
        ids: np.ndarray,
        f: np.ndarray,
        state: np.ndarray,
        rows: np.ndarray,
        qacc: np.ndarray,
        winds: np.ndarray,
        out: tuple[np.ndarray, ...],
        eff: np.ndarray | None,
        lane: int = 0,
    ) -> np.ndarray:
        """:meth:`_rollout_period` for the envs ``ids`` (their models share one size signature),
        on lane ``lane`` (its own ``rollout`` pool and ``MjData``; it writes only its own
        ``rows``): the period's substeps, one ``rollout`` call each (checks skipped: every array
        is built here with the shapes ``rollout`` needs, contiguous float64), the compiled
        :func:`~residual_quad.envs.substep.lane_wrench` before and
        :func:`~residual_quad.envs.substep.lane_after` after each; ``eff``: the rotors'
        efficiencies, ``(n, 4)``, or ``None`` (no events)."""
        imu_out, wind_out, drag_out, gain_out = out
        at = contiguous(rows)
        plant0 = self.plant0
        env_models = self._env_models
        models = [env_models[i] for i in ids.tolist()]
        n = len(rows)
        nb = models[0].nbody
        data = self._datas[nb][lane]
        x0 = NUM_ROTORS + 6 * plant0.body_id  # the body's force in the xfrc_applied block
        control = np.zeros((n, 1, NUM_ROTORS + 6 * nb))
        s = np.ascontiguousarray(take_rows(state, at))
        result = np.empty((n, 1, self.nstate))
        no_sensors = np.empty((n, 1, 0))
        warm = np.ascontiguousarray(take_rows(qacc, at))
        fallen = self._env_fallen  # row ids[j]: env ids[j]'s
        unstable = np.zeros(n, dtype=bool)
        before = np.zeros(n, dtype=bool)  # at the default pose at rest before the substep
        force = np.empty((n, 3))  # N, world: the substep's drag
        gain = np.empty(n)  # the substep's ground-effect gain
        rot = np.empty((n, 9))  # the substep's rotation, row-major
        fk = f.copy()
        compiled = self.compiled
        own_rows = (  # the numpy wrench writes their gains into their models in Python
            [j for j, model in enumerate(models) if id(model) in self._own]
            if self._own and not compiled
            else []
        )
        effs = np.ones((n, NUM_ROTORS)) if eff is None else eff
        gain_at = self._env_gain_at[ids]  # the lagged envs' own models' gains (0: none)
        iq, iv = self.qpos.start, self.qvel.start
        nv = self.qvel.stop - iv
        for sub in range(self.substeps):
            if sub == self.substeps - 1:
                v_before = s[:, iv : iv + 3].copy()
            if compiled:  # no GIL held: the other lanes run their Python meanwhile
                gains = lane_wrench(
                    s,
                    iq,
                    iv,
                    nv,
                    self._qpos0,
                    winds,
                    sub,
                    self._params,
                    effs,
                    fk,
                    self.lagged,
                    gain_at,
                    self._gain_stride,
                    control,
                    x0,
                    before,
                    force,
                    gain,
                    rot,
                )
            else:
                gains = self._numpy_wrench(
                    s, winds[:, sub], eff, fk, control, x0, before, force, gain, rot
                )
                for j in own_rows:  # lagged rotors: the gains sit in the env's own model
                    models[j].actuator_gainprm[:, 0] = gains[j]
            self._pools[lane].rollout(
                models,
                [data],
                s,
                control,
                control_spec=CONTROL_SPEC,
                nstep=1,
                initial_warmstart=warm,
                state=result,
                sensordata=no_sensors,
                skip_checks=True,
            )
            if compiled:
                lane_after(result, s, fallen, ids, before, unstable, fk)
            else:
                s[:] = result[:, 0, :]
                unstable |= (s == fallen[ids]).all(axis=1) & ~before
                fk[unstable] = 0.0  # MuJoCo's reset cleared the controls for the rest of the period
        v_after = s[:, iv : iv + 3]
        acc = (v_after - v_before) / self.physics_dt  # m/s², world: Euler's qacc
        imu_out[at] = np.array(specific_force(acc.T, list(rot.T), plant0.airframe.gravity)).T
        qacc[at, 0:3] = acc
        state[at] = s
        wind_out[at] = winds[:, -1]
        drag_out[at] = force
        gain_out[at] = gain
        return unstable

    def _numpy_wrench(
        self,
        s: np.ndarray,
        w: np.ndarray,
        eff: np.ndarray | None,
        fk: np.ndarray,
        control: np.ndarray,
        x0: int,
        before: np.ndarray,
        force: np.ndarray,
        gain: np.ndarray,
        rot: np.ndarray,
    ) -> np.ndarray:
        """:func:`~residual_quad.envs.substep.lane_wrench` in numpy, on the single env's formulas
        (``quat_to_rot``, ``drag_world_force``, ``GroundEffect.gain``, ``rotor_gains``) with the
        substep's winds ``w`` ``(n, 3)``: the reference the compiled wrench is tested and
        benchmarked against (:attr:`compiled` false); it holds the GIL throughout."""
        plant0 = self.plant0
        drag_model, ge = plant0.drag, plant0.ground_effect
        qpos, qvel = s[:, self.qpos], s[:, self.qvel]
        before[:] = (qpos == self._qpos0).all(axis=1) & (qvel == 0.0).all(axis=1)
        r = quat_to_rot(*qpos[:, 3:7].T)
        fx, fy, fz = drag_world_force(
            r,
            qvel[:, 0] - w[:, 0],
            qvel[:, 1] - w[:, 1],
            qvel[:, 2] - w[:, 2],
            drag_model.k_h,
            drag_model.k_v,
            drag_model.c_lin,
            xp=ARRAYS,
        )
        g = ge.gain(qpos[:, 2]) if ge is not None else np.ones(len(s))
        gains = g[:, None] if eff is None else rotor_gains(g[:, None], eff)
        if not self.lagged:
            control[:, 0, 0:NUM_ROTORS] = gains * fk
        else:  # MuJoCo's filter takes the command; the gains sit in the env's own model
            control[:, 0, 0:NUM_ROTORS] = fk
        control[:, 0, x0] = fx
        control[:, 0, x0 + 1] = fy
        control[:, 0, x0 + 2] = fz
        force[:, 0], force[:, 1], force[:, 2] = fx, fy, fz
        gain[:] = g
        rot[:] = np.stack(r, axis=1)
        return np.broadcast_to(gains, (len(s), NUM_ROTORS))
