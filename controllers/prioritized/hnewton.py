"""The hierarchical Newton method of control (LexDynAH, [HN]) on task objects: GN/LM/BFGS/Newton.

One control cycle ([HN eq. 20–21]; ``docs/hnewton.md`` M3–M5) for configuration ``q`` (n variables)
and optional extra decision variables (torques in the dynamic case, [HN sec. V-C], M6):

1. every task returns its value ``e``, Jacobian ``J`` and Hessian stack ``H``; the controller
   turns it into velocity rows ``J q̇ ∈ [lo, up]`` (P control, or the PD controller emulated in the
   velocity domain, [HN eq. 30]: ``ė^ctrl = (1 - K_d Δt) J q̇_{k-1} - K_p Δt e``);
2. the top level holds the trust region as a velocity box ``|q̇_i| <= v_max`` plus any hard rows
   (equation of motion, torque limits);
3. the Gauss-Newton HLSP is solved; a level whose GN slack is numerically nonzero
   (``||Δt w^GN_l||² > ν``, ``ν = 1e-12 Δt²``) is *augmented* with ``R_l`` (rows ``R_l q̇ = 0``
   inside the level), where ``R_lᵀR_l`` is
   - ``gn``: nothing (never augmented),
   - ``lm``: ``μ² I``,
   - ``bfgs``: a damped-BFGS estimate of the hierarchical Hessian,
   - ``newton``: the hierarchical Hessian ``Ĥ_l = Σ_{j<=l} λ_{j,l} · H_j`` ([HN eq. 15]) built
     from the multipliers of the previous cycle, eigen-clamped (``U ← max(U, ε)``,
     ``R = U^{1/2} Qᵀ``);
4. the augmented HLSP gives ``q̇`` and the multipliers for the next cycle.

Steps 3–4's switching, factors, BFGS state and multiplier handling are the shared
:class:`~residual_quad.controllers.prioritized.newton.NewtonCore`. The choices the paper leaves open
are parameters of :class:`HNewtonParams` (``docs/hnewton.md`` M8, decisions D1–D7).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .hlsp import HLSPResult, HLSPSolver, Level
from .newton import (
    METHODS,
    LevelEval,
    NewtonCore,
    NewtonSettings,
    adapt_trust_region,
    check_method,
    task_multipliers,
)

__all__ = [
    "METHODS",
    "FunctionTask",
    "HNewtonParams",
    "HierarchicalNewton",
    "JointTask",
    "StepResult",
    "Task",
]


class Task:
    """A task ``lower <= e(q) <= upper`` (equality when both are 0).

    Subclasses implement :meth:`evaluate` returning ``(e, J, H)`` with shapes ``(m,)``, ``(m, n)``
    and ``(m, n, n)``; ``H`` may be ``None`` for a linear task. ``gain`` overrides the
    controller's ``kp`` for this task (1/s); useful for limits.
    """

    dim: int = 0
    name: str = "task"
    gain: float | None = None

    def __init__(
        self,
        dim: int,
        lower: np.ndarray | float = 0.0,
        upper: np.ndarray | float = 0.0,
        name: str = "task",
        gain: float | None = None,
    ) -> None:
        self.dim = int(dim)
        self.lower = np.broadcast_to(np.asarray(lower, dtype=float), (self.dim,)).copy()
        self.upper = np.broadcast_to(np.asarray(upper, dtype=float), (self.dim,)).copy()
        if np.any(self.lower > self.upper):
            raise ValueError(f"task {name}: lower > upper")
        self.name = name
        self.gain = gain

    @property
    def is_equality(self) -> np.ndarray:
        """Rows whose bounds coincide."""
        return self.lower == self.upper

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Value, Jacobian and Hessian stack at ``q``."""
        raise NotImplementedError


class FunctionTask(Task):
    """A task from callables ``fun(q) -> (e, J, H)``."""

    def __init__(
        self,
        fun: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        dim: int,
        lower: np.ndarray | float = 0.0,
        upper: np.ndarray | float = 0.0,
        name: str = "task",
        gain: float | None = None,
    ) -> None:
        super().__init__(dim, lower, upper, name, gain)
        self._fun = fun

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Call the wrapped function."""
        return self._fun(q)


class JointTask(Task):
    """Joint angles ``q[idx]`` to ``target`` (rad); linear, so no curvature."""

    def __init__(
        self,
        n: int,
        idx: Sequence[int],
        target: Sequence[float],
        name: str = "joint",
        gain: float | None = None,
    ) -> None:
        super().__init__(len(idx), 0.0, 0.0, name, gain)
        self.idx = np.asarray(idx, dtype=int)
        self.target = np.asarray(target, dtype=float)
        if self.target.shape != self.idx.shape:
            raise ValueError("joint task: one target per joint index")
        self._J = np.zeros((len(idx), n))
        self._J[np.arange(len(idx)), self.idx] = 1.0

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
        """``e = q[idx] - target``."""
        return q[self.idx] - self.target, self._J, None


@dataclass
class HNewtonParams:
    """Parameters of the hierarchical Newton controller (units in brackets).

    Defaults for the points the paper leaves open (``docs/hnewton.md`` M8):

    * D1 ``switch_reading="A"``: the switch ([HN eq. 21]) tests the optimization-scaled GN slack,
      ``||Δt w^GN||² > ν`` with ``ν = 1e-12 Δt²`` (i.e. ``||w^GN|| > 1e-6``); ``"B"`` tests
      ``||w^GN||² > ν``. GN is solved first in the same cycle (two solves per cycle).
    * D2 the trust region is a velocity box ``v_max`` [rad/s] (``ρ = v_max Δt`` per step);
      ``adaptive_tr`` enables the Nocedal-Wright ratio rule, evaluated one cycle late.
    * D3 [HN eq. 30] uses ``ė_{k-1} = J(q_k) q̇_{k-1}``, no feed-forward.
    * D4 ``eps = 1e-9`` clamp, ``bfgs_b0 = 1e-3`` (B₀ = b0·I), Powell damping 0.2/0.8.
    * D5 ``multipliers_from="previous"``: ``Ĥ`` uses the multipliers of the previous cycle
      (SQP style); ``"gn"`` uses the current cycle's GN solve instead.
    * D6 ``lambda_scale="dt"`` (paper: ``λ^optim = Δt λ^ctrl``, [HN eq. 19]) or ``"inv_kp"``
      (``λ^ctrl/K_p``).
    * D7 ``switch`` applies to every augmented variant; ``"always"``/``"never"`` for ablations.
    """

    method: str = "newton"
    dt: float = 0.01  # s
    kp: float = 10.0  # 1/s (P) or 1/s² (PD)
    kd: float | None = None  # 1/s; None selects the P controller
    vmax: float | np.ndarray = 10.0  # rad/s, trust-region box on q̇
    lm_mu: float = 0.3
    eps: float = 1e-9
    switch: str = "residual"  # "residual" | "always" | "never"
    switch_reading: str = "A"
    nu: float | None = None  # default 1e-12 Δt²
    lambda_scale: str = "dt"
    multipliers_from: str = "previous"
    bfgs_b0: float = 1e-3
    adaptive_tr: bool = False
    tr_min: float = 1e-3  # rad/s, adaptive lower bound
    tr_max: float | None = None  # rad/s, adaptive upper bound (default: vmax)
    backend: str = "daqp"

    def __post_init__(self) -> None:
        check_method(self.method, self.switch)
        if self.switch_reading not in ("A", "B"):
            raise ValueError("switch_reading must be 'A' or 'B'")
        if self.lambda_scale not in ("dt", "inv_kp"):
            raise ValueError("lambda_scale must be 'dt' or 'inv_kp'")
        if self.multipliers_from not in ("previous", "gn"):
            raise ValueError("multipliers_from must be 'previous' or 'gn'")
        if self.dt <= 0 or self.kp <= 0:
            raise ValueError("dt and kp must be positive")
        if self.nu is None:
            self.nu = 1e-12 * self.dt**2

    def newton_settings(self) -> NewtonSettings:
        """The shared cycle's settings (multiplier scale ``Δt`` or ``1/K_p``)."""
        assert self.nu is not None
        return NewtonSettings(
            method=self.method,
            dt=self.dt,
            multiplier_scale=self.dt if self.lambda_scale == "dt" else 1.0 / self.kp,
            nu=self.nu,
            switch=self.switch,
            switch_reading=self.switch_reading,
            lm_mu=self.lm_mu,
            eps=self.eps,
            bfgs_b0=self.bfgs_b0,
        )


@dataclass
class StepResult:
    """Outcome of one control cycle."""

    qdot: np.ndarray  # rad/s
    x: np.ndarray  # full decision vector (q̇ and extras)
    task_slacks: list[np.ndarray]  # w^ctrl per task level
    gn_slack_norms: np.ndarray  # ||w^GN_l|| per task level
    augmented: list[bool]
    result: HLSPResult
    errors: list[np.ndarray] = field(default_factory=list)  # e_l(q) before the step


class HierarchicalNewton(NewtonCore):
    """Prioritized velocity controller: ``levels[0]`` has the highest priority.

    Parameters
    ----------
    levels:
        Task levels (each a list of :class:`Task`), highest priority first.
    n:
        Number of configuration variables ``q``.
    params:
        :class:`HNewtonParams`.
    n_extra:
        Extra decision variables appended after ``q̇`` (e.g. torques); tasks do not see them.
    constraints:
        ``constraints(q, qdot_prev) -> list[(A, lower, upper)]`` over ``x = (q̇, extras)``: hard
        rows placed with the trust-region box on the top level (equation of motion, limits).
    """

    def __init__(
        self,
        levels: Sequence[Sequence[Task]],
        n: int,
        params: HNewtonParams | None = None,
        *,
        n_extra: int = 0,
        constraints: Callable[[np.ndarray, np.ndarray], list] | None = None,
    ) -> None:
        if not levels or any(len(lv) == 0 for lv in levels):
            raise ValueError("need at least one level and no empty level")
        self.levels = [list(lv) for lv in levels]
        self.p = params or HNewtonParams()
        super().__init__(self.p.newton_settings(), n, len(self.levels))
        self.n_extra = int(n_extra)
        self.nx = self.n + self.n_extra
        self.constraints = constraints
        self.solver = HLSPSolver(self.p.backend)
        self.gn_solver = HLSPSolver(self.p.backend, multipliers=self.p.multipliers_from == "gn")
        self.dims = [sum(t.dim for t in lv) for lv in self.levels]
        self.reset()

    def reset(self) -> None:
        """Forget multipliers, BFGS matrices, warm starts and the previous velocity."""
        self.reset_core()
        self.qdot_prev = np.zeros(self.n)
        self.vmax = np.broadcast_to(np.asarray(self.p.vmax, dtype=float), (self.n,)).copy()
        self._tr_pred: tuple[float, float, bool] | None = None
        self.solver.reset()
        self.gn_solver.reset()

    # ------------------------------------------------------------------------------ helpers
    def evaluate(self, q: np.ndarray) -> list[LevelEval]:
        """Stacked ``(e, J, H)`` per level (H zero for linear tasks)."""
        out = []
        for lv in self.levels:
            es, Js, Hs = [], [], []
            for t in lv:
                e, J, H = t.evaluate(q)
                e = np.atleast_1d(np.asarray(e, dtype=float))
                J = np.atleast_2d(np.asarray(J, dtype=float))
                if J.shape != (t.dim, self.n):
                    raise ValueError(
                        f"task {t.name}: Jacobian shape {J.shape}, expected ({t.dim}, {self.n})"
                    )
                es.append(e)
                Js.append(J)
                Hs.append(np.zeros((t.dim, self.n, self.n)) if H is None else np.asarray(H))
            out.append((np.concatenate(es), np.vstack(Js), np.concatenate(Hs, axis=0)))
        return out

    def _targets(
        self, ev: list[LevelEval], qdot_prev: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Velocity bounds ``[lo, up]`` of ``J q̇`` per level (P, or the PD of [HN eq. 30])."""
        p = self.p
        out = []
        for lv, (e, J, _) in zip(self.levels, ev, strict=True):
            lo_t = np.concatenate([t.lower for t in lv])
            up_t = np.concatenate([t.upper for t in lv])
            gains = np.concatenate(
                [np.full(t.dim, t.gain if t.gain is not None else np.nan) for t in lv]
            )
            eq = lo_t == up_t
            if p.kd is None:
                k = np.where(np.isnan(gains), p.kp, gains)
                lo, up = k * (lo_t - e), k * (up_t - e)
            else:
                # [HN eq. 30]: ė^ctrl = (1 - K_d Δt) J q̇_{k-1} - K_p Δt (e - target)
                pd = (1.0 - p.kd * p.dt) * (J @ qdot_prev) - p.kp * p.dt * (e - lo_t)
                k = np.where(np.isnan(gains), math.sqrt(p.kp), gains)
                lo = np.where(eq, pd, k * (lo_t - e))
                up = np.where(eq, pd, k * (up_t - e))
            out.append((lo, up))
        return out

    def _pad(self, M: np.ndarray) -> np.ndarray:
        if self.n_extra == 0:
            return M
        return np.hstack([M, np.zeros((M.shape[0], self.n_extra))])

    def _top(self, q: np.ndarray, qdot_prev: np.ndarray) -> Level:
        A = [self._pad(np.eye(self.n))]
        lo, up = [-self.vmax], [self.vmax.copy()]
        if self.constraints is not None:
            for Ac, lc, uc in self.constraints(q, qdot_prev):
                Ac = np.atleast_2d(np.asarray(Ac, dtype=float))
                if Ac.shape[1] != self.nx:
                    raise ValueError(f"constraint rows need {self.nx} columns, got {Ac.shape}")
                A.append(Ac)
                lo.append(np.asarray(lc, dtype=float).ravel())
                up.append(np.asarray(uc, dtype=float).ravel())
        return Level(np.vstack(A), np.concatenate(lo), np.concatenate(up), "top")

    # ------------------------------------------------------------------------------ step
    def step(self, q: np.ndarray, qdot_prev: np.ndarray | None = None) -> StepResult:
        """One control cycle at configuration ``q``; returns the velocity command."""
        q = np.asarray(q, dtype=float)
        if q.shape != (self.n,):
            raise ValueError(f"q must have shape ({self.n},), got {q.shape}")
        qd_prev = self.qdot_prev if qdot_prev is None else np.asarray(qdot_prev, dtype=float)
        ev = self.evaluate(q)
        if self.p.method == "bfgs":
            self.bfgs_update(q, ev)
        if self.p.adaptive_tr:
            self._adapt_trust_region(ev)
        targets = self._targets(ev, qd_prev)
        top = self._top(q, qd_prev)
        task_levels = [
            Level(self._pad(J), lo, up) for (_, J, _), (lo, up) in zip(ev, targets, strict=True)
        ]
        augmented = [False] * len(self.levels)
        gn_norms = np.zeros(len(self.levels))
        lam_src = self.lam
        if self.p.method != "gn":
            gn = self.gn_solver.solve([top, *task_levels])
            gn_norms = np.array([np.linalg.norm(w) for w in gn.slacks[1:]])
            if self.p.multipliers_from == "gn":
                lam_src = task_multipliers(gn.multipliers, self.dims)
            levels = [top]
            for li, lev in enumerate(task_levels):
                if self.switch_on(gn_norms[li]):
                    R = self._pad(self.level_factor(li, ev, lam_src))
                    z = np.zeros(R.shape[0])
                    lev = Level(np.vstack([lev.A, R]), np.r_[lev.lower, z], np.r_[lev.upper, z])
                    augmented[li] = True
                levels.append(lev)
        else:
            levels = [top, *task_levels]
        res = self.solver.solve(levels)
        if self.p.method == "gn":
            gn_norms = np.array(
                [np.linalg.norm(w[:d]) for w, d in zip(res.slacks[1:], self.dims, strict=True)]
            )
        self.lam = task_multipliers(res.multipliers, self.dims)
        qdot = res.x[: self.n].copy()
        if self.p.adaptive_tr:
            self._record_prediction(ev, qdot, lam_src)
        self.remember(q, ev)
        self.qdot_prev = qdot
        slacks = [w[:d].copy() for w, d in zip(res.slacks[1:], self.dims, strict=True)]
        return StepResult(
            qdot, res.x.copy(), slacks, gn_norms, augmented, res, [e for (e, _, _) in ev]
        )

    # ------------------------------------------------------------------------------ trust region
    def _merit(self, ev: list[LevelEval]) -> float:
        """Total task violation ``Σ_l ½||e_l - clip(e_l)||²``."""
        tot = 0.0
        for lv, (e, _, _) in zip(self.levels, ev, strict=True):
            lo = np.concatenate([t.lower for t in lv])
            up = np.concatenate([t.upper for t in lv])
            v = e - np.clip(e, lo, up)
            tot += 0.5 * float(v @ v)
        return tot

    def _record_prediction(
        self, ev: list[LevelEval], qdot: np.ndarray, lam: list[list[np.ndarray]] | None
    ) -> None:
        """The merit now and the one the linear (+ Newton) model predicts after the step."""
        dq = self.p.dt * qdot
        pred = 0.0
        for li, (lv, (e, J, _)) in enumerate(zip(self.levels, ev, strict=True)):
            lo = np.concatenate([t.lower for t in lv])
            up = np.concatenate([t.upper for t in lv])
            en = e + J @ dq
            v = en - np.clip(en, lo, up)
            pred += 0.5 * float(v @ v)
            if lam is not None and self.p.method == "newton":
                pred += 0.5 * float(dq @ self.hierarchical_hessian(ev, lam, li) @ dq)
        box_active = bool(np.any(np.abs(qdot) >= self.vmax * (1 - 1e-9)))
        self._tr_pred = (self._merit(ev), pred, box_active)

    def _adapt_trust_region(self, ev: list[LevelEval]) -> None:
        """The shared ratio rule on the total task violation, one cycle late (decision D2)."""
        if self._tr_pred is None:
            return
        m0, pred, box_active = self._tr_pred
        vmax0 = np.broadcast_to(np.asarray(self.p.vmax, dtype=float), (self.n,))
        cap = vmax0 if self.p.tr_max is None else np.full(self.n, self.p.tr_max)
        self.vmax = adapt_trust_region(
            self.vmax, m0, pred, self._merit(ev), box_active, self.p.tr_min, cap
        )
