"""``rquad bench --sections residual``: residual-network inference, RLS update, training throughput.

Rows: one network forward on a single feature vector (the control-loop path, :class:`FastMLP`),
features + forward, one RLS update of the 65 × 3 last layer, a full ``geo_rls`` policy step, and
the training loop (mini-batch Adam, float32) timed on synthetic data and extrapolated to the
reference workload of 90 000 samples × 60 epochs (about the shipped training's size).
"""

from __future__ import annotations

import time

import numpy as np

from residual_quad.evaluation.bench.timing import BenchRow, median_time_us

SECTION = "residual"


def _training_seconds(quick: bool) -> tuple[float, float]:
    """One epoch over 90k samples (µs, median) and the time for 60 epochs (s)."""
    from residual_quad import configs
    from residual_quad.controllers.residual.network import ResidualMLP
    from residual_quad.training.blas import blas_threads
    from residual_quad.training.residual_net import Adam, batch_step
    from residual_quad.training.residual_train import TrainConfig

    cfg = configs.load(TrainConfig, "train_residual")
    rng = np.random.default_rng(0)
    n = 90_000
    net = ResidualMLP(seed=0, dtype=np.dtype(cfg.dtype))
    net.W[-1][...] = 0.1 * rng.standard_normal(net.W[-1].shape)
    X = rng.standard_normal((n, net.sizes[0])).astype(net.dtype)
    T = rng.standard_normal((n, 3)).astype(net.dtype)
    opt, grad = Adam(net.flat, lr=1e-3), np.zeros_like(net.flat)
    epochs = 1 if quick else 3
    times = []
    with blas_threads(cfg.blas_threads):
        for _ in range(epochs):
            t0 = time.perf_counter()
            perm = rng.permutation(n)
            Xs, Ts = X[perm], T[perm]
            for i in range(0, n, cfg.batch_size):
                batch_step(net, Xs[i : i + cfg.batch_size], Ts[i : i + cfg.batch_size], grad)
                opt.step(grad)
            times.append(time.perf_counter() - t0)
    per_epoch = float(np.median(times))
    return per_epoch * 1e6, per_epoch * 60


def run(quick: bool = False) -> list[BenchRow]:
    from residual_quad.controllers import make_controller
    from residual_quad.controllers.residual.features import features_from_obs
    from residual_quad.controllers.residual.network import FastMLP, load_network
    from residual_quad.controllers.rls import LastLayerRLS, RLSConfig
    from residual_quad.envs.observation import OBS_DIM
    from residual_quad.envs.observation import ObsLayout as L

    calls, blocks = (200, 5) if quick else (2000, 15)
    rng = np.random.default_rng(0)
    net = FastMLP(load_network("default"))
    obs = np.zeros(OBS_DIM)
    obs[L.pos] = (0.3, -0.2, 1.6)  # m
    obs[L.vel] = (1.2, 0.4, 0.1)  # m/s
    obs[L.rot] = np.eye(3).ravel()
    obs[L.thrusts] = 3.9  # N per rotor
    R = L.rotation(obs)
    a_prev = np.array([0.5, -0.2, 0.3])  # m/s², world
    mass = 0.95  # kg, nominal
    x = features_from_obs(obs, R, a_prev, mass)
    rows = [
        BenchRow(
            SECTION,
            "network forward, 1 sample (14→64→64→3)",
            median_time_us(lambda: net(x), calls=calls, blocks=blocks),
            target="<= 10 us",
        ),
        BenchRow(
            SECTION,
            "features + forward, 1 sample",
            median_time_us(
                lambda: net(features_from_obs(obs, R, a_prev, mass)), calls=calls, blocks=blocks
            ),
        ),
    ]
    rls = LastLayerRLS(net.theta0, RLSConfig())
    phi = net.hidden(x).copy()
    y = rng.standard_normal(3)
    rows.append(
        BenchRow(
            SECTION,
            "RLS update, 65x3 last layer",
            median_time_us(lambda: rls.update(phi, y), calls=calls, blocks=blocks),
            target="<= 10 us",
        )
    )
    geo = make_controller("geo")
    geo_rls = make_controller("geo_rls")
    obs2 = obs.copy()
    geo_rls.policy(obs)

    def step_rls() -> None:
        geo_rls.policy(obs2)

    t_geo = median_time_us(lambda: geo.policy(obs2), calls=calls, blocks=blocks)
    t_rls = median_time_us(step_rls, calls=calls, blocks=blocks)
    rows.append(BenchRow(SECTION, "geo policy step", t_geo))
    rows.append(
        BenchRow(SECTION, "geo_rls policy step (measure+RLS+predict)", t_rls, t_rls / t_geo, "geo")
    )
    per_epoch, total = _training_seconds(quick)
    rows.append(
        BenchRow(
            SECTION,
            f"training epoch, 90k samples (x60 = {total:.1f} s)",
            per_epoch,
            target="x60 <= 10 s",
        )
    )
    return rows
