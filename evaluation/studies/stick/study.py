"""Stick-robot scenarios for the hierarchical Newton study ([HN sec. VI-A]; ``docs/hnewton.md``).

A scenario YAML (``scenarios/*.yaml``, loaded strictly through :func:`residual_quad.configs.load`)
describes a planar arm, its task hierarchy and the controller settings; the runner
simulates it with every requested method (``gn``, ``lm``, ``bfgs``, ``newton``), computes the
brute-force optimum of every level by a global search over joint space that respects the
priorities, and reports per method: final task error per level, the gap to the optimum, total
variation of q̇ (``Σ|Δq̇|·Δt``), max |q̇|, convergence time and whether a higher level was
violated. Kinematic scenarios integrate ``q ← q + Δt q̇``; dynamic ones (``dynamic: true``) put the
discretized equation of motion and torque limits on the top level (decision ``x = (q̇, τ)``) and
integrate the rod dynamics with the commanded torque (semi-implicit Euler).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.prioritized import (
    METHODS,
    HierarchicalNewton,
    HNewtonParams,
    JointTask,
    Task,
)
from residual_quad.evaluation.studies.stick.robot import StickRobot

HLSP_BACKENDS = ("daqp", "numpy")  # as the HLSP solver accepts them
MAX_STEPS = 1_000_000  # simulation steps per method (duration / dt)
MAX_GRID_POINTS = 20_000_000  # brute_grid ** links of the optimum search (memory)
CONV_TOL = 1e-3  # convergence: |e_l| - e*_l below this for every level
SETTLE_TIME = 0.25  # s, a converged run stays within CONV_TOL at least this long


@dataclass
class TaskSpec:
    """One task of a level: ``point`` (tip of ``link`` or a point at ``frac`` of it, to
    ``target`` in m) or ``joint`` (joints ``joints``, 1-based, to ``target`` in rad)."""

    task: str
    target: list[float]
    link: int | None = None
    frac: float = 1.0
    joints: list[int] | None = None


@dataclass
class Scenario:
    """A stick-robot scenario (YAML keys = field names; unknown keys are errors).

    ``levels`` is highest priority first, each level a list of tasks (a single task may be given
    without the list); ``methods`` may also be a comma-separated string.
    """

    name: str
    links: list[float]  # m
    q0: list[float]  # rad
    levels: list[list[TaskSpec] | TaskSpec]
    dt: float = 0.01  # s
    duration: float = 5.0  # s
    kp: float = 10.0  # 1/s (P) or 1/s² (PD)
    kd: float | None = None  # 1/s, PD in the velocity domain ([HN eq. 30]) when set
    vmax: float = 10.0  # rad/s
    lm_mu: float = 0.3
    eps: float = 1e-9
    switch: str = "residual"
    switch_reading: str = "A"
    lambda_scale: str = "dt"
    multipliers_from: str = "previous"
    adaptive_tr: bool = False
    backend: str = "daqp"
    methods: list[str] | str = field(default_factory=lambda: list(METHODS))
    dynamic: bool = False
    masses: list[float] | None = None  # kg per link (default 1)
    qdot0: list[float] | None = None  # rad/s
    tau_max: float | list[float] | None = None  # N m
    brute_grid: int = 61  # grid points per joint for the optimum search
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a scenario needs a non-empty name, got {self.name!r}")
        if not isinstance(self.levels, list) or not all(
            isinstance(lv, TaskSpec) or (isinstance(lv, list | tuple) and lv) for lv in self.levels
        ):
            raise ValueError("levels is a list of non-empty task lists (or single tasks)")
        self.levels = [[lv] if isinstance(lv, TaskSpec) else list(lv) for lv in self.levels]
        if isinstance(self.methods, str):
            self.methods = [m.strip() for m in self.methods.split(",") if m.strip()]
        _check_numbers("links", self.links, positive=True)
        _check_numbers("q0", self.q0)
        if self.qdot0 is not None:
            _check_numbers("qdot0", self.qdot0)
        if self.masses is not None:
            _check_numbers("masses", self.masses, positive=True)
            if len(self.masses) != len(self.links):
                raise ValueError("masses needs one entry per link")
        if self.tau_max is not None:
            tau = self.tau_max if isinstance(self.tau_max, list) else [self.tau_max]
            _check_numbers("tau_max", tau, positive=True)
            if len(tau) not in (1, len(self.links)):
                raise ValueError("tau_max is one number or one per link (N m)")
        for key in ("dt", "duration", "kp", "vmax", "lm_mu", "eps"):
            _check_numbers(key, [getattr(self, key)], positive=True)
        if self.kd is not None:
            _check_numbers("kd", [self.kd], positive=True)
        if self.duration / self.dt > MAX_STEPS:
            raise ValueError(f"duration / dt must be at most {MAX_STEPS} steps")
        n = len(self.links)
        if not isinstance(self.brute_grid, int) or not 2 <= self.brute_grid:
            raise ValueError(f"brute_grid must be an integer >= 2, got {self.brute_grid!r}")
        if self.brute_grid**n > MAX_GRID_POINTS:
            raise ValueError(
                f"brute_grid^links = {self.brute_grid}^{n} exceeds {MAX_GRID_POINTS} grid points"
            )
        if len(self.q0) != n:
            raise ValueError(f"q0 has {len(self.q0)} entries for {n} links")
        if self.qdot0 is not None and len(self.qdot0) != n:
            raise ValueError("qdot0 needs one entry per link")
        if not self.levels:
            raise ValueError("a scenario needs at least one level")
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown methods {bad}; valid: {list(METHODS)}")
        for lv in self.levels:
            for t in lv:
                _check_numbers("target", t.target)
                if t.task == "point":
                    _check_numbers("frac", [t.frac])
                    if t.link is None or not 1 <= t.link <= n:
                        raise ValueError(f"point task needs link in 1..{n}, got {t.link}")
                    if len(t.target) != 2:
                        raise ValueError("point task target must be [x, y]")
                elif t.task == "joint":
                    if not t.joints or any(not 1 <= j <= n for j in t.joints):
                        raise ValueError(f"joint task needs joints in 1..{n}")
                    if len(t.target) != len(t.joints):
                        raise ValueError("joint task: one target per joint")
                else:
                    raise ValueError(f"unknown task type {t.task!r}; use point or joint")
        # the controller's settings (switch, switch_reading, lambda_scale, ...) checked now
        HNewtonParams(
            dt=self.dt,
            kp=self.kp,
            kd=self.kd,
            vmax=self.vmax,
            lm_mu=self.lm_mu,
            eps=self.eps,
            switch=self.switch,
            switch_reading=self.switch_reading,
            lambda_scale=self.lambda_scale,
            multipliers_from=self.multipliers_from,
            adaptive_tr=self.adaptive_tr,
            backend=self.backend,
        )
        if self.backend not in HLSP_BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {list(HLSP_BACKENDS)}")

    def robot(self) -> StickRobot:
        """The arm."""
        return StickRobot(np.array(self.links), None if self.masses is None else self.masses)


def _check_numbers(key: str, values: Any, positive: bool = False) -> None:
    """``ValueError`` unless ``values`` is a non-empty list of finite (positive) real numbers."""
    ok = (
        isinstance(values, list | tuple)
        and len(values) > 0
        and all(
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and (v > 0 or not positive)
            for v in values
        )
    )
    if not ok:
        what = "positive finite" if positive else "finite"
        raise ValueError(f"{key} must be {what} number(s), got {values!r}")


def scenario_from_dict(data: dict[str, Any]) -> Scenario:
    """Typed scenario from a parsed YAML mapping (strict keys)."""
    return configs.load(Scenario, data)


def scenario_path(spec: str | Path) -> Path:
    """The one resolver of scenario files: an existing path, else a shipped scenario by name
    (``s2`` -> ``scenarios/s2.yaml``; a unique prefix before ``_`` also works: ``s4`` ->
    ``scenarios/s4_dynamic.yaml``)."""
    p = Path(spec)
    if p.is_file():
        return p
    d = Path(str(resources.files(__package__).joinpath("scenarios")))
    name = str(spec)
    if Path(name).name == name and not any(c in name for c in "*?["):  # a plain shipped name
        for cand in (d / name, d / f"{name}.yaml", *sorted(d.glob(f"{name}_*.yaml"))):
            if cand.is_file():
                return cand
    shipped = sorted(x.stem for x in d.glob("*.yaml"))
    raise FileNotFoundError(f"no scenario file {name!r} (shipped: {shipped})")


def load_scenario(spec: str | Path) -> Scenario:
    """Load a scenario from a YAML path or a shipped name."""
    return configs.load(Scenario, scenario_path(spec))


# ----------------------------------------------------------------------------------- tasks
class PointTask(Task):
    """Point at ``frac`` of link ``link`` (0-based) to ``target`` (m)."""

    def __init__(self, robot: StickRobot, link: int, target: np.ndarray, frac: float = 1.0):
        super().__init__(2, 0.0, 0.0, name=f"point{link + 1}")
        self.robot, self.link, self.frac = robot, link, frac
        self.target = np.asarray(target, dtype=float)

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``e = p(q) - target`` with its Jacobian and Hessian."""
        p, J, H = self.robot.point_all(q, self.link, self.frac)
        return p - self.target, J, H


def make_tasks(scn: Scenario, robot: StickRobot) -> list[list[Task]]:
    """Controller tasks of a scenario."""
    out: list[list[Task]] = []
    for lv in scn.levels:
        tasks: list[Task] = []
        for t in lv:
            if t.task == "point":
                assert t.link is not None
                tasks.append(PointTask(robot, t.link - 1, np.array(t.target), t.frac))
            else:
                assert t.joints is not None
                tasks.append(JointTask(robot.n, [j - 1 for j in t.joints], t.target))
        out.append(tasks)
    return out


def level_errors_batch(scn: Scenario, robot: StickRobot, Q: np.ndarray) -> np.ndarray:
    """``||e_l(q)||`` for a batch of configurations ``Q`` (N×n) -> (N, p)."""
    th = np.cumsum(Q, axis=1)
    cs = np.stack([np.cos(th), np.sin(th)], axis=2) * robot.lengths[None, :, None]
    tips = np.cumsum(cs, axis=1)  # (N, n, 2)
    out = np.zeros((Q.shape[0], len(scn.levels)))
    for li, lv in enumerate(scn.levels):
        sq = np.zeros(Q.shape[0])
        for t in lv:
            if t.task == "point":
                assert t.link is not None
                k = t.link - 1
                base = tips[:, k - 1] if k > 0 else np.zeros((Q.shape[0], 2))
                p = base + t.frac * cs[:, k]
                sq += np.sum((p - np.asarray(t.target)) ** 2, axis=1)
            else:
                assert t.joints is not None
                d = Q[:, [j - 1 for j in t.joints]] - np.asarray(t.target)
                sq += np.sum(d**2, axis=1)
        out[:, li] = np.sqrt(sq)
    return out


def brute_force_optimum(
    scn: Scenario, rounds: int = 6, keep: int = 6, refine: bool = True
) -> np.ndarray:
    """Optimal error norm of every level by a global grid search with priorities, then zooming.

    Level by level, the candidates are restricted to those within ``δ`` of the level's best
    value (``δ`` = Lipschitz bound × half the grid diagonal, so the grid point next to the true
    optimal set always survives); the best ``keep`` survivors seed a finer grid in the next
    round. The grid result is then refined locally by Newton iterations in optimization mode
    (exact numpy HLSP) and the refinement is kept only if it is lexicographically better.
    """
    robot = scn.robot()
    n = robot.n
    lip = float(robot.lengths.sum()) + 1.0  # |∇||e||| <= reach (+1 for joint tasks)
    N = scn.brute_grid
    axes = [np.linspace(-math.pi, math.pi, N, endpoint=False)] * n
    Q = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, n)
    h = 2 * math.pi / N
    best = None
    for _ in range(rounds):
        E = level_errors_batch(scn, robot, Q)
        delta = lip * h * math.sqrt(n) / 2
        mask = np.ones(Q.shape[0], dtype=bool)
        for li in range(E.shape[1]):
            emin = E[mask, li].min()
            mask &= E[:, li] <= emin + delta
        idx = np.flatnonzero(mask)
        order = np.lexsort(tuple(E[idx, li] for li in range(E.shape[1] - 1, -1, -1)))
        seeds = Q[idx[order[:keep]]]
        best = E[idx[order[0]]]
        # finer grid around the seeds
        m = 9
        off = np.linspace(-h, h, m)
        local = np.stack(np.meshgrid(*([off] * n), indexing="ij"), axis=-1).reshape(-1, n)
        Q = (seeds[:, None, :] + local[None, :, :]).reshape(-1, n)
        h = 2 * h / (m - 1)
    assert best is not None
    if not refine:
        return best
    # local refinement: the S-HLSP Newton iteration in optimization mode (Δt = 1, K_p = 1,
    # trust region 0.05 rad per iteration, exact numpy HLSP) from the best grid point
    opt = HierarchicalNewton(
        make_tasks(scn, robot),
        n,
        HNewtonParams(method="newton", dt=1.0, kp=1.0, vmax=0.05, backend="numpy"),
    )
    q = seeds[0].copy()
    for _ in range(400):
        dq = opt.step(q).qdot
        q = q + dq
        if np.abs(dq).max() < 1e-12:
            break
    refined = level_errors_batch(scn, robot, q[None, :])[0]
    for a, b in zip(refined, best, strict=True):  # keep the lexicographically better one
        if a < b - 1e-12:
            return refined
        if a > b + 1e-9:
            return best
    return refined


# ----------------------------------------------------------------------------------- runner
@dataclass
class MethodRun:
    """Trajectories and metrics of one method on one scenario."""

    method: str
    t: np.ndarray  # s, (K,)
    q: np.ndarray  # rad, (K+1, n)
    qdot: np.ndarray  # rad/s, (K, n)
    errors: np.ndarray  # ||e_l|| after each step, (K+1, p)
    augmented: np.ndarray  # (K, p) bool
    tau: np.ndarray | None = None  # N m, (K, n) for dynamic scenarios

    def metrics(self, optimum: np.ndarray, dt: float) -> dict[str, Any]:
        """Final errors, gap to the optimum, TV, max |q̇|, convergence time, priority flag."""
        final = self.errors[-1]
        gap = final - optimum
        tv = float(np.abs(np.diff(self.qdot, axis=0)).sum() * dt)
        within = np.all(self.errors - optimum[None, :] < CONV_TOL, axis=1)
        conv = None
        if within[-1]:
            bad = np.flatnonzero(~within)
            k = 0 if bad.size == 0 else int(bad[-1]) + 1
            # must then stay settled for SETTLE_TIME (a chattering run can pass through the band)
            if (len(within) - 1 - k) * dt >= SETTLE_TIME:
                conv = float(k * dt)
        violated = bool(np.any(gap[:-1] > CONV_TOL)) if gap.size > 1 else False
        out = {
            "final_error": final.tolist(),
            "optimum": optimum.tolist(),
            "gap": gap.tolist(),
            "total_variation": tv,
            "max_abs_qdot": float(np.abs(self.qdot).max()),
            "converge_time": conv,
            "higher_level_violated": violated,
            "augmented_fraction": self.augmented.mean(axis=0).tolist(),
        }
        if self.tau is not None:
            out["max_abs_tau"] = float(np.abs(self.tau).max())
        return out


def controller_for(scn: Scenario, method: str, **overrides: Any) -> HierarchicalNewton:
    """The hierarchical Newton controller of a scenario for ``method``."""
    robot = scn.robot()
    kw = dict(
        method=method,
        dt=scn.dt,
        kp=scn.kp,
        kd=scn.kd,
        vmax=scn.vmax,
        lm_mu=scn.lm_mu,
        eps=scn.eps,
        switch=scn.switch,
        switch_reading=scn.switch_reading,
        lambda_scale=scn.lambda_scale,
        multipliers_from=scn.multipliers_from,
        adaptive_tr=scn.adaptive_tr,
        backend=scn.backend,
    )
    kw.update(overrides)
    params = HNewtonParams(**kw)
    tasks = make_tasks(scn, robot)
    if not scn.dynamic:
        return HierarchicalNewton(tasks, robot.n, params)
    n = robot.n
    tau_max = np.broadcast_to(
        np.asarray(np.inf if scn.tau_max is None else scn.tau_max, dtype=float), (n,)
    )

    def eom(q: np.ndarray, qdot_prev: np.ndarray) -> list:
        # M (q̇_k - q̇_{k-1})/Δt + h(q_k, q̇_{k-1}) = τ_k   ([HN sec. V-C])
        M = robot.mass_matrix(q)
        b = M @ qdot_prev / params.dt - robot.bias(q, qdot_prev)
        A = np.hstack([M / params.dt, -np.eye(n)])
        lim = np.hstack([np.zeros((n, n)), np.eye(n)])
        return [(A, b, b), (lim, -tau_max, tau_max)]

    return HierarchicalNewton(tasks, n, params, n_extra=n, constraints=eom)


def run_method(scn: Scenario, method: str, **overrides: Any) -> MethodRun:
    """Simulate ``scn`` under ``method`` (controller overrides as keyword arguments)."""
    robot = scn.robot()
    ctrl = controller_for(scn, method, **overrides)
    dt = ctrl.p.dt
    K = int(round(scn.duration / dt))
    n = robot.n
    q = np.array(scn.q0, dtype=float)
    qd = np.zeros(n) if scn.qdot0 is None else np.array(scn.qdot0, dtype=float)
    ctrl.qdot_prev = qd.copy()
    Qs, QDs, AUG, TAUs = [q.copy()], [], [], []
    for _ in range(K):
        st = ctrl.step(q, qd)
        if scn.dynamic:
            tau = st.x[n:]
            qd = qd + dt * robot.forward_dynamics(q, qd, tau)
            TAUs.append(tau.copy())
        else:
            qd = st.qdot
        q = q + dt * qd
        Qs.append(q.copy())
        QDs.append(qd.copy())
        AUG.append(st.augmented)
    Q = np.array(Qs)
    errors = level_errors_batch(scn, robot, Q)
    return MethodRun(
        method,
        dt * np.arange(1, K + 1),
        Q,
        np.array(QDs),
        errors,
        np.array(AUG, dtype=bool),
        np.array(TAUs) if scn.dynamic else None,
    )


def run_scenario(
    scn: Scenario, methods: list[str] | None = None, **overrides: Any
) -> tuple[dict[str, Any], dict[str, MethodRun]]:
    """Run every method; returns the JSON-ready report and the raw runs."""
    methods = methods or scn.methods
    optimum = brute_force_optimum(scn)
    runs = {m: run_method(scn, m, **overrides) for m in methods}
    report = {
        "scenario": scn.name,
        "description": scn.description,
        "dt": scn.dt,
        "duration": scn.duration,
        "dynamic": scn.dynamic,
        "optimum": optimum.tolist(),
        "methods": {m: r.metrics(optimum, scn.dt) for m, r in runs.items()},
    }
    return report, runs


def format_report(report: dict[str, Any]) -> str:
    """Plain-text table of a scenario report."""
    opt = ", ".join(f"{v:.5f}" for v in report["optimum"])
    lines = [f"scenario {report['scenario']}: optimum per level [{opt}]"]
    lines.append(
        f"{'method':<8} {'final |e_l|':<28} {'TV':>9} {'max|qd|':>8} {'t_conv':>7}  violated"
    )
    for m, r in report["methods"].items():
        fe = ", ".join(f"{v:.3e}" for v in r["final_error"])
        tc = "-" if r["converge_time"] is None else f"{r['converge_time']:.2f}"
        lines.append(
            f"{m:<8} {fe:<28} {r['total_variation']:9.3f} {r['max_abs_qdot']:8.3f} {tc:>7}  "
            f"{r['higher_level_violated']}"
        )
    return "\n".join(lines)


def plot_runs(
    scn: Scenario, runs: dict[str, MethodRun], optimum: np.ndarray, out_dir: str | Path
) -> list[Path]:
    """Task error gap per level and |q̇| over time per method (PNG files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = len(scn.levels)
    fig, axes = plt.subplots(p + 1, 1, figsize=(7, 2.4 * (p + 1)), sharex=True)
    for m, r in runs.items():
        tt = np.r_[0.0, r.t]
        for li in range(p):
            gap = np.maximum(r.errors[:, li] - optimum[li], 1e-16)
            axes[li].semilogy(tt, gap, label=m)
        axes[p].semilogy(r.t, np.maximum(np.linalg.norm(r.qdot, axis=1), 1e-16), label=m)
    for li in range(p):
        axes[li].set_ylabel(f"|e_{li + 1}| - e*")
        axes[li].grid(True, which="both", alpha=0.3)
    axes[p].set_ylabel("|qdot| (rad/s)")
    axes[p].set_xlabel("t (s)")
    axes[p].grid(True, which="both", alpha=0.3)
    axes[0].legend(ncol=4, fontsize=8)
    axes[0].set_title(f"{scn.name}: gap to the brute-force optimum and joint speed")
    fig.tight_layout()
    path = out / f"{scn.name}_errors.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def run_acceleration_pd(scn: Scenario, damping: float = 0.0) -> np.ndarray:
    """Reference for S1: the acceleration-domain PD ([HN eq. 3]) on a single-level scenario.

    ``J q̈ = -K_p e - K_d ė - J̇ q̇`` solved in the least-squares sense (with optional
    ``damping² ||q̈||²``), semi-implicit Euler. Returns ``||e||`` after every step, shape (K+1,).
    """
    if scn.kd is None or len(scn.levels) != 1:
        raise ValueError("the acceleration PD reference needs kd and a single level")
    robot = scn.robot()
    tasks = make_tasks(scn, robot)[0]
    q = np.array(scn.q0, dtype=float)
    qd = np.zeros(robot.n) if scn.qdot0 is None else np.array(scn.qdot0, dtype=float)
    K = int(round(scn.duration / scn.dt))
    errs = [level_errors_batch(scn, robot, q[None, :])[0, 0]]
    for _ in range(K):
        es, Js, drift = [], [], []
        for t in tasks:
            e, J, H = t.evaluate(q)
            es.append(e)
            Js.append(J)
            drift.append(np.zeros(len(e)) if H is None else np.einsum("ijk,j,k->i", H, qd, qd))
        e, J, dr = np.concatenate(es), np.vstack(Js), np.concatenate(drift)
        rhs = -scn.kp * e - scn.kd * (J @ qd) - dr
        A = np.vstack([J, damping * np.eye(robot.n)])
        b = np.concatenate([rhs, np.zeros(robot.n)])
        qdd = np.linalg.lstsq(A, b, rcond=None)[0]
        qd = qd + scn.dt * qdd
        q = q + scn.dt * qd
        errs.append(level_errors_batch(scn, robot, q[None, :])[0, 0])
    return np.array(errs)
