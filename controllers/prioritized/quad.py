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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext, to_rotor_action
from residual_quad.controllers.options import Domain, Section
from residual_quad.controllers.prioritized.quad_batch import (
    BatchedHNewtonRLSTracker,
    BatchedHNewtonTracker,
    residual_settings,
)
from residual_quad.controllers.prioritized.thrust_vector import (
    HNEWTON_PARAM_OPTIONS,
    HNewtonQuadParams,
    PrioritizedAllocator,
    ThrustVectorNewton,
    thrust_direction,
    thrust_vector_tasks,
)
from residual_quad.controllers.residual.trackers import RESIDUAL_TRACKER_OPTIONS
from residual_quad.controllers.trackers import Tracker
from residual_quad.envs.observation import ObsLayout as L

__all__ = [
    "HNEWTON_PARAM_OPTIONS",
    "HNewtonQuadParams",
    "HNewtonRLSTracker",
    "HNewtonTracker",
    "PrioritizedAllocator",
    "ThrustVectorNewton",
    "thrust_direction",
    "thrust_vector_tasks",
]


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
        **params: any :class:`HNewtonQuadParams` field (``max_tilt``, ``rate_tilt``, ...).
    """

    name = "hnewton"
    OPTIONS: dict[str, Domain] = {
        "method": HNEWTON_PARAM_OPTIONS["method"],
        **Tracker.OPTIONS,
        **HNEWTON_PARAM_OPTIONS,
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        method: str = "newton",
        kp: float = 20.0,  # 1/s²
        kd: float = 8.0,  # 1/s
        attitude: AttitudeGains | None = None,
        **params: Any,
    ):
        context = context or ControlContext()
        self.params = HNewtonQuadParams(method=method, **params)
        self.newton = ThrustVectorNewton(context.airframe, context.control_dt, self.params)
        self.alloc = PrioritizedAllocator(context.airframe)
        super().__init__(context, kp=kp, kd=kd, attitude=attitude)  # shared gains and attitude PD

    @property
    def method(self) -> str:
        return self.params.method

    def reset(self, seed: int | None = None) -> None:
        """Restore the initial state: thrust vector at nominal hover, no memories."""
        super().reset(seed)
        self.q = np.array([self.airframe.hover_thrust, 0.0, 0.0])
        self.qdot = np.zeros(3)
        self.newton.reset()
        self.alloc.reset()
        self.last_thrust = self.airframe.hover_thrust  # N

    # -- interface -----------------------------------------------------------------------------
    def act(self, obs: np.ndarray) -> np.ndarray:
        R = obs[L.rot].reshape(3, 3)
        a_cmd = self.desired_accel(obs, obs[L.ref_pos] - obs[L.pos], obs[L.ref_vel] - obs[L.vel])
        est = self.residual_world(obs, R, a_cmd)
        self.last_residual = est
        ax, ay, az = (a_cmd - est).tolist()
        yaw = float(obs[L.ref_yaw])
        cy, sy = math.cos(yaw), math.sin(yaw)
        a_head = np.array([cy * ax + sy * ay, -sy * ax + cy * ay, az])
        qdot = self.newton.step(self.q, a_head)
        self.qdot = qdot
        self.q = np.clip(self.q + self.dt * qdot, self.newton.q_lower, self.newton.q_upper)
        b3 = thrust_direction(self.q, yaw)
        thrusts = self._attitude_and_allocate(R, obs[L.omega_b], b3, yaw, obs[L.ref_yaw_rate])
        self.last_a_cmd = a_cmd
        return to_rotor_action(thrusts, self.airframe)

    def _attitude_and_allocate(
        self,
        R: np.ndarray,
        omega_b: np.ndarray,
        b3: tuple[float, float, float],
        yaw_des: float,
        yaw_rate_des: float,
    ) -> np.ndarray:
        """Geometric attitude PD towards (b3, heading) and the prioritized allocation."""
        r = np.ravel(R).tolist()
        frame = self.airframe
        thrust = float(self.q[0]) * (b3[0] * r[2] + b3[1] * r[5] + b3[2] * r[8])
        thrust = min(max(thrust, 0.0), frame.max_thrust)
        self.last_thrust = thrust
        torque = self.inner.attitude_torque(r, omega_b, b3, yaw_des, float(yaw_rate_des))
        return self.alloc(thrust, torque)


class HNewtonRLSTracker(HNewtonTracker):
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
    OPTIONS: dict[str, Domain] = {
        **HNewtonTracker.OPTIONS,
        **RESIDUAL_TRACKER_OPTIONS,
        "residual": Section("residual", RESIDUAL_TRACKER_OPTIONS),
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        residual: dict[str, Any] | None = None,
        **kw: Any,
    ):
        from residual_quad.controllers.residual.estimator import ResidualEstimator

        context = context or ControlContext()
        cfg, network, kw = residual_settings(residual, kw)
        self.estimator = ResidualEstimator(context, cfg, network, learn=True)
        super().__init__(context, **kw)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.estimator.reset(seed)

    def forget_previous_sample(self) -> None:
        self.estimator.forget_previous_sample()

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        # the estimator keeps its own memories (previous observation, regressor, effective
        # command a_cmd − Δâ) exactly as inside geo_rls
        return self.estimator.estimate(obs, R, a_cmd)


HNewtonTracker.batched = BatchedHNewtonTracker
HNewtonRLSTracker.batched = BatchedHNewtonRLSTracker
