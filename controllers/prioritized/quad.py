"""``hnewton`` / ``hnewton_rls``: prioritized quadrotor control on the hierarchical Newton method.

Why: the geometric tracker's proportional mixer lets a large yaw error eat the roll/pitch
authority (the 90°-yaw-start flip of [RES §9]), and demands beyond the thrust/tilt envelope
are handled by ad-hoc clipping. Here a strict priority order is solved instead, in two stages
per control step:

1. **Thrust-vector level** (:class:`ThrustVectorNewton`). The "configuration" is the commanded
   thrust vector ``q = (c, φ, θ)``: collective thrust ``c`` (N) and the *projected* tilt angles
   at the reference heading ψ, i.e. the thrust direction is ``Rz(ψ)·(tan θ, −tan φ, 1)/D`` with
   ``D = √(1 + tan²φ + tan²θ)`` (θ tilts it forward, φ to the right, as roll and pitch do). The
   nominal acceleration is ``a(q) = c/m·b3(q) − g·e_z``. Levels, highest first:

   * hard: the trust region on ``q̇`` (``|ċ| <= rate_thrust``, ``|φ̇|, |θ̇| <= rate_tilt``)
     intersected with the box ``c ∈ [c_min, c_max]``, ``|φ|, |θ| <= max_tilt`` (reached in one
     step at most);
   * vertical acceleration ``a_z(q) = a_des,z``;
   * horizontal acceleration ``a_xy(q) = a_des,xy`` (heading frame);

   with ``a_des = a_ref + k_p e_p + k_d e_v − Δâ`` (``Δâ`` the residual estimate of
   ``hnewton_rls``, zero for ``hnewton``). One hierarchical Newton cycle per control step
   ([HN eq. 20–21]; ``docs/hnewton.md`` M3–M5), on the same switching, factors, BFGS update and
   multiplier scaling as :class:`~.hnewton.HierarchicalNewton` -- both are a
   :class:`~.newton.NewtonCore`; variants ``gn``, ``lm``, ``bfgs``, ``newton``), solved with the
   exact small-problem solver :class:`~.box_hlsp.BoxHLSP`, then ``q ← q + Δt·q̇``.

   The projected angles make the tilt box a square in ``(tan θ, tan φ)``; with the vertical task
   met the horizontal acceleration is ``(g + a_z)·(tan θ, −tan φ)``, so the reachable set is
   convex and the least-squares horizontal optimum under the bound is unique (per-axis clip in
   the heading frame when the thrust bound does not bind). The largest tilt is
   ``atan(√2·tan(max_tilt))`` (49.9° for the default 40°), on the diagonal.

2. **Prioritized allocation** (:class:`PrioritizedAllocator`): HLSP over the four rotor thrusts,
   rotor bounds ≻ roll/pitch torque ≻ collective thrust ≻ yaw torque, so yaw is always given up
   first and a yaw error can never squeeze roll/pitch.

The attitude PD between them is the shared geometric law of
:class:`~residual_quad.controllers.attitude.InnerLoop` (same gains) towards the attitude whose
body z axis is the commanded thrust direction and whose heading is ψ.

**One law for one vehicle and N envs.** Both controllers are tracker laws
(:class:`~residual_quad.controllers.trackers.Tracker`): the thrust vector, the Newton cycle's
memory and the allocation's warm faces are the ``prioritized`` part of the tracker's state
(:class:`PrioritizedState`, one row per env), and the stage above is the tracker's inner stage
(:meth:`HNewtonTracker.inner_command`: the outer loop, the residual estimate and the torque
feed-forward are the tracker's). One vehicle (:meth:`HNewtonTracker.inner_command_one`) runs
the single cycle and allocator on its row, in float code. N envs (the sweep's and the vector
env's path) run the batch algorithm of the solvers
(:class:`~.thrust_vector.BatchedThrustVectorNewton`,
:class:`~.thrust_vector.BatchedPrioritizedAllocator`): in flight almost every small HLSP stops
at the single solver's first candidate -- the task rows stack to a square matrix whose exact
solution lies inside the box, and no Newton level needs augmenting -- which
:meth:`~.box_hlsp.BatchedBoxHLSP.square` computes for all envs at once; the envs where it does
not (a bound active, a GN slack switching the augmentation on, a singular Jacobian, every env
with ``switch="always"``) run the single cycle on their own row of the state. The task values,
the thrust direction, the cofactor inverse and the attitude torque are the single cycle's
formulas on arrays (:mod:`.thrust_vector`), so the actions of N envs equal one vehicle's bit for
bit (``tests/controllers/prioritized/test_quad_batch.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.attitude import LAG_TUNED_GAINS, AttitudeGains
from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.law import replace, tree_map
from residual_quad.controllers.options import Domain, Section
from residual_quad.controllers.prioritized.thrust_vector import (
    HNEWTON_PARAM_OPTIONS,
    BatchedPrioritizedAllocator,
    BatchedThrustVectorNewton,
    HNewtonQuadParams,
    PrioritizedAllocator,
    ThrustVectorNewton,
    ThrustVectorState,
    thrust_direction,
    thrust_direction_terms,
    thrust_vector_tasks,
)
from residual_quad.controllers.residual.config import ResidualConfig, residual_config
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import (
    NETWORK_OBJECTIVE,
    NETWORK_SCENARIOS,
    RESIDUAL_TRACKER_OPTIONS,
    EstimatorParts,
    lag_settings,
)
from residual_quad.controllers.trackers import (
    DEFAULT_KD,
    DEFAULT_KP,
    Tracker,
    TrackerState,
)
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.xp import ARRAYS

__all__ = [
    "HNEWTON_PARAM_OPTIONS",
    "HNewtonQuadParams",
    "HNewtonRLSTracker",
    "HNewtonTracker",
    "PrioritizedAllocator",
    "PrioritizedState",
    "ThrustVectorNewton",
    "thrust_direction",
    "residual_settings",
    "thrust_vector_tasks",
]


#: the keywords of ``hnewton`` itself (the tracker's and the Newton step's); every other keyword
#: of ``hnewton_rls`` is a residual setting
HNEWTON_KEYWORDS = frozenset({"method", *Tracker.OPTIONS, *HNewtonQuadParams.__dataclass_fields__})


def residual_settings(
    residual: Mapping[str, Any] | None,
    kw: Mapping[str, Any],
    context: ControlContext | None = None,
) -> tuple[ResidualConfig, ResidualMLP | None, dict[str, Any]]:
    """``hnewton_rls``'s keywords split: the residual config (``residual`` and every keyword
    that is not :data:`HNEWTON_KEYWORDS`, as ``geo_rls`` takes them, with the residual
    trackers' behind-lag settings for ``context``'s rotors), the network (``None``: the
    config's weights) and the ``hnewton`` keywords, whose ``kp``/``kd`` default to the
    residual configuration's."""
    est_kw = dict(residual or {})
    est_kw.update({k: v for k, v in kw.items() if k not in HNEWTON_KEYWORDS})
    own = {k: v for k, v in kw.items() if k in HNEWTON_KEYWORDS}
    network = est_kw.pop("network", None)
    config = est_kw.pop("config", None)
    est_kw = lag_settings(context or ControlContext(), config, est_kw)
    cfg = residual_config(config, **est_kw)
    own.setdefault("kp", cfg.kp)
    own.setdefault("kd", cfg.kd)
    return cfg, network, own


class PrioritizedState(NamedTuple):
    """The ``prioritized`` part of an ``hnewton`` tracker's state, one row per env (one vehicle:
    the row without the env axis, flags as 0-d arrays; updated in place by the law)."""

    q: np.ndarray  # (n, 3): commanded thrust vector (N, rad, rad)
    qdot: np.ndarray  # (n, 3): its last velocity (N/s, rad/s, rad/s)
    newton: ThrustVectorState  # the thrust-vector Newton cycle's memory
    alloc_face: np.ndarray  # (n, 4) int: the warm face of the allocation


# --------------------------------------------------------------------------- controllers
class HNewtonTracker(Tracker):
    """``hnewton``: position PD + feed-forward → thrust-vector Newton step → attitude PD →
    prioritized allocation (see the module docstring).

    Args:
        context: nominal airframe and control period.
        method: ``gn``, ``lm``, ``bfgs`` or ``newton``.
        kp: position gain, 1/s² (same as ``geo``).
        kd: velocity gain, 1/s.
        attitude: attitude PD gains (those of the shared inner loop by default).
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal; ``None``: the
            context's; see :class:`~residual_quad.controllers.trackers.Tracker`).
        **params: any :class:`HNewtonQuadParams` field (``max_tilt``, ``rate_tilt``, ...); any
            other keyword is the tracker's (:class:`~residual_quad.controllers.trackers.Tracker`).
            Behind lagging rotors (the context's ``rotor_tau_s`` > 0) ``max_tilt`` defaults to
            the lag-tuned attitude loop's widest, its ``budget_tilt`` (35°): the levels keep the
            vertical acceleration before the horizontal and the allocation the attitude before
            the collective, what the trackers' thrust budget and desaturating mixer provide.
    """

    name = "hnewton"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="thrust-vector Newton state (its own commands)",
        tuning="geo's position gains; Newton and allocation parameters set by hand "
        "(docs/hnewton.md), no recorded search",
        action="prioritized thrust vector (hierarchical Newton) → the shared attitude loop",
    )
    OPTIONS: dict[str, Domain] = {  # no mixer: the prioritized allocation takes its place
        "method": HNEWTON_PARAM_OPTIONS["method"],
        **{k: v for k, v in Tracker.OPTIONS.items() if k != "mixer"},
        **HNEWTON_PARAM_OPTIONS,
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        method: str = "newton",
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float | None = None,  # s, the rotors' time constant (None: the context's)
        **params: Any,
    ):
        if "mixer" in params:
            raise ValueError(f"{self.name} allocates with its prioritized allocator: no mixer")
        context = context or ControlContext()
        newton = {
            k: params.pop(k) for k in list(params) if k in HNewtonQuadParams.__dataclass_fields__
        }
        if context.rotor_tau_s > 0.0:  # behind lag its own tilt bound is the attitude loop's
            newton.setdefault("max_tilt", LAG_TUNED_GAINS.budget_tilt)
        self.params = HNewtonQuadParams(method=method, **newton)
        # the single cycle and allocator: one vehicle's solvers, and those of the rows the
        # batch algorithm leaves; each call loads the row of the state it works on
        self.newton = ThrustVectorNewton(context.airframe, context.control_dt, self.params)
        self.alloc = PrioritizedAllocator(context.airframe)
        self.newton_batch = BatchedThrustVectorNewton(self.newton)
        self.alloc_batch = BatchedPrioritizedAllocator(self.alloc)
        super().__init__(  # shared gains, attitude loop and rotor model
            context, kp=kp, kd=kd, attitude=attitude, rotor_tau_s=rotor_tau_s, **params
        )

    @property
    def method(self) -> str:
        return self.params.method

    def init_state(self, n: int) -> TrackerState:
        """The tracker's initial state with the thrust vector at nominal hover, no Newton
        memory and free warm faces."""
        q = np.zeros((n, 3))
        q[:, 0] = self.airframe.hover_thrust
        part = PrioritizedState(
            q=q,
            qdot=np.zeros((n, 3)),
            newton=self.newton.init_state(n),
            alloc_face=np.zeros((n, 4), dtype=int),
        )
        return replace(super().init_state(n), prioritized=part)

    def init_one(self) -> TrackerState:
        """One vehicle's initial state: the ``prioritized`` part keeps arrays (flags 0-d), which
        the single cycle updates in place."""
        part = self.init_state(1).prioritized
        return replace(super().init_one(), prioritized=tree_map(lambda x: x[0, ...], part))

    def forget_one(self, state: TrackerState) -> TrackerState:
        """The tracker's :meth:`forget_one`; the Newton memory follows the tracker's own
        commands (nothing to forget) and keeps its one-vehicle layout."""
        part = state.prioritized
        return replace(super().forget_one(state), prioritized=part)

    # -- the inner stage -----------------------------------------------------------------------
    def inner_command(
        self,
        state: TrackerState,
        obs: np.ndarray,
        R: np.ndarray,
        a_eff: np.ndarray,
        torque_ff: np.ndarray | None,
    ) -> tuple[TrackerState, np.ndarray, np.ndarray, np.ndarray]:
        """Thrust-vector Newton cycle (the batch algorithm) → attitude PD → prioritized
        allocation of every env, for ``a_eff`` (n, 3) (world, m/s²); the tracker's saturation
        flag is left as it is (the priorities, not a clip, shape the command)."""
        ax, ay, az = a_eff.T
        yaw = obs[:, L.ref_yaw]
        cy, sy = np.cos(yaw), np.sin(yaw)
        a_head = np.stack([cy * ax + sy * ay, -sy * ax + cy * ay, az], axis=1)
        part = state.prioritized
        qdot = self.newton_batch.step(part.newton, part.q, a_head)
        q = np.clip(part.q + self.dt * qdot, self.newton.q_lower, self.newton.q_upper)
        part.q[...] = q
        part.qdot[...] = qdot
        b3 = thrust_direction_terms(ARRAYS, q[:, 1], q[:, 2], yaw)
        r = obs[:, L.rot].T  # 9 rows of N values, body → world row-major
        thrust = q[:, 0] * (b3[0] * r[2] + b3[1] * r[5] + b3[2] * r[8])
        thrust = np.clip(thrust, 0.0, self.airframe.max_thrust)
        torque = self.inner.attitude_torque_batch(
            r, obs[:, L.omega_b], b3, yaw, obs[:, L.ref_yaw_rate]
        )
        if torque_ff is not None:
            tx, ty, tz = torque
            torque = (tx + torque_ff[:, 0], ty + torque_ff[:, 1], tz + torque_ff[:, 2])
        thrusts = self.alloc_batch(part.alloc_face, thrust, torque)
        return state, thrusts, state.saturated, thrust

    def inner_command_one(
        self,
        state: TrackerState,
        obs: np.ndarray,
        R: np.ndarray,
        a_eff: np.ndarray,
        torque_ff: np.ndarray | None,
    ) -> tuple[TrackerState, np.ndarray, bool, float]:
        """:meth:`inner_command` of one vehicle: the single cycle and allocator on its row."""
        ax, ay, az = a_eff.tolist()
        yaw = float(obs[L.ref_yaw])
        cy, sy = math.cos(yaw), math.sin(yaw)
        a_head = np.array([cy * ax + sy * ay, -sy * ax + cy * ay, az])
        part = state.prioritized
        qdot = self.newton.step_row(part.newton, part.q, a_head)
        q = np.clip(part.q + self.dt * qdot, self.newton.q_lower, self.newton.q_upper)
        part.q[...] = q
        part.qdot[...] = qdot
        b3 = thrust_direction(q, yaw)
        r = np.ravel(R).tolist()
        thrust = float(q[0]) * (b3[0] * r[2] + b3[1] * r[5] + b3[2] * r[8])
        thrust = min(max(thrust, 0.0), self.airframe.max_thrust)
        torque = self.inner.attitude_torque(r, obs[L.omega_b], b3, yaw, float(obs[L.ref_yaw_rate]))
        if torque_ff is not None:
            tx, ty, tz = torque
            ux, uy, uz = torque_ff.tolist()
            torque = (tx + ux, ty + uy, tz + uz)
        thrusts = self.alloc.allocate(part.alloc_face, thrust, torque)
        return state, thrusts, state.saturated, thrust


class HNewtonRLSTracker(EstimatorParts, HNewtonTracker):
    """``hnewton_rls``: ``hnewton`` fed with the online RLS residual estimate of ``geo_rls``.

    The estimate comes from a :class:`~residual_quad.controllers.residual.estimator
    .ResidualEstimator` with online learning, the same object ``geo_rls`` holds: on the same
    observation stream both estimate the same residual. The position gains default to those of
    the residual configuration, as for ``geo_rls``.

    Args:
        context: nominal airframe and control period.
        residual: keyword arguments for the estimator (``config=``, ``network=``, overrides).
        **kw: :class:`HNewtonTracker` arguments (``method``, ``kp``, ``kd``, ``attitude`` and
            the :class:`HNewtonQuadParams` fields); any other keyword (``weights``, ``config``,
            ``rls``, ...) goes to the estimator, exactly as it would to ``geo_rls``.
    """

    name = "hnewton_rls"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="hnewton's Newton state; geo_rls's RLS state",
        residual_estimate="offline network, last layer by online RLS (geo_rls's estimator)",
        tuning="hnewton's and geo_rls's settings; no search of their own",
        learned="residual",
        action="prioritized thrust vector (hierarchical Newton) → the shared attitude loop",
        objective=NETWORK_OBJECTIVE,
        training_scenarios=NETWORK_SCENARIOS,
    )
    OPTIONS: dict[str, Domain] = {
        **HNewtonTracker.OPTIONS,
        **{k: v for k, v in RESIDUAL_TRACKER_OPTIONS.items() if k != "mixer"},
        "residual": Section("residual", RESIDUAL_TRACKER_OPTIONS),
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        residual: dict[str, Any] | None = None,
        **kw: Any,
    ):
        context = context or ControlContext()
        self.config, network, kw = residual_settings(residual, kw, context)
        self.estimator = ResidualEstimator(context, self.config, network, learn=True)
        super().__init__(context, **kw)
