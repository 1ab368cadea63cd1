"""Train the residual network (``rquad train residual``).

Standardized inputs (train-split mean/std) and targets (centred, divided by the fixed output scale
2.0 m/s², see :class:`ResidualMLP`), mini-batch Adam with a cosine learning-rate decay, early
stopping on a validation split made of whole *runs* (consecutive samples of one run are strongly
correlated, so a random sample split would leak), and TensorBoard curves: train/validation loss,
per-axis validation RMSE (m/s²), learning rate and per-layer weight norms. The best-validation
weights are saved (float64 ``.npz``, ~40 KB) with the training metadata; the same dataset, config
and seed give the same weights.

Training runs in float32 (twice the BLAS throughput of float64 at this size); the saved weights
are float64 and the controllers infer in float64.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.residual.features import N_FEATURES, OUTPUT_NAMES
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.envs.checks import integer
from residual_quad.training.residual_net import Adam, batch_step, normalize_targets


@dataclass(frozen=True)
class TrainConfig:
    """Settings of ``rquad train residual`` (``configs/train_residual.yaml``; strict)."""

    hidden: list[int] = field(default_factory=lambda: [64, 64])
    output_scale: float = 2.0  # m/s²
    output_clip: float = 10.0  # m/s²
    epochs: int = 60
    batch_size: int = 512
    lr: float = 3e-3  # initial learning rate
    lr_final: float = 1e-4  # cosine decay to this at the last epoch
    patience: int = 15  # epochs without validation improvement before stopping
    val_fraction: float = 0.15  # share of runs held out
    seed: int = 0  # initialization, split and shuffling
    dtype: str = "float32"  # training precision
    blas_threads: int = 1  # OpenBLAS threads during training (see training.blas)

    def __post_init__(self) -> None:
        integer("seed", self.seed, low=0)
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError("hidden must list at least one positive width")
        if self.epochs < 1 or self.batch_size < 1 or self.patience < 1:
            raise ValueError("epochs, batch_size and patience must be >= 1")
        if not (0.0 < self.val_fraction < 1.0):
            raise ValueError("val_fraction must be in (0, 1)")
        if not (self.lr > 0 and self.lr_final > 0):
            raise ValueError("learning rates must be positive")
        if self.blas_threads < 1:
            raise ValueError("blas_threads must be >= 1")
        if self.dtype not in ("float32", "float64"):
            raise ValueError("dtype must be float32 or float64")


def split_runs(run_ids: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of validation samples: whole runs drawn with a seeded generator."""
    runs = np.unique(run_ids)
    n_val = max(1, int(round(val_fraction * len(runs))))
    if n_val >= len(runs):
        raise ValueError(f"need more than {n_val} runs for a validation split of {val_fraction}")
    val_runs = np.random.default_rng(seed).choice(runs, size=n_val, replace=False)
    return np.isin(run_ids, val_runs)


def _lr_at(cfg: TrainConfig, epoch: int) -> float:
    """Cosine decay from ``lr`` to ``lr_final`` over the configured epochs."""
    frac = epoch / max(cfg.epochs - 1, 1)
    return cfg.lr_final + 0.5 * (cfg.lr - cfg.lr_final) * (1.0 + math.cos(math.pi * frac))


def evaluate(net: ResidualMLP, X: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray]:
    """Loss (standardized units, as in training) and per-axis RMSE (m/s²) on raw data."""
    Yhat = net.predict(X)
    err = Yhat - Y
    loss = float(np.mean(err * err)) / net.output_scale**2
    return loss, np.sqrt(np.mean(err * err, axis=0))


def train_residual(
    X: np.ndarray,
    Y: np.ndarray,
    run_ids: np.ndarray,
    cfg: TrainConfig,
    *,
    logdir: str | Path | None = None,
    progress: bool = False,
) -> tuple[ResidualMLP, dict[str, Any]]:
    """Train on features ``X`` (N, 14) and body-frame residuals ``Y`` (N, 3, m/s²).

    Returns the best-validation network (float64) and a summary (epochs run, best epoch, losses,
    per-axis RMSE, wall time).
    """
    from tqdm import tqdm

    from residual_quad.training.blas import blas_threads
    from residual_quad.training.tb_logging import ScalarWriter

    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    if X.ndim != 2 or X.shape[1] != N_FEATURES or Y.shape != (len(X), 3):
        raise ValueError(f"X must be (N, {N_FEATURES}) and Y (N, 3); got {X.shape}, {Y.shape}")
    val = split_runs(np.asarray(run_ids), cfg.val_fraction, cfg.seed)
    Xtr, Ytr, Xva, Yva = X[~val], Y[~val], X[val], Y[val]
    dtype = np.dtype(cfg.dtype)
    net = ResidualMLP(
        (N_FEATURES, *cfg.hidden, 3),
        output_scale=cfg.output_scale,
        output_clip=cfg.output_clip,
        seed=cfg.seed,
        dtype=dtype,
    )
    std = Xtr.std(axis=0)
    net.set_standardization(Xtr.mean(axis=0), np.where(std > 1e-8, std, 1.0), Ytr.mean(axis=0))
    Xn, Tn = net.standardize(Xtr), normalize_targets(net, Ytr)
    opt = Adam(net.flat, lr=cfg.lr)
    grad = np.zeros_like(net.flat)
    rng = np.random.default_rng([cfg.seed, 1])
    writer = ScalarWriter(logdir) if logdir is not None else None
    best = {"val_loss": math.inf, "epoch": -1, "flat": net.flat.copy()}
    history = []
    n, bs = len(Xn), cfg.batch_size
    t0 = time.perf_counter()
    train_time = 0.0
    with blas_threads(cfg.blas_threads):
        bar = tqdm(range(cfg.epochs), desc="train residual", unit="epoch", disable=not progress)
        for epoch in bar:
            te = time.perf_counter()
            opt.lr = _lr_at(cfg, epoch)
            perm = rng.permutation(n)
            Xs, Ts = Xn[perm], Tn[perm]  # one contiguous shuffled copy per epoch
            total = 0.0
            for i in range(0, n, bs):
                xb, tb = Xs[i : i + bs], Ts[i : i + bs]
                total += batch_step(net, xb, tb, grad) * len(xb)
                opt.step(grad)
            train_time += time.perf_counter() - te
            train_loss = total / n
            net64 = net.copy(np.float64)
            val_loss, val_rmse = evaluate(net64, Xva, Yva)
            history.append((train_loss, val_loss))
            if writer is not None:
                values = {
                    "loss/train": train_loss,
                    "loss/val": val_loss,
                    "lr": opt.lr,
                    "time/epoch_s": time.perf_counter() - te,
                }
                values.update(
                    {f"val_rmse/{a}": r for a, r in zip(OUTPUT_NAMES, val_rmse, strict=True)}
                )
                for i, W in enumerate(net.W):
                    values[f"weights/norm_W{i}"] = float(np.linalg.norm(W))
                writer.scalars(epoch, values)
            bar.set_postfix(train=f"{train_loss:.4f}", val=f"{val_loss:.4f}")
            if val_loss < best["val_loss"]:
                best = {"val_loss": val_loss, "epoch": epoch, "flat": net.flat.copy()}
            elif epoch - best["epoch"] >= cfg.patience:
                break
    bar.close()
    if writer is not None:
        writer.close()
    net.flat[...] = best["flat"]
    out = net.copy(np.float64)
    val_loss, val_rmse = evaluate(out, Xva, Yva)
    train_loss, train_rmse = evaluate(out, Xtr, Ytr)
    summary = {
        "epochs_run": len(history),
        "best_epoch": best["epoch"],
        "train_samples": int(len(Xtr)),
        "val_samples": int(len(Xva)),
        "val_runs": int(len(np.unique(np.asarray(run_ids)[val]))),
        "train_loss": train_loss,
        "val_loss": val_loss,
        "train_rmse": [float(v) for v in train_rmse],
        "val_rmse": [float(v) for v in val_rmse],
        "target_std": [float(v) for v in Yva.std(axis=0)],
        "train_time_s": train_time,  # the optimization loop only
        "wall_s": time.perf_counter() - t0,
    }
    return out, summary


def train_from_dataset(
    dataset: str | Path,
    cfg: TrainConfig,
    out: str | Path,
    *,
    logdir: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Load a ``rquad collect`` dataset, train, save the weights and a JSON summary next to them
    (its ``weights`` and ``logdir`` relative to the summary's folder); returns the summary with
    the paths as given."""
    from residual_quad.training.collect import load_dataset

    data = load_dataset(dataset)
    net, summary = train_residual(
        data["X"], data["Y"], data["run"], cfg, logdir=logdir, progress=progress
    )
    digest = hashlib.sha256(np.ascontiguousarray(data["X"]).tobytes())
    digest.update(np.ascontiguousarray(data["Y"]).tobytes())
    meta = {
        "dataset": Path(dataset).name,
        "dataset_sha256": digest.hexdigest(),
        "dataset_samples": int(len(data["X"])),
        "collect_config": data["config"],
        "train_config": dataclasses.asdict(cfg),
        "best_epoch": summary["best_epoch"],
        "val_rmse": summary["val_rmse"],
    }
    out = net.save(out, **meta)
    summary.update(weights=str(out), size_bytes=out.stat().st_size, logdir=str(logdir or ""))
    # the file records its paths relative to its own folder: it stays true when the folder moves
    # (and names no machine's temporary folder when it is committed)
    rel_logdir = os.path.relpath(logdir, out.parent) if logdir is not None else ""
    record = {**summary, "weights": out.name, "logdir": rel_logdir}
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return summary
