"""``rquad bench --sections period``: where one control period of the batched physics goes.

N plants (``extra`` payload, ``windy``, ground effect, hovering at 2 m on open-loop hover thrust)
on one ``rollout`` thread, each variant timed per env-step in alternating rounds (medians over
rounds; ratios within a round, so the machine's drift cancels):

* one ``rollout`` call of ``nstep = substeps`` with a constant control: the engine's own floor of
  a period (every substep in C, one call);
* ``substeps`` calls of ``nstep = 1``, the same constant control: the env's call pattern without the
  numpy between the calls; the difference to the row above is the cost of the extra calls;
* the period (:class:`~residual_quad.envs.vector_physics.BatchPhysics.step`): those calls plus
  the drag, wind and ground-effect gain recomputed before every substep by the compiled substep
  wrench (:mod:`~residual_quad.envs.substep`);
* the same period with the numpy wrench (``BatchPhysics.compiled`` false, the reference with the
  same bits): what the period cost before the wrench was compiled;
* the one-call bound: the drag of every substep computed before the period from its start state
  (each substep's own wind sample) and one ``nstep = substeps`` call — what a period in one engine
  call that keeps the plant's formulas would cost. It does not keep the rows: the study
  :mod:`residual_quad.evaluation.studies.engine_period` re-flies committed rows that way.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow

if TYPE_CHECKING:
    from residual_quad.envs.plant import QuadrotorPlant

SECTION = "period"


def _plants(n: int) -> list:
    from residual_quad.envs.disturbances import GroundEffect, WindModel, resolve_payload
    from residual_quad.envs.plant import QuadrotorPlant

    plants = []
    for i in range(n):
        p = QuadrotorPlant(
            payload_kg=resolve_payload("extra"),
            wind=WindModel.from_spec("windy"),
            ground_effect=GroundEffect(),
        )
        p.reset(np.random.default_rng(i), np.array([0.0, 0.0, 2.0]), 0.0)
        plants.append(p)
    return plants


def rollout_model(plant: QuadrotorPlant) -> mujoco.MjModel:
    """As the vector env's physics prepares it: unit actuator gain, no clamp, contacts off."""
    from residual_quad.envs.plant import DSBL_CONTACT

    model = copy.copy(plant.model)
    model.actuator_gainprm[:, 0] = 1.0
    model.actuator_ctrllimited[:] = 0
    model.opt.disableflags |= DSBL_CONTACT
    return model


class _Variants:
    """The four ways of flying one period of ``n`` plants, each a callable from the same start
    state (restored before every call, so every call flies the same period)."""

    def __init__(self, n: int):
        import mujoco.rollout

        from residual_quad.envs.disturbances import drag_world_force
        from residual_quad.envs.rotations import quat_to_rot
        from residual_quad.envs.vector_physics import CONTROL_SPEC, FULL_PHYSICS, BatchPhysics
        from residual_quad.envs.xp import ARRAYS

        self.n = n
        self.control_spec = CONTROL_SPEC
        plants = _plants(n)
        p0 = plants[0]
        self.substeps = p0.substeps
        self.physics = BatchPhysics(n, p0, lambda i: plants[i], nthread=1)
        self.active = np.arange(n)
        self.first_period = np.zeros(n, dtype=np.int64)  # every env flies its period 0
        for i in range(n):  # as the vector env does after a reset
            self.physics.wind.mirror(i)
        nstate = mujoco.mj_stateSize(p0.model, FULL_PHYSICS)
        self.state0 = np.empty((n, nstate))
        for i, p in enumerate(plants):
            mujoco.mj_getState(p.model, p.data, self.state0[i], FULL_PHYSICS)
        self.qacc0 = np.array([p.data.qacc for p in plants])
        hover = p0.true_mass * p0.airframe.gravity / 4.0
        self.f = np.full((n, 4), hover)
        model = rollout_model(p0)
        self.models = [model] * n
        self.datas = [mujoco.MjData(model)]
        self.pool = mujoco.rollout.Rollout(nthread=0)
        nc = 4 + 6 * model.nbody
        self.x0 = 4 + 6 * p0.body_id
        self.control1 = np.zeros((n, 1, nc))
        self.control1[:, 0, :4] = hover * p0.ground_effect.gain(2.0)
        self.control_all = np.repeat(self.control1, self.substeps, axis=1)
        self.result1 = np.empty((n, 1, nstate))
        self.result_all = np.empty((n, self.substeps, nstate))
        self.no_sensors1 = np.empty((n, 1, 0))
        self.no_sensors_all = np.empty((n, self.substeps, 0))
        self.p0, self.drag_world_force, self.quat_to_rot = p0, drag_world_force, quat_to_rot
        self.xp = ARRAYS
        self.state = self.state0.copy()
        self.qacc = self.qacc0.copy()

    def _call(self, s, control, result, sensors, nstep: int) -> None:
        self.pool.rollout(
            self.models,
            self.datas,
            s,
            control,
            control_spec=self.control_spec,
            nstep=nstep,
            initial_warmstart=self.qacc0,
            state=result,
            sensordata=sensors,
            skip_checks=True,
        )

    def one_call(self) -> None:
        self._call(
            self.state0, self.control_all, self.result_all, self.no_sensors_all, self.substeps
        )

    def substep_calls(self) -> None:
        s = self.state0
        for _ in range(self.substeps):
            self._call(s, self.control1, self.result1, self.no_sensors1, 1)
            s = self.result1[:, 0, :].copy()

    def period(self) -> None:
        self.state[:] = self.state0
        self.qacc[:] = self.qacc0
        self.physics.step(self.active, self.f, self.state, self.qacc, self.first_period)

    def numpy_period(self) -> None:
        self.physics.compiled = False
        try:
            self.period()
        finally:
            self.physics.compiled = True

    def frozen_one_call(self) -> None:
        """Drag of each substep from the start state and that substep's wind, one call."""
        s = self.state0
        qpos, qvel = s[:, self.physics.qpos], s[:, self.physics.qvel]
        winds = self.physics.wind.take(self.active, self.substeps)
        drag = self.p0.drag
        rot = self.quat_to_rot(*qpos[:, 3:7].T)
        gain = self.p0.ground_effect.gain(qpos[:, 2])
        c = self.control_all
        c[:, :, 0:4] = gain[:, None, None] * self.f[:, None, :]
        for k in range(self.substeps):
            w = winds[:, k]
            fx, fy, fz = self.drag_world_force(
                rot,
                qvel[:, 0] - w[:, 0],
                qvel[:, 1] - w[:, 1],
                qvel[:, 2] - w[:, 2],
                drag.k_h,
                drag.k_v,
                drag.c_lin,
                xp=self.xp,
            )
            c[:, k, self.x0], c[:, k, self.x0 + 1], c[:, k, self.x0 + 2] = fx, fy, fz
        self._call(s, c, self.result_all, self.no_sensors_all, self.substeps)

    def close(self) -> None:
        self.physics.close()
        self.pool.close()


NAMES = {
    "one_call": "1 rollout call of nstep = substeps (engine floor)",
    "substep_calls": "substeps rollout calls of nstep = 1",
    "period": "the period: those calls + the compiled wrench",
    "numpy_period": "the period with the numpy wrench (before)",
    "frozen_one_call": "one-call bound: drag frozen per period, 1 call",
}


def _time(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def run(quick: bool = False) -> list[BenchRow]:
    sizes = (1, 64) if quick else (1, 64, 256)
    rounds = 5 if quick else 11
    rows: list[BenchRow] = []
    for n in sizes:
        v = _Variants(n)
        calls = max(5, 2000 // n)
        fns = {k: getattr(v, k) for k in NAMES}
        for fn in fns.values():  # warm-up
            _time(fn, 3)
        per: dict[str, list[float]] = {k: [] for k in NAMES}
        for _ in range(rounds):
            for k, fn in fns.items():
                per[k].append(_time(fn, calls) / n * 1e6)  # µs per env-step
        v.close()
        base = np.array(per["one_call"])
        for k, label in NAMES.items():
            t = np.array(per[k])
            rows.append(
                BenchRow(
                    SECTION,
                    f"N = {n}: {label}",
                    float(np.median(t)),
                    None if k == "one_call" else float(np.median(t / base)),
                    "" if k == "one_call" else "1 call",
                )
            )
        extra = (np.array(per["substep_calls"]) - base) / (v.substeps - 1)
        rows.append(
            BenchRow(SECTION, f"N = {n}: cost of one more rollout call", float(np.median(extra)))
        )
    return rows
