"""``rquad bench --sections controllers``: batched controllers against single-controller calls.

Rows per controller (``geo``, ``geo_rls``): one single-controller ``policy`` call (the reference),
then ``policy_batch`` at N = 64 / 256 / 1024 envs, reported per env so that the ratio to the
reference is the speed-up of batching (ratio < 1: cheaper per env). Same run, side by side,
with numpy's OpenBLAS pinned to one thread (:func:`~residual_quad.training.blas.blas_threads`):
the batched network's matrix products are too small for a second thread, and with a busy
neighbour core OpenBLAS's spinning workers make them ten times slower.
"""

from __future__ import annotations

import numpy as np

from residual_quad.evaluation.bench import BenchRow, median_time_us

SECTION = "controllers"
SIZES = (64, 256, 1024)


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
        return _rows(quick)


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
