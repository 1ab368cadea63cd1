"""``rquad bench --sections hlsp``: HLSP solve times (daqp vs numpy) and one Newton step on S3."""

from __future__ import annotations

from ctypes import c_int

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow, median_time_us


def bench_problem(n: int, seed: int = 0) -> list:
    """A box plus 3 levels (equalities, inequalities, posture) on ``n`` variables."""
    from residual_quad.controllers.prioritized.hlsp import Level

    rng = np.random.default_rng(seed)
    m1, m2 = max(1, n // 3), max(1, n // 2)
    A2 = rng.normal(size=(m2, n))
    c2 = rng.normal(size=m2)
    return [
        Level.box(n, -1.0, 1.0),
        Level.eq(rng.normal(size=(m1, n)), rng.normal(size=m1)),
        Level(A2, c2 - 0.1, c2 + 0.1),
        Level.eq(np.eye(n), 0.1 * rng.normal(size=n)),
    ]


def _raw_daqp_args(levels: list) -> tuple:
    """The DAQP arrays our backend builds for ``levels`` (to time the bare compiled call)."""
    from residual_quad.controllers.prioritized.hlsp import _needs_slack

    A = np.vstack([lv.A for lv in levels])
    lo = np.concatenate([lv.lower for lv in levels])
    up = np.concatenate([lv.upper for lv in levels])
    n, m = A.shape[1], A.shape[0]
    sl = np.flatnonzero(_needs_slack(A))
    ns = sl.size
    big = np.zeros((ns + m, n + ns))
    big[:ns, :n] = A[sl]
    big[np.arange(ns), n + np.arange(ns)] = -1.0
    keep = np.setdiff1d(np.arange(m), sl)
    big[ns + keep, :n] = A[keep]
    big[ns + sl, n + np.arange(ns)] = 1.0
    bu = np.clip(np.r_[up[sl], up], -1e30, 1e30)
    bl = np.clip(np.r_[lo[sl], lo], -1e30, 1e30)
    bu[ns + sl] = 0.0
    bl[ns + sl] = 0.0
    sense = np.zeros(ns + m, dtype=c_int)
    sense[ns:][bu[ns:] == bl[ns:]] = 5
    bp = np.cumsum([ns, *(lv.A.shape[0] for lv in levels)]).astype(c_int)
    return big, bu, bl, sense, bp


def run(quick: bool = False) -> list[BenchRow]:
    """Measure HLSP solves for n = 3, 8, 10, 38 and one S3 Newton control step.

    "wrapper" rows time one warm :class:`HLSPSolver` per problem (validation, slack reformulation
    and per-level bookkeeping on every call) next to the bare compiled DAQP call.
    """
    import daqp

    from residual_quad.controllers.prioritized.hlsp import HLSPSolver
    from residual_quad.evaluation.studies.stick.study import controller_for, load_scenario

    calls, blocks = (20, 5) if quick else (100, 11)
    rows: list[BenchRow] = []
    for n in (3, 8, 10, 38):
        levels = bench_problem(n)
        c, b = (max(2, calls // 10), blocks) if n == 38 else (calls, blocks)
        big, bu, bl, sense, bp = _raw_daqp_args(levels)

        def raw(big=big, bu=bu, bl=bl, sense=sense, bp=bp) -> object:
            return daqp.solve(None, None, big, bu.copy(), bl.copy(), sense.copy(), break_points=bp)

        t_raw = median_time_us(raw, calls=c, blocks=b)
        fast = HLSPSolver("daqp", multipliers=False, verify=False)
        t_fast = median_time_us(lambda s=fast, lv=levels: s.solve(lv), calls=c, blocks=b)
        full = HLSPSolver("daqp")
        t_full = median_time_us(lambda s=full, lv=levels: s.solve(lv), calls=c, blocks=b)
        ref = HLSPSolver("numpy")
        t_np = median_time_us(lambda s=ref, lv=levels: s.solve(lv), calls=c, blocks=b)
        cold = HLSPSolver("numpy", warm_start=False)
        t_cold = median_time_us(lambda s=cold, lv=levels: s.solve(lv), calls=c, blocks=b)
        tgt = "<= 50 us (n <= 8)" if n <= 8 else ""
        rows += [
            BenchRow("hlsp", f"n={n} daqp compiled call only", t_raw, t_raw / t_np, "numpy"),
            BenchRow("hlsp", f"n={n} daqp x only (wrapper)", t_fast, t_fast / t_np, "numpy", tgt),
            BenchRow(
                "hlsp", f"n={n} daqp + multipliers + KKT check", t_full, t_full / t_np, "numpy"
            ),
            BenchRow("hlsp", f"n={n} numpy warm + multipliers", t_np),
            BenchRow("hlsp", f"n={n} numpy cold + multipliers", t_cold, t_cold / t_np, "numpy"),
        ]
    scn = load_scenario("s3")
    for backend in ("daqp", "numpy"):
        ctrl = controller_for(scn, "newton", backend=backend)
        q = np.array(scn.q0, dtype=float)
        for _ in range(30):  # move into the interesting (augmented) regime
            q = q + scn.dt * ctrl.step(q).qdot
        qs = q.copy()

        def step(ctrl=ctrl, qs=qs) -> object:
            return ctrl.step(qs)

        t = median_time_us(step, calls=max(2, calls // 5), blocks=blocks)
        rows.append(BenchRow("hlsp", f"S3 newton control step ({backend})", t))
    return rows
