"""``rquad bench --sections controllers``: batched controllers against single-controller calls.

Rows per controller (``geo``, ``geo_rls``): one single-controller ``policy`` call (the reference),
then ``policy_batch`` at N = 64 / 256 / 1024 envs, reported per env so that the ratio to the
reference is the speed-up of batching (ratio < 1: cheaper per env). Then whole flights of
``hnewton_rls`` (:func:`flight_rows`): single flights (one env, one controller) against the
batched controller on the vector env at N = 256, per env-step, on four scenarios with payloads
and wind; the target is ≥ 5× the throughput. (``hnewton`` is timed in flight, not on the fixed
observations of the rows above: held still, their attitude errors saturate the rotors and the
thrust-vector box every step, a state flight visits only in its first second.) Same run, side
by side, with numpy's OpenBLAS pinned to one thread
(:func:`~residual_quad.training.blas.blas_threads`): the batched network's matrix products are too
small for a second thread, and with a busy neighbour core OpenBLAS's spinning workers make them
ten times slower.
"""

from __future__ import annotations

import time

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow, median_time_us

SECTION = "controllers"
SIZES = (64, 256, 1024)
#: the scenarios of the flight rows, (payload, wind, trajectory), cycled over the batch
FLIGHT_SCENARIOS = (
    ("heavy", "windy", "figure8"),
    ("extra", "breezy", "helix"),
    ("none", "calm", "helix"),
    ("light", "windy", "figure8"),
)


def _obs_batch(n: int) -> np.ndarray:
    """n hover-like observations with random errors (m, m/s, rad/s), nominal thrusts and IMU."""
    from residual_quad.envs.observation import OBS_DIM
    from residual_quad.envs.observation import ObsLayout as L

    rng = np.random.default_rng(0)
    obs = np.zeros((n, OBS_DIM))
    obs[:, L.rot] = np.eye(3).ravel()
    obs[:, L.pos] = np.array([0.0, 0.0, 1.5]) + 0.1 * rng.standard_normal((n, 3))
    obs[:, L.vel] = 0.3 * rng.standard_normal((n, 3))
    obs[:, L.omega_b] = 0.1 * rng.standard_normal((n, 3))
    obs[:, L.ref_pos] = (0.0, 0.0, 1.5)
    obs[:, L.thrusts] = 0.95 * 9.81 / 4  # N per rotor
    obs[:, L.imu] = (0.0, 0.0, 9.81)  # m/s²
    return obs


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.training.blas import blas_threads

    with blas_threads(1):
        return _rows(quick) + flight_rows(quick)


def _rows(quick: bool) -> list[BenchRow]:
    from residual_quad.controllers import make_controller
    from residual_quad.controllers.batch import make_batch_controller

    rows: list[BenchRow] = []
    one = _obs_batch(1)[0]
    for name in ("geo", "geo_rls"):
        single = make_controller(name)
        ref = median_time_us(lambda c=single: c.policy(one), calls=200, blocks=5 if quick else 15)
        ref_name = f"{name}: single policy, 1 env"
        rows.append(BenchRow(SECTION, ref_name, ref))
        for n in SIZES:
            batch = make_batch_controller(name, n)
            obs = _obs_batch(n)
            calls = max(2, 2000 // n) if quick else max(5, 20000 // n)
            total = median_time_us(
                lambda b=batch, o=obs: b.policy_batch(o), calls=calls, blocks=3 if quick else 7
            )
            rows.append(
                BenchRow(
                    SECTION,
                    f"{name}: policy_batch per env, N = {n}",
                    total / n,
                    ratio=total / n / ref,
                    ratio_to=ref_name.split(":")[0] + " single",
                )
            )
    return rows


def flight_rows(quick: bool = False, name: str = "hnewton_rls") -> list[BenchRow]:
    """Whole closed-loop flights of ``name``, per env-step: single flights (env step +
    ``policy``, one per scenario of :data:`FLIGHT_SCENARIOS`) beside the batched controller on
    the vector env (N = 256, one rollout thread), the same episodes (20 s; 5 s and N = 64 with
    ``quick``). Both advance in alternating segments of 100 steps, so that a shared machine's
    drift hits both alike; the ratio is that of the totals over the whole flights (their first
    second, where limits bind and rows leave the array path, included)."""
    from residual_quad.controllers import make_controller
    from residual_quad.controllers.batch import make_batch_controller
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    n, episode_s = (64, 5.0) if quick else (256, 20.0)
    steps, segment = int(round(episode_s * 100)), 100
    scenarios = [FLIGHT_SCENARIOS[i % len(FLIGHT_SCENARIOS)] for i in range(n)]
    flights = []
    for i, (payload, wind, trajectory) in enumerate(FLIGHT_SCENARIOS):
        env = ResidualQuadEnv(
            payload=payload, wind=wind, trajectory=trajectory, episode_s=episode_s
        )
        ctrl = make_controller(name)
        ctrl.reset(i)
        flights.append([env, ctrl, env.reset(seed=i)[0]])
    venv = ResidualQuadVectorEnv(
        n,
        scenarios=[{"payload": p, "wind": w, "trajectory": t} for p, w, t in scenarios],
        nthread=1,
        episode_s=episode_s,
    )
    batch = make_batch_controller(name, n)
    obs = venv.reset(seed=0)[0]
    batch.reset_batch(list(range(n)))
    t_single = t_batch = 0.0
    for start in range(0, steps, segment):
        k = min(segment, steps - start)
        t0 = time.perf_counter()
        for f in flights:
            for _ in range(k):
                f[2], *_ = f[0].step(f[1].policy(f[2]))
        t1 = time.perf_counter()
        for _ in range(k):
            obs, *_ = venv.step(batch.policy_batch(obs))
        t_single += t1 - t0
        t_batch += time.perf_counter() - t1
    venv.close()
    for f in flights:
        f[0].close()
    per_single = t_single / (steps * len(flights)) * 1e6
    per_batch = t_batch / (steps * n) * 1e6
    return [
        BenchRow(SECTION, f"{name} flights: single env + policy, per env-step", per_single),
        BenchRow(
            SECTION,
            f"{name} flights: batched + vector env, N = {n}",
            per_batch,
            ratio=per_single / per_batch,
            ratio_to="x throughput",
            target=">= 5x throughput",
        ),
    ]
