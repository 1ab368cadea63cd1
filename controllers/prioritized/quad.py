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
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains
from residual_quad.controllers.base import ControlContext, to_rotor_action
from residual_quad.controllers.options import (
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Domain,
    Number,
    Optional,
    Section,
)
from residual_quad.controllers.prioritized.box_hlsp import BoxHLSP, BoxHLSPResult
from residual_quad.controllers.prioritized.newton import (
    METHODS,
    SWITCHES,
    LevelEval,
    NewtonCore,
    NewtonSettings,
    check_method,
    task_multipliers,
)
from residual_quad.controllers.residual.trackers import RESIDUAL_TRACKER_OPTIONS
from residual_quad.controllers.trackers import Tracker
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L

__all__ = [
    "HNewtonQuadParams",
    "HNewtonRLSTracker",
    "HNewtonTracker",
    "PrioritizedAllocator",
    "ThrustVectorNewton",
    "thrust_vector_tasks",
]


# --------------------------------------------------------------------------- thrust-vector tasks
def thrust_vector_tasks(
    q: np.ndarray, mass: float, gravity: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nominal acceleration ``a(q)`` in the heading frame, its Jacobian and Hessian stack.

    ``q = (c [N], φ [rad], θ [rad])``; returns ``a`` (m/s², shape (3,) ordered x, y, z of the
    heading frame, gravity included), ``J = ∂a/∂q`` (3, 3) and ``H = ∂²a/∂q²`` (3, 3, 3).
    """
    c, phi, theta = float(q[0]), float(q[1]), float(q[2])
    s, t = math.tan(phi), math.tan(theta)
    u = c / mass
    D2 = 1.0 + s * s + t * t
    D = math.sqrt(D2)
    iD, iD3 = 1.0 / D, 1.0 / (D * D2)
    iD5 = iD3 / D2
    # components f = (t, -s, 1)/D and their partials in (s, t)
    fx, fy, fz = t * iD, -s * iD, iD
    fx_s, fx_t = -s * t * iD3, (1.0 + s * s) * iD3
    fy_s, fy_t = -(1.0 + t * t) * iD3, s * t * iD3
    fz_s, fz_t = -s * iD3, -t * iD3
    fx_ss, fx_st, fx_tt = (
        t * (3 * s * s - D2) * iD5,
        s * (3 * t * t - D2) * iD5,
        -3 * t * (1 + s * s) * iD5,
    )
    fy_ss, fy_st, fy_tt = (
        3 * s * (1 + t * t) * iD5,
        -t * (3 * s * s - D2) * iD5,
        -s * (3 * t * t - D2) * iD5,
    )
    fz_ss, fz_st, fz_tt = (3 * s * s - D2) * iD5, 3 * s * t * iD5, (3 * t * t - D2) * iD5
    # chain rule through s = tan φ, t = tan θ
    sp, tp = 1.0 + s * s, 1.0 + t * t
    spp, tpp = 2.0 * s * sp, 2.0 * t * tp
    im = 1.0 / mass
    a = np.array([u * fx, u * fy, u * fz - gravity])
    J = np.array(
        [
            [fx * im, u * fx_s * sp, u * fx_t * tp],
            [fy * im, u * fy_s * sp, u * fy_t * tp],
            [fz * im, u * fz_s * sp, u * fz_t * tp],
        ]
    )
    H = np.empty((3, 3, 3))
    for i, (f_s, f_t, f_ss, f_st, f_tt) in enumerate(
        (
            (fx_s, fx_t, fx_ss, fx_st, fx_tt),
            (fy_s, fy_t, fy_ss, fy_st, fy_tt),
            (fz_s, fz_t, fz_ss, fz_st, fz_tt),
        )
    ):
        cp, ct = f_s * sp * im, f_t * tp * im
        pp = u * (f_ss * sp * sp + f_s * spp)
        pt = u * f_st * sp * tp
        tt = u * (f_tt * tp * tp + f_t * tpp)
        H[i] = ((0.0, cp, ct), (cp, pp, pt), (ct, pt, tt))
    return a, J, H


def thrust_direction(q: np.ndarray, yaw: float) -> tuple[float, float, float]:
    """Unit thrust direction (world) of ``q = (c, φ, θ)`` at heading ``yaw`` (rad)."""
    s, t = math.tan(float(q[1])), math.tan(float(q[2]))
    iD = 1.0 / math.sqrt(1.0 + s * s + t * t)
    hx, hy, hz = t * iD, -s * iD, iD
    cy, sy = math.cos(yaw), math.sin(yaw)
    return cy * hx - sy * hy, sy * hx + cy * hy, hz


@dataclass
class HNewtonQuadParams:
    """Settings of the thrust-vector Newton step (units in brackets).

    ``gain`` is the task gain ``k`` of ``J q̇ = −k·e`` [1/s]; ``None`` takes ``1/Δt``, a full
    Newton step per control step. ``switch``/``nu``/``eps``/``lm_mu``/``bfgs_b0`` and the
    ``Δt``-scaling of the multipliers are those of :class:`~.hnewton.HNewtonParams` (switch
    reading "A", decisions D1–D6 of ``docs/hnewton.md`` M8).
    """

    method: str = "newton"
    gain: float | None = None  # 1/s
    max_tilt: float = math.radians(40.0)  # rad, box on each projected tilt angle
    thrust_min_frac: float = 0.1  # × nominal hover thrust
    thrust_max_frac: float = 1.0  # × all-rotors-saturated thrust (the allocator keeps torque)
    rate_thrust: float = 300.0  # N/s, trust region on ċ
    rate_tilt: float = 8.0  # rad/s, trust region on φ̇, θ̇
    lm_mu: float = 0.3
    eps: float = 1e-9
    switch: str = "residual"  # "residual" | "always" | "never"
    nu: float | None = None  # default 1e-12 Δt²
    bfgs_b0: float = 1e-3

    def __post_init__(self) -> None:
        check_method(self.method, self.switch)
        if not 0.0 < self.max_tilt < math.radians(80.0):
            raise ValueError("max_tilt must lie in (0, 80°)")
        if not (self.thrust_min_frac > 0.0 and 0.0 < self.thrust_max_frac <= 1.0):
            raise ValueError("thrust fractions must be positive and thrust_max_frac <= 1")
        if self.rate_thrust <= 0 or self.rate_tilt <= 0:
            raise ValueError("trust-region rates must be positive")
        if self.gain is not None and self.gain <= 0:
            raise ValueError("gain must be positive")


#: the domain of every :class:`HNewtonQuadParams` field (an option of ``hnewton``)
HNEWTON_PARAM_OPTIONS: dict[str, Domain] = {
    "method": Choice(METHODS),
    "gain": Optional(POSITIVE),  # 1/s
    "max_tilt": Number(gt=0.0, lt=math.radians(80.0)),  # rad
    "thrust_min_frac": POSITIVE,
    "thrust_max_frac": Number(gt=0.0, le=1.0),
    "rate_thrust": POSITIVE,  # N/s
    "rate_tilt": POSITIVE,  # rad/s
    "lm_mu": POSITIVE,
    "eps": POSITIVE,
    "switch": Choice(SWITCHES),
    "nu": Optional(NON_NEGATIVE),
    "bfgs_b0": POSITIVE,
}


class ThrustVectorNewton(NewtonCore):
    """One hierarchical Newton cycle on ``q = (c, φ, θ)`` per call of :meth:`step`.

    The cycle of :meth:`HierarchicalNewton.step <.hnewton.HierarchicalNewton.step>` for the fixed
    layout (box ≻ vertical ≻ horizontal) with the exact fast solver, on the same
    :class:`~.newton.NewtonCore`; the tests cross-check it against the generic class on the numpy
    HLSP backend.
    """

    def __init__(self, airframe: Airframe, dt: float, params: HNewtonQuadParams | None = None):
        self.frame = airframe
        self.dt = float(dt)
        self.p = p = params or HNewtonQuadParams()
        self.k = 1.0 / self.dt if p.gain is None else float(p.gain)
        settings = NewtonSettings(
            method=p.method,
            dt=self.dt,
            multiplier_scale=self.dt,
            nu=1e-12 * self.dt**2 if p.nu is None else float(p.nu),
            switch=p.switch,
            switch_reading="A",
            lm_mu=p.lm_mu,
            eps=p.eps,
            bfgs_b0=p.bfgs_b0,
        )
        super().__init__(settings, 3, 2)
        self.q_lower = np.array(
            [p.thrust_min_frac * airframe.hover_thrust, -p.max_tilt, -p.max_tilt]
        )
        self.q_upper = np.array([p.thrust_max_frac * airframe.max_thrust, p.max_tilt, p.max_tilt])
        self.vmax = np.array([p.rate_thrust, p.rate_tilt, p.rate_tilt])
        need_mult = p.method in ("bfgs", "newton")
        self.solver = BoxHLSP(3, multipliers=need_mult)
        self.gn_solver = BoxHLSP(3, multipliers=need_mult)
        self.reset()

    def reset(self) -> None:
        """Forget multipliers, BFGS matrices, warm starts and the previous step."""
        self.reset_core()
        self.solver.reset()
        self.gn_solver.reset()
        self.augmented = [False, False]
        self.gn_norms = np.zeros(2)
        self.last: BoxHLSPResult | None = None

    def velocity_box(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Trust region ∩ the q-box reached in one step (always a non-empty box)."""
        inv = 1.0 / self.dt
        lo = np.minimum(np.maximum(-self.vmax, (self.q_lower - q) * inv), self.vmax)
        up = np.maximum(np.minimum(self.vmax, (self.q_upper - q) * inv), -self.vmax)
        return lo, up

    def evaluate(self, q: np.ndarray, a_des: np.ndarray) -> list[LevelEval]:
        """``(e, J, H)`` of the vertical and the horizontal level at ``q`` for target ``a_des``
        (heading frame, m/s²)."""
        a, J, H = thrust_vector_tasks(q, self.frame.mass, self.frame.gravity)
        e = a - a_des
        return [(e[2:3], J[2:3], H[2:3]), (e[:2], J[:2], H[:2])]

    def step(self, q: np.ndarray, a_des: np.ndarray) -> np.ndarray:
        """Velocity ``q̇`` (N/s, rad/s, rad/s) of one cycle at ``q`` towards ``a_des`` (heading
        frame, m/s²)."""
        ev = self.evaluate(q, a_des)
        if self.p.method == "bfgs":
            self.bfgs_update(q, ev)
        lo, up = self.velocity_box(q)
        k = self.k
        levels = [(J, -k * e) for e, J, _ in ev]
        self.augmented = [False, False]
        inv = _inverse3(np.vstack([ev[0][1], ev[1][1]]))
        if self.p.method == "gn":
            res = self.solver.solve(lo, up, levels, inverse=inv)
            self.gn_norms = res.slack_norms()
        else:
            gn = self.gn_solver.solve(lo, up, levels, inverse=inv)
            self.gn_norms = gn.slack_norms()
            aug = []
            for li, (A, b) in enumerate(levels):
                if self.switch_on(float(self.gn_norms[li])):
                    R = self.level_factor(li, ev, self.lam)
                    A = np.vstack([A, R])
                    b = np.concatenate([b, np.zeros(3)])
                    self.augmented[li] = True
                aug.append((A, b))
            res = self.solver.solve(lo, up, aug) if any(self.augmented) else gn
        self.lam = task_multipliers(res.multipliers, (1, 2))
        self.remember(q, ev)
        self.last = res
        return res.x.copy()


def _inverse3(M: np.ndarray) -> np.ndarray | None:
    """Cofactor inverse of a 3×3 matrix, ``None`` when it is (nearly) singular."""
    (a, b, c), (d, e, f), (g, h, i) = M.tolist()
    A, B, C = e * i - f * h, f * g - d * i, d * h - e * g
    det = a * A + b * B + c * C
    scale = max(abs(a), abs(b), abs(c), abs(d), abs(e), abs(f), abs(g), abs(h), abs(i))
    if abs(det) <= 1e-12 * scale**3 or not math.isfinite(det):
        return None
    r = 1.0 / det
    return np.array(
        [
            [A * r, (c * h - b * i) * r, (b * f - c * e) * r],
            [B * r, (a * i - c * g) * r, (c * d - a * f) * r],
            [C * r, (b * g - a * h) * r, (a * e - b * d) * r],
        ]
    )


# --------------------------------------------------------------------------- allocation
class PrioritizedAllocator:
    """Rotor thrusts (N) from a wrench by HLSP: bounds ≻ roll/pitch ≻ collective ≻ yaw."""

    def __init__(self, airframe: Airframe):
        self.frame = airframe
        A = np.asarray(airframe.allocation, dtype=float)
        self.A_rp, self.A_T, self.A_yaw = A[1:3].copy(), A[0:1].copy(), A[3:4].copy()
        self.lower = np.zeros(4)
        self.upper = np.full(4, airframe.max_rotor_thrust)
        self.solver = BoxHLSP(4, multipliers=False)
        self.inverse = np.linalg.inv(np.vstack([self.A_rp, self.A_T, self.A_yaw]))
        self.last: BoxHLSPResult | None = None

    def reset(self) -> None:
        """Forget the warm-start face."""
        self.solver.reset()
        self.last = None

    def __call__(self, thrust: float, torque: tuple[float, float, float]) -> np.ndarray:
        """Rotor thrusts for collective ``thrust`` (N) and body ``torque`` (N·m)."""
        tx, ty, tz = torque
        res = self.solver.solve(
            self.lower,
            self.upper,
            [
                (self.A_rp, np.array([tx, ty])),
                (self.A_T, np.array([thrust])),
                (self.A_yaw, np.array([tz])),
            ],
            inverse=self.inverse,
        )
        self.last = res
        return res.x


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
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal; see
            :class:`~residual_quad.controllers.trackers.Tracker`).
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
        rotor_tau_s: float = 0.0,  # s, the rotors' time constant the tracker is told (0: ideal)
        **params: Any,
    ):
        context = context or ControlContext()
        self.params = HNewtonQuadParams(method=method, **params)
        self.newton = ThrustVectorNewton(context.airframe, context.control_dt, self.params)
        self.alloc = PrioritizedAllocator(context.airframe)
        super().__init__(  # shared gains, attitude PD and rotor model
            context, kp=kp, kd=kd, attitude=attitude, rotor_tau_s=rotor_tau_s
        )

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
        from residual_quad.controllers.residual.config import residual_config
        from residual_quad.controllers.residual.estimator import ResidualEstimator

        own = {"method", "kp", "kd", "attitude", "rotor_tau_s"}
        own |= set(HNewtonQuadParams.__dataclass_fields__)
        est_kw = dict(residual or {})
        est_kw.update({k: v for k, v in kw.items() if k not in own})
        kw = {k: v for k, v in kw.items() if k in own}
        context = context or ControlContext()
        network = est_kw.pop("network", None)
        cfg = residual_config(est_kw.pop("config", None), **est_kw)
        self.estimator = ResidualEstimator(context, cfg, network, learn=True)
        kw.setdefault("kp", cfg.kp)
        kw.setdefault("kd", cfg.kd)
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
