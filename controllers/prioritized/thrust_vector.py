"""The thrust-vector stage of ``hnewton``: its tasks, one Newton cycle, the prioritized allocation.

:class:`ThrustVectorNewton` is the hierarchical Newton cycle on the commanded thrust vector
``q = (c, φ, θ)`` and :class:`PrioritizedAllocator` the rotor allocation of the quadrotor
controllers (:mod:`.quad`, whose docstring explains the layout). Their memory between control
steps (multipliers, BFGS matrices, the previous step, the warm faces) is an explicit state
(:class:`ThrustVectorState`, the allocation's warm faces), one row per env, that the tracker law
holds: one vehicle loads its row into the single cycle and writes it back
(:meth:`ThrustVectorNewton.step_row`, :meth:`PrioritizedAllocator.allocate`).
:class:`BatchedThrustVectorNewton` and :class:`BatchedPrioritizedAllocator` are the batch
algorithm for N envs: every env's first candidate as one array computation, the single cycle
on the rows it leaves. The task values and derivatives (:func:`thrust_vector_terms`), the
thrust direction and the 3×3 cofactor inverse are one formula each for a float and for an array
of envs: ``xp`` is :class:`~residual_quad.envs.xp.FLOATS` or
:class:`~residual_quad.envs.xp.ARRAYS`, which evaluate the same expressions in the same order
(bit for bit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.law import tree_map
from residual_quad.controllers.options import (
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Domain,
    Number,
    Optional,
)
from residual_quad.controllers.prioritized.box_hlsp import (
    FREE,
    BatchedBoxHLSP,
    BoxHLSP,
    BoxHLSPResult,
)
from residual_quad.controllers.prioritized.newton import (
    METHODS,
    SWITCHES,
    LevelEval,
    NewtonCore,
    NewtonSettings,
    check_method,
    task_multipliers,
)
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.xp import ARRAYS, FLOATS, Namespace

__all__ = [
    "BatchedPrioritizedAllocator",
    "BatchedThrustVectorNewton",
    "HNEWTON_PARAM_OPTIONS",
    "HNewtonQuadParams",
    "PrioritizedAllocator",
    "ThrustVectorNewton",
    "ThrustVectorState",
    "inverse3",
    "thrust_direction",
    "thrust_vector_tasks",
    "thrust_vector_terms",
]


# --------------------------------------------------------------------------- thrust-vector tasks
def thrust_vector_terms(
    xp: Namespace, c: Any, phi: Any, theta: Any, mass: float, gravity: float
) -> tuple[tuple[Any, ...], tuple[tuple[Any, ...], ...], tuple[Any, ...]]:
    """The entries of :func:`thrust_vector_tasks` for thrust ``c`` (N) and projected tilts
    ``phi``, ``theta`` (rad): floats (``xp`` :class:`~residual_quad.envs.xp.FLOATS`) or arrays
    (N,) (:class:`~residual_quad.envs.xp.ARRAYS`).

    Returns ``a`` (3 entries), ``J`` (3 rows of 3) and ``H`` (3 nested 3×3 tuples; the
    ``∂²/∂c²`` entries are the float 0).
    """
    s, t = xp.tan(phi), xp.tan(theta)
    u = c / mass
    D2 = 1.0 + s * s + t * t
    D = xp.sqrt(D2)
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
    a = (u * fx, u * fy, u * fz - gravity)
    J = (
        (fx * im, u * fx_s * sp, u * fx_t * tp),
        (fy * im, u * fy_s * sp, u * fy_t * tp),
        (fz * im, u * fz_s * sp, u * fz_t * tp),
    )
    H = []
    for f_s, f_t, f_ss, f_st, f_tt in (
        (fx_s, fx_t, fx_ss, fx_st, fx_tt),
        (fy_s, fy_t, fy_ss, fy_st, fy_tt),
        (fz_s, fz_t, fz_ss, fz_st, fz_tt),
    ):
        cp, ct = f_s * sp * im, f_t * tp * im
        pp = u * (f_ss * sp * sp + f_s * spp)
        pt = u * f_st * sp * tp
        tt = u * (f_tt * tp * tp + f_t * tpp)
        H.append(((0.0, cp, ct), (cp, pp, pt), (ct, pt, tt)))
    return a, J, tuple(H)


def thrust_vector_tasks(
    q: np.ndarray, mass: float, gravity: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nominal acceleration ``a(q)`` in the heading frame, its Jacobian and Hessian stack.

    ``q = (c [N], φ [rad], θ [rad])``; returns ``a`` (m/s², shape (3,) ordered x, y, z of the
    heading frame, gravity included), ``J = ∂a/∂q`` (3, 3) and ``H = ∂²a/∂q²`` (3, 3, 3).
    """
    c, phi, theta = np.asarray(q, dtype=float).tolist()
    a, J, H = thrust_vector_terms(FLOATS, c, phi, theta, mass, gravity)
    return np.array(a), np.array(J), np.array(H)


def thrust_direction_terms(xp: Namespace, phi: Any, theta: Any, yaw: Any) -> tuple[Any, Any, Any]:
    """Unit thrust direction (world) of the projected tilts ``phi``, ``theta`` (rad) at heading
    ``yaw`` (rad): floats (``xp`` :class:`~residual_quad.envs.xp.FLOATS`) or arrays (N,)
    (:class:`~residual_quad.envs.xp.ARRAYS`)."""
    s, t = xp.tan(phi), xp.tan(theta)
    iD = 1.0 / xp.sqrt(1.0 + s * s + t * t)
    hx, hy, hz = t * iD, -s * iD, iD
    cy, sy = xp.cos(yaw), xp.sin(yaw)
    return cy * hx - sy * hy, sy * hx + cy * hy, hz


def thrust_direction(q: np.ndarray, yaw: float) -> tuple[float, float, float]:
    """Unit thrust direction (world) of ``q = (c, φ, θ)`` at heading ``yaw`` (rad)."""
    return thrust_direction_terms(FLOATS, float(q[1]), float(q[2]), yaw)


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


class ThrustVectorState(NamedTuple):
    """The memory of the thrust-vector Newton cycle between control steps, one row per env (one
    vehicle: the row without the env axis, flags as 0-d arrays, so that it is updated in place).

    What the next cycle reads, and only that: ``lam``, the control multipliers of the last
    solve ``λ_{0,0}``, ``λ_{0,1}``, ``λ_{1,1}`` (1 + 1 + 2 entries; ``newton`` and ``bfgs``),
    valid where ``has_lam``; the BFGS matrices and the previous cycle's configuration and
    Jacobian (rows x, y, z of the heading frame) of the BFGS update (``bfgs`` only: the other
    variants leave them at their reset values), valid where ``has_prev``; the warm faces.
    """

    lam: np.ndarray  # (n, 4): multipliers of the last solve
    has_lam: np.ndarray  # (n,) bool
    B: np.ndarray  # (n, 2, 3, 3): the BFGS matrix of each level
    prev_q: np.ndarray  # (n, 3): N, rad, rad
    prev_J: np.ndarray  # (n, 3, 3): ∂a/∂q at prev_q (m/s² per N, rad)
    has_prev: np.ndarray  # (n,) bool
    face: np.ndarray  # (n, 3) int: the warm face of the (augmented) solver
    gn_face: np.ndarray  # (n, 3) int: the warm face of the GN solver


def state_row(state: Any, i: int) -> Any:
    """Row ``i`` of every leaf of a state tree as views (0-d for a flag): writing into the row
    writes the batch's state."""
    return tree_map(lambda x: x[i, ...], state)


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
        self.bfgs = p.method == "bfgs"  # the variant with a memory of B and the previous step
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

    # -- explicit state ------------------------------------------------------------------------
    def init_state(self, n: int) -> ThrustVectorState:
        """The memory of ``n`` envs after a reset: no multipliers, ``B_0 = b0·I``, no previous
        step, free warm faces."""
        B = np.empty((n, 2, 3, 3))
        B[...] = self.settings.bfgs_b0 * np.eye(3)
        return ThrustVectorState(
            lam=np.zeros((n, 4)),
            has_lam=np.zeros(n, dtype=bool),
            B=B,
            prev_q=np.zeros((n, 3)),
            prev_J=np.zeros((n, 3, 3)),
            has_prev=np.zeros(n, dtype=bool),
            face=np.full((n, 3), FREE),
            gn_face=np.full((n, 3), FREE),
        )

    def load(self, row: ThrustVectorState) -> None:
        """Take one vehicle's memory ``row`` (a row of :class:`ThrustVectorState`) as this
        cycle's multipliers and, for ``bfgs``, BFGS matrices and previous step."""
        lam = row.lam
        self.lam = [[lam[0:1]], [lam[1:2], lam[2:4]]] if row.has_lam else None
        if self.bfgs:
            self.B = [row.B[0], row.B[1]]
            if row.has_prev:
                self.prev_q = row.prev_q
                self.prev_J = [row.prev_J[2:3], row.prev_J[0:2]]
            else:
                self.prev_q, self.prev_J = None, None

    def step_row(self, row: ThrustVectorState, q: np.ndarray, a_des: np.ndarray) -> np.ndarray:
        """:meth:`step` on one vehicle's memory ``row``: loaded before the cycle, written back
        after it (in place)."""
        self.load(row)
        self.solver.load_face(row.face)
        self.gn_solver.load_face(row.gn_face)
        x = self.step(q, a_des)
        self.solver.store_face(row.face)
        self.gn_solver.store_face(row.gn_face)
        lam = self.lam
        if lam is not None:
            row.lam[...] = np.concatenate([lam[0][0], lam[1][0], lam[1][1]])
        row.has_lam[...] = lam is not None
        if self.bfgs:
            row.B[0], row.B[1] = self.B
            row.prev_q[...] = self.prev_q
            row.prev_J[2:3], row.prev_J[0:2] = self.prev_J
            row.has_prev[...] = True
        return x

    def velocity_box(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Trust region ∩ the q-box reached in one step (always a non-empty box); ``q`` (3,), or
        (N, 3) for N envs at once."""
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


def inverse3(xp: Namespace, M: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
    """Cofactor inverse (9 entries, row-major) of the 3×3 matrix with row-major entries ``M``
    and whether it is usable: not (nearly) singular and finite. Floats (``xp``
    :class:`~residual_quad.envs.xp.FLOATS`) or arrays (N,)
    (:class:`~residual_quad.envs.xp.ARRAYS`; the entries of unusable rows are finite garbage)."""
    a, b, c, d, e, f, g, h, i = M
    A, B, C = e * i - f * h, f * g - d * i, d * h - e * g
    det = a * A + b * B + c * C
    scale = xp.amax(abs(a), abs(b), abs(c), abs(d), abs(e), abs(f), abs(g), abs(h), abs(i))
    ok = (abs(det) > 1e-12 * xp.cube(scale)) & xp.isfinite(det)
    r = 1.0 / xp.where(ok, det, 1.0)
    inv = (
        A * r, (c * h - b * i) * r, (b * f - c * e) * r,
        B * r, (a * i - c * g) * r, (c * d - a * f) * r,
        C * r, (b * g - a * h) * r, (a * e - b * d) * r,
    )  # fmt: skip
    return inv, ok


def _inverse3(M: np.ndarray) -> np.ndarray | None:
    """Cofactor inverse of a 3×3 matrix, ``None`` when it is (nearly) singular."""
    inv, ok = inverse3(FLOATS, tuple(M.ravel().tolist()))
    return np.array(inv).reshape(3, 3) if ok else None


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

    def allocate(
        self, face: np.ndarray, thrust: float, torque: tuple[float, float, float]
    ) -> np.ndarray:
        """:meth:`__call__` from one vehicle's warm face ``face`` (4,), which it updates in
        place."""
        self.solver.load_face(face)
        x = self(thrust, torque)
        self.solver.store_face(face)
        return x


# --------------------------------------------------------------------------- N envs
class BatchedThrustVectorNewton:
    """The batch algorithm of :class:`ThrustVectorNewton`: one cycle per env per :meth:`step`
    over the envs' memory (:class:`ThrustVectorState`).

    In flight almost every env's small HLSP stops at the single solver's first candidate, which
    :meth:`BatchedBoxHLSP.square` computes for all envs at once; the envs where it does not (a
    bound active, a switched-on level, a singular Jacobian; every env with
    ``switch="always"``) run the single cycle on their own row of the memory.

    Args:
        single: the single cycle (the settings; it solves the rows the array path leaves).
    """

    def __init__(self, single: ThrustVectorNewton) -> None:
        self.single = s = single
        self.p, self.k, self.frame = s.p, s.k, s.frame
        self.solver = BatchedBoxHLSP(s.solver)
        self.gn_solver = BatchedBoxHLSP(s.gn_solver)

    def step(self, state: ThrustVectorState, q: np.ndarray, a_des: np.ndarray) -> np.ndarray:
        """Velocities ``q̇`` (N, 3) (N/s, rad/s, rad/s) of one cycle per env at ``q`` (N, 3)
        towards ``a_des`` (N, 3) (heading frame, m/s²); ``state`` is updated in place."""
        n = q.shape[0]
        s = self.single
        gn_only = self.p.method == "gn"
        if self.p.switch == "always" and not gn_only:  # every level augmented: row by row
            return np.stack([s.step_row(state_row(state, i), q[i], a_des[i]) for i in range(n)])
        frame = self.frame
        a, J, _ = thrust_vector_terms(ARRAYS, *q.T, frame.mass, frame.gravity)
        J = np.stack([np.stack(row, axis=1) for row in J], axis=1)  # (N, 3, 3)
        e = np.stack(a, axis=1) - a_des
        lo, up = s.velocity_box(q)
        inv, ok = inverse3(ARRAYS, (*J[:, 2].T, *J[:, 0].T, *J[:, 1].T))
        levels = [(J[:, 2:3], -self.k * e[:, 2:3]), (J[:, 0:2], -self.k * e[:, 0:2])]
        solver, faces = (self.solver, state.face) if gn_only else (self.gn_solver, state.gn_face)
        x, slacks, done = solver.square(lo, up, levels, np.stack(inv, 1).reshape(n, 3, 3), ok)
        norms = np.stack(
            [np.sqrt(np.matmul(w[:, None], w[:, :, None])[:, 0, 0]) for w in slacks], 1
        )
        if not gn_only:  # a switched-on level is augmented: that env's cycle runs on its own
            done &= ~np.broadcast_to(s.switch_on(norms), norms.shape).any(axis=1)
        if self.p.method == "bfgs":
            for i in np.flatnonzero(done).tolist():
                self._bfgs_row(state_row(state, i), q[i], J[i])
        faces[done] = FREE  # the square point's face
        if s.solver.multipliers:  # the square point's multipliers: its slacks
            state.lam[done] = np.concatenate([slacks[0], np.zeros((n, 1)), slacks[1]], 1)[done]
            state.has_lam[done] = True
        if s.bfgs:
            state.prev_q[done] = q[done]
            state.prev_J[done] = J[done]
            state.has_prev[done] = True
        for i in np.flatnonzero(~done).tolist():
            x[i] = s.step_row(state_row(state, i), q[i], a_des[i])
        return x

    def _bfgs_row(self, row: ThrustVectorState, q: np.ndarray, J: np.ndarray) -> None:
        """One env's BFGS update with the single cycle's code (before its square solve)."""
        s = self.single
        s.load(row)
        s.bfgs_update(q, [(None, J[2:3], None), (None, J[0:2], None)])
        row.B[0], row.B[1] = s.B


class BatchedPrioritizedAllocator:
    """The batch algorithm of :class:`PrioritizedAllocator`: every env's first candidate at once
    (:meth:`BatchedBoxHLSP.square`), the single allocator on the rows it leaves.

    Args:
        single: the single allocator (the allocation matrix, bounds and solver settings).
    """

    def __init__(self, single: PrioritizedAllocator) -> None:
        self.single = single
        self.solver = BatchedBoxHLSP(single.solver)
        self._n = -1  # the batch size of the broadcast constants below

    def _constants(self, n: int) -> None:
        """The allocation matrices, their inverse and the rotor bounds broadcast to ``n`` envs
        (read-only views, made again when the batch size changes)."""
        s = self.single
        self._A = [np.broadcast_to(A, (n, *A.shape)) for A in (s.A_rp, s.A_T, s.A_yaw)]
        self._inverse = np.broadcast_to(s.inverse, (n, 4, 4))
        self._lower = np.broadcast_to(s.lower, (n, 4))
        self._upper = np.broadcast_to(s.upper, (n, 4))
        self._n = n

    def __call__(
        self,
        faces: np.ndarray,
        thrust: np.ndarray,
        torque: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> np.ndarray:
        """Rotor thrusts (N, 4) (N) for collectives ``thrust`` (N,) (N) and body torques (three
        (N,) components, N·m) from the envs' warm faces ``faces`` (N, 4), updated in place."""
        n = thrust.shape[0]
        if n != self._n:
            self._constants(n)
        tx, ty, tz = torque
        A_rp, A_T, A_yaw = self._A
        b = [np.stack([tx, ty], 1), thrust[:, None], tz[:, None]]
        x, _, done = self.solver.square(
            self._lower, self._upper, list(zip((A_rp, A_T, A_yaw), b, strict=True)), self._inverse
        )
        faces[done] = FREE
        single = self.single
        for i in np.flatnonzero(~done).tolist():
            torque_i = (float(tx[i]), float(ty[i]), float(tz[i]))
            x[i] = single.allocate(faces[i], float(thrust[i]), torque_i)
        return x
