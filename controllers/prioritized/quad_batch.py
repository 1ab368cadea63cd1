"""``hnewton`` / ``hnewton_rls`` for N envs: the thrust-vector Newton cycle and the allocation as
array computations over the batch.

Each control step solves two small box-topped HLSPs per env (:mod:`.quad`). In flight almost every
one stops at the single solver's first candidate -- the task rows stack to a square matrix whose
exact solution lies inside the box, and the Newton levels need no augmentation -- which
:meth:`~.box_hlsp.BatchedBoxHLSP.square` computes for all envs at once. The envs where it does not
(a bound active, a GN slack switching the Newton augmentation on, a singular Jacobian) run the
single controller's cycle on their own row of the state: the same code on the same numbers. The
task values, the thrust direction, the cofactor inverse and the attitude torque are the single
controller's formulas on arrays (:mod:`.thrust_vector`, :mod:`~residual_quad.controllers.
attitude`), so every action equals the single controller's bit for bit
(``tests/controllers/prioritized/test_quad_batch.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext, to_rotor_action
from residual_quad.controllers.batch import check_n_envs
from residual_quad.controllers.prioritized.box_hlsp import BatchedBoxHLSP
from residual_quad.controllers.prioritized.thrust_vector import (
    ARRAYS,
    HNewtonQuadParams,
    PrioritizedAllocator,
    ThrustVectorNewton,
    inverse3,
    thrust_direction_terms,
    thrust_vector_terms,
)
from residual_quad.controllers.residual.config import ResidualConfig, residual_config
from residual_quad.controllers.residual.estimator import BatchedResidualEstimator
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import EstimatorRows, EstimatorState
from residual_quad.controllers.trackers import DEFAULT_KD, DEFAULT_KP, BatchedTracker
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

__all__ = [
    "BatchedHNewtonRLSTracker",
    "BatchedHNewtonTracker",
    "BatchedPrioritizedAllocator",
    "BatchedThrustVectorNewton",
    "residual_settings",
]

log = logging.getLogger(__name__)

#: the keywords of ``hnewton`` itself; every other keyword of ``hnewton_rls`` is a residual setting
HNEWTON_KEYWORDS = frozenset(
    {"method", "kp", "kd", "attitude", *HNewtonQuadParams.__dataclass_fields__}
)


def residual_settings(
    residual: Mapping[str, Any] | None, kw: Mapping[str, Any]
) -> tuple[ResidualConfig, ResidualMLP | None, dict[str, Any]]:
    """``hnewton_rls``'s keywords split: the residual config (``residual`` and every keyword
    that is not :data:`HNEWTON_KEYWORDS`, as ``geo_rls`` takes them), the network (``None``:
    the config's weights) and the ``hnewton`` keywords, whose ``kp``/``kd`` default to the
    residual configuration's."""
    est_kw = dict(residual or {})
    est_kw.update({k: v for k, v in kw.items() if k not in HNEWTON_KEYWORDS})
    own = {k: v for k, v in kw.items() if k in HNEWTON_KEYWORDS}
    network = est_kw.pop("network", None)
    cfg = residual_config(est_kw.pop("config", None), **est_kw)
    own.setdefault("kp", cfg.kp)
    own.setdefault("kd", cfg.kd)
    return cfg, network, own


class BatchedThrustVectorNewton:
    """:class:`~.thrust_vector.ThrustVectorNewton` for N envs: one cycle per env per
    :meth:`step`, with per-env state in arrays (row = env).

    Args:
        airframe: nominal airframe; dt: control period (s); params: as the single cycle.
        n_envs: number of envs.
    """

    #: attributes holding one row of state per env
    ROW_STATE = ("lam", "has_lam", "B", "prev_q", "prev_J", "has_prev", "augmented", "gn_norms")

    def __init__(
        self, airframe: Airframe, dt: float, params: HNewtonQuadParams, n_envs: int
    ) -> None:
        #: the single cycle: the settings, and the solver of the rows the array path leaves
        self.single = s = ThrustVectorNewton(airframe, dt, params)
        self.p, self.k, self.frame = s.p, s.k, airframe
        self.q_lower, self.q_upper = s.q_lower, s.q_upper
        self.solver = BatchedBoxHLSP(s.solver, n_envs)
        self.gn_solver = BatchedBoxHLSP(s.gn_solver, n_envs)
        n = n_envs
        self.lam = np.zeros((n, 4))  # λ_{0,0}, λ_{0,1}, λ_{1,1} (2) of the last solve
        self.has_lam = np.zeros(n, dtype=bool)
        self.B = np.zeros((n, 2, 3, 3))  # BFGS matrix per level
        self.prev_q = np.zeros((n, 3))
        self.prev_J = np.zeros((n, 3, 3))  # ∂a/∂q at prev_q (rows x, y, z)
        self.has_prev = np.zeros(n, dtype=bool)
        self.augmented = np.zeros((n, 2), dtype=bool)
        self.gn_norms = np.zeros((n, 2))
        self.reset()

    def reset(self, index: int | slice | np.ndarray = slice(None)) -> None:
        """Forget multipliers, BFGS matrices, warm faces and the previous step of ``index``."""
        self.lam[index] = 0.0
        self.has_lam[index] = False
        self.B[index] = self.single.settings.bfgs_b0 * np.eye(3)
        self.prev_q[index] = 0.0
        self.prev_J[index] = 0.0
        self.has_prev[index] = False
        self.augmented[index] = False
        self.gn_norms[index] = 0.0
        self.solver.reset(index)
        self.gn_solver.reset(index)

    def row_state(self) -> list[tuple[Any, str]]:
        """``(object, attribute)`` of every per-env state array."""
        return [(self, a) for a in self.ROW_STATE] + [
            (self.solver, "faces"),
            (self.gn_solver, "faces"),
        ]

    def step(self, q: np.ndarray, a_des: np.ndarray) -> np.ndarray:
        """Velocities ``q̇`` (N, 3) (N/s, rad/s, rad/s) of one cycle per env at ``q`` (N, 3)
        towards ``a_des`` (N, 3) (heading frame, m/s²)."""
        n = q.shape[0]
        a, J, _ = thrust_vector_terms(ARRAYS, q[:, 0], q[:, 1], q[:, 2], *self._mass_gravity)
        J = np.stack([np.stack(row, axis=1) for row in J], axis=1)  # (N, 3, 3)
        e = np.stack(a, axis=1) - a_des
        lo, up = self.single.velocity_box(q)
        inv, ok = inverse3(ARRAYS, (*J[:, 2].T, *J[:, 0].T, *J[:, 1].T))
        levels = [(J[:, 2:3], -self.k * e[:, 2:3]), (J[:, 0:2], -self.k * e[:, 0:2])]
        gn_only = self.p.method == "gn"
        solver = self.solver if gn_only else self.gn_solver
        x, slacks, done = solver.square(lo, up, levels, np.stack(inv, 1).reshape(n, 3, 3), ok)
        norms = np.stack(
            [np.sqrt(np.matmul(w[:, None], w[:, :, None])[:, 0, 0]) for w in slacks], 1
        )
        if not gn_only:  # a switched-on level is augmented: that env's cycle runs on its own
            done &= ~np.broadcast_to(self.single.switch_on(norms), norms.shape).any(axis=1)
        if self.p.method == "bfgs":
            for i in np.flatnonzero(done).tolist():
                self._bfgs_row(i, q[i], J[i])
        solver.accept(done)
        if self.single.solver.multipliers:  # the square point's multipliers: its slacks
            self.lam[done] = np.concatenate([slacks[0], np.zeros((n, 1)), slacks[1]], 1)[done]
            self.has_lam[done] = True
        self.augmented[done] = False
        self.gn_norms[done] = norms[done]
        self.prev_q[done] = q[done]
        self.prev_J[done] = J[done]
        self.has_prev[done] = True
        for i in np.flatnonzero(~done).tolist():
            x[i] = self._step_row(i, q[i], a_des[i])
        return x

    @property
    def _mass_gravity(self) -> tuple[float, float]:
        return self.frame.mass, self.frame.gravity

    # -- one env on the single cycle -------------------------------------------------------------
    def _load(self, i: int) -> ThrustVectorNewton:
        """The single cycle holding env ``i``'s multipliers, BFGS matrices and previous step."""
        s = self.single
        lam = self.lam[i]
        s.lam = [[lam[0:1].copy()], [lam[1:2].copy(), lam[2:4].copy()]] if self.has_lam[i] else None
        s.B = [self.B[i, 0].copy(), self.B[i, 1].copy()]
        if self.has_prev[i]:
            s.prev_q = self.prev_q[i].copy()
            s.prev_J = [self.prev_J[i, 2:3].copy(), self.prev_J[i, 0:2].copy()]
        else:
            s.prev_q, s.prev_J = None, None
        return s

    def _bfgs_row(self, i: int, q: np.ndarray, J: np.ndarray) -> None:
        """Env ``i``'s BFGS update with the single cycle's code (before its square solve)."""
        s = self._load(i)
        s.bfgs_update(q, [(None, J[2:3], None), (None, J[0:2], None)])
        self.B[i] = s.B

    def _step_row(self, i: int, q: np.ndarray, a_des: np.ndarray) -> np.ndarray:
        """The single cycle on env ``i``'s row of the state; stores the state it ends with."""
        s = self._load(i)
        with self.solver.row(i), self.gn_solver.row(i):
            x = s.step(q, a_des)
        if s.lam is None:
            self.has_lam[i] = False
        else:
            self.lam[i] = np.concatenate([s.lam[0][0], s.lam[1][0], s.lam[1][1]])
            self.has_lam[i] = True
        self.B[i] = s.B
        self.prev_q[i] = s.prev_q
        self.prev_J[i, 2:3], self.prev_J[i, 0:2] = s.prev_J
        self.has_prev[i] = True
        self.augmented[i] = s.augmented
        self.gn_norms[i] = s.gn_norms
        return x


class BatchedPrioritizedAllocator:
    """:class:`~.thrust_vector.PrioritizedAllocator` for N envs (one warm face per env)."""

    def __init__(self, airframe: Airframe, n_envs: int) -> None:
        self.single = s = PrioritizedAllocator(airframe)
        self.solver = BatchedBoxHLSP(s.solver, n_envs)
        n = n_envs
        self._A = [np.broadcast_to(A, (n, *A.shape)) for A in (s.A_rp, s.A_T, s.A_yaw)]
        self._inverse = np.broadcast_to(s.inverse, (n, 4, 4))
        self._lower = np.broadcast_to(s.lower, (n, 4))
        self._upper = np.broadcast_to(s.upper, (n, 4))

    def reset(self, index: int | slice | np.ndarray = slice(None)) -> None:
        """Forget the warm faces of ``index``."""
        self.solver.reset(index)

    def __call__(
        self, thrust: np.ndarray, torque: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """Rotor thrusts (N, 4) (N) for collectives ``thrust`` (N,) (N) and body torques (three
        (N,) components, N·m)."""
        tx, ty, tz = torque
        A_rp, A_T, A_yaw = self._A
        b = [np.stack([tx, ty], 1), thrust[:, None], tz[:, None]]
        x, _, done = self.solver.square(
            self._lower, self._upper, list(zip((A_rp, A_T, A_yaw), b, strict=True)), self._inverse
        )
        self.solver.accept(done)
        for i in np.flatnonzero(~done).tolist():
            with self.solver.row(i):
                x[i] = self.single(float(thrust[i]), (float(tx[i]), float(ty[i]), float(tz[i])))
        return x


# --------------------------------------------------------------------------- controllers
class BatchedHNewtonTracker(BatchedTracker):
    """``hnewton`` for N envs: per env the thrust vector, its Newton state and the warm faces.

    Args: as :class:`~.quad.HNewtonTracker`, plus ``n_envs``. Every option is vectorized except
    ``switch="always"`` (each step re-solves every env's augmented HLSP on its own), which the
    factory flies as N single controllers, with a log line.
    """

    name = "hnewton"

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        method: str = "newton",
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
        **params: Any,
    ):
        n = check_n_envs(n_envs)
        context = context or ControlContext()
        self.params = HNewtonQuadParams(method=method, **params)
        self.newton = BatchedThrustVectorNewton(
            context.airframe, context.control_dt, self.params, n
        )
        self.alloc = BatchedPrioritizedAllocator(context.airframe, n)
        self.q = np.zeros((n, 3))  # commanded thrust vector (N, rad, rad)
        self.qdot = np.zeros((n, 3))
        self.last_thrust = np.zeros(n)  # N
        super().__init__(context, n, kp=kp, kd=kd, attitude=attitude)

    @classmethod
    def vectorizes(cls, options: Mapping[str, Any]) -> bool:
        """Whether the batch implements ``options`` (bad ones raise the single's error here)."""
        params = {k: v for k, v in options.items() if k in HNewtonQuadParams.__dataclass_fields__}
        if HNewtonQuadParams(**params).switch == "always":
            log.warning(
                "%s with switch='always' flies one single controller per env: every step "
                "augments every level, which only the single cycle solves",
                cls.name,
            )
            return False
        return True

    @property
    def method(self) -> str:
        return self.params.method

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.q[index] = (self.airframe.hover_thrust, 0.0, 0.0)
        self.qdot[index] = 0.0
        self.last_thrust[index] = self.airframe.hover_thrust
        self.newton.reset(index)
        self.alloc.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        return [
            *super()._row_state(),
            (self, "q"),
            (self, "qdot"),
            (self, "last_thrust"),
            *self.newton.row_state(),
            (self.alloc.solver, "faces"),
        ]

    def _act_batch(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`~.quad.HNewtonTracker.act` for a finite batch (N, 36) → actions (N, 4)."""
        R = obs[:, L.rot].reshape(-1, 3, 3)
        a_cmd = self.desired_accel(
            obs, obs[:, L.ref_pos] - obs[:, L.pos], obs[:, L.ref_vel] - obs[:, L.vel]
        )
        est = self.residual_world(obs, R, a_cmd)
        self.last_residual = est
        ax, ay, az = (a_cmd - est).T
        yaw = obs[:, L.ref_yaw]
        cy, sy = np.cos(yaw), np.sin(yaw)
        a_head = np.stack([cy * ax + sy * ay, -sy * ax + cy * ay, az], axis=1)
        qdot = self.newton.step(self.q, a_head)
        self.qdot = qdot
        self.q = np.clip(self.q + self.dt * qdot, self.newton.q_lower, self.newton.q_upper)
        b3 = thrust_direction_terms(ARRAYS, self.q[:, 1], self.q[:, 2], yaw)
        r = obs[:, L.rot].T  # 9 rows of N values, body → world row-major
        thrust = self.q[:, 0] * (b3[0] * r[2] + b3[1] * r[5] + b3[2] * r[8])
        thrust = np.clip(thrust, 0.0, self.airframe.max_thrust)
        self.last_thrust = thrust
        torque = self.inner.attitude_torque(r, obs[:, L.omega_b], b3, yaw, obs[:, L.ref_yaw_rate])
        self.last_a_cmd = a_cmd
        return to_rotor_action(self.alloc(thrust, torque), self.airframe)


class BatchedHNewtonRLSTracker(EstimatorState, EstimatorRows, BatchedHNewtonTracker):
    """``hnewton_rls`` for N envs: batched ``hnewton`` fed by one
    :class:`~residual_quad.controllers.residual.estimator.BatchedResidualEstimator` (every
    residual setting vectorized, as for ``geo_rls``).

    Args: as :class:`~.quad.HNewtonRLSTracker`, plus ``n_envs``.
    """

    name = "hnewton_rls"

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        residual: dict[str, Any] | None = None,
        **kw: Any,
    ):
        context = context or ControlContext()
        self.config, network, kw = residual_settings(residual, kw)
        self.estimator = BatchedResidualEstimator(
            context, self.config, check_n_envs(n_envs), network, learn=True
        )
        super().__init__(context, n_envs, **kw)

    @classmethod
    def vectorizes(cls, options: Mapping[str, Any]) -> bool:
        options = dict(options)
        _, _, own = residual_settings(options.pop("residual", None), options)
        return super().vectorizes(own)
