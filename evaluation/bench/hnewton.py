"""``rquad bench --sections hnewton``: one hnewton control step and its two small HLSPs.

Rows: the full ``policy`` call of ``hnewton`` per method in nominal flight (target ≤ 300 µs) and
with the priorities binding (90° yaw start on the fast figure-8: tilt box and rotor bounds
active), ``geo`` for scale, and the thrust-vector (3 variables) and allocation (4 rotors)
problems solved by the exact fast solver next to the generic daqp and numpy backends.
"""

from __future__ import annotations

import math
import time

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow, median_time_us


class _Timed:
    """Controller proxy recording the wall time of every ``policy`` call (µs)."""

    def __init__(self, ctl: object):
        self.ctl = ctl
        self.action_mode = ctl.action_mode
        self.times: list[float] = []

    def reset(self, seed: int | None = None) -> None:
        self.ctl.reset(seed)

    def policy(self, obs: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.ctl.policy(obs)
        self.times.append((time.perf_counter() - t0) * 1e6)
        return out


def closed_loop_median_us(name: str, episode_s: float, **kw: object) -> float:
    """Median wall time (µs) of the control steps of one closed-loop episode."""
    from residual_quad.controllers import make_controller
    from residual_quad.episode import run_episode

    label, _, method = name.partition(":")
    timed = _Timed(make_controller(label, None, **({"method": method} if method else {})))
    run_episode(timed, seed=0, episode_s=episode_s, **kw)
    return float(np.median(timed.times))


def run(quick: bool = False) -> list[BenchRow]:
    """Measure the control step and the fast solver against the generic backends."""
    from residual_quad.controllers.prioritized.box_hlsp import BoxHLSP, box_levels
    from residual_quad.controllers.prioritized.hlsp import HLSPSolver
    from residual_quad.controllers.prioritized.quad import PrioritizedAllocator, ThrustVectorNewton
    from residual_quad.envs.airframe import Airframe
    from residual_quad.envs.trajectories import Figure8

    calls, blocks = (30, 5) if quick else (200, 11)
    episode_s = 5.0 if quick else 20.0
    rows: list[BenchRow] = []
    sec = "hnewton"

    # -- full control step, median over a closed-loop episode --------------------------------
    nominal = {"trajectory": "figure8", "payload": "heavy", "wind": "windy"}
    hard = {
        "trajectory": Figure8(period=6.0),
        "payload": "extra",
        "reset_options": {"yaw_offset": math.pi / 2},
    }
    t_geo = closed_loop_median_us("geo", episode_s, **nominal)
    rows.append(BenchRow(sec, "geo step, figure8 heavy windy (reference)", t_geo))
    for label, kw in (("figure8 heavy windy", nominal), ("yaw90 fig8x2 extra", hard)):
        for method in ("gn", "lm", "bfgs", "newton"):
            t = closed_loop_median_us(f"hnewton:{method}", episode_s, **kw)
            rows.append(
                BenchRow(sec, f"hnewton:{method} step, {label}", t, t / t_geo, "geo", "<= 300 us")
            )

    # -- the two small HLSPs: fast exact solver vs the generic backends ---------------------
    frame = Airframe()
    tv = ThrustVectorNewton(frame, 0.01)
    q = np.array([frame.hover_thrust * 1.3, 0.3, -0.2])
    alloc = PrioritizedAllocator(frame)
    cases = []
    (e_v, _, _), (e_h, _, _) = tv.evaluate(q, np.zeros(3))
    a_now = np.concatenate([e_h, e_v])  # the acceleration q gives (heading frame, m/s²)
    targets = (
        ("steps inside the trust region", a_now + np.array([0.2, -0.1, 0.1])),
        ("tilt box + trust region active", np.array([25.0, -9.0, 0.0])),
    )
    for name, a_des in targets:
        ev = tv.evaluate(q, a_des)
        lo, up = tv.velocity_box(q)
        levs = [(J, -tv.k * e) for e, J, _ in ev]
        cases.append((f"thrust vector n=3, {name}", 3, lo, up, levs))
    for name, (T, tau) in (
        ("feasible", (9.3, (0.05, -0.02, 0.01))),
        ("yaw squeezed", (9.3, (0.3, 0.1, 0.5))),
    ):
        levs = [
            (alloc.A_rp, np.array(tau[:2])),
            (alloc.A_T, np.array([T])),
            (alloc.A_yaw, np.array([tau[2]])),
        ]
        cases.append((f"allocation n=4, {name}", 4, alloc.lower, alloc.upper, levs))
    for name, n, lo, up, levs in cases:
        fast = BoxHLSP(n)
        t_fast = median_time_us(
            lambda s=fast, a=lo, b=up, lv=levs: s.solve(a, b, lv), calls=calls, blocks=blocks
        )
        generic = box_levels(lo, up, levs)
        daqp_x = HLSPSolver("daqp", multipliers=False, verify=False)
        t_dx = median_time_us(lambda s=daqp_x, g=generic: s.solve(g), calls=calls, blocks=blocks)
        daqp_full = HLSPSolver("daqp")
        t_df = median_time_us(lambda s=daqp_full, g=generic: s.solve(g), calls=calls, blocks=blocks)
        rows.append(BenchRow(sec, f"{name}: fast exact + multipliers", t_fast))
        rows.append(BenchRow(sec, f"{name}: daqp backend, x only", t_dx, t_dx / t_fast, "fast"))
        rows.append(BenchRow(sec, f"{name}: daqp + multipliers + KKT", t_df, t_df / t_fast, "fast"))
    return rows
