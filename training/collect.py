"""Residual training data: fly plain ``geo`` with band-limited random excitation and record
(features, measured residual) pairs ([RES §6]).

Why ``geo`` and not a residual tracker: only a controller acting on the nominal model makes
"measured − nominal" the pure model error; a residual-corrected collector would learn its own
corrections. Why excitation: along the reference the states lie on a one-dimensional manifold and
the network is unconstrained off it; a first-order low-pass (Ornstein–Uhlenbeck) random
acceleration added to the command spreads the states over the envelope. Band-limited rather than
white, because the attitude loop filters a white command into thrust chatter only.

Each sample pairs the features of observation ``k−1`` with the residual measured over the period
``[k−1, k]`` from observables (:func:`measured_residual`), in the body frame of ``k−1`` — exactly
what :class:`RLSGeoTracker` does online. The first ``drop_s`` seconds (take-off) are dropped and
samples with ``|Δa| > reject_accel`` rejected. ``extra`` is never collected (it is the
out-of-distribution test level).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.driver import LawController
from residual_quad.controllers.law import replace
from residual_quad.controllers.residual.features import (
    FEATURE_NAMES,
    N_FEATURES,
    features_from_obs,
    measured_residual,
)
from residual_quad.controllers.trackers import GeoTracker
from residual_quad.envs.checks import integer
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS, resolve_payload
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.episode import RunSpec, fly
from residual_quad.parallel import map_jobs

DATASET_VERSION = 1


@dataclass(frozen=True)
class ExcitationConfig:
    """Ornstein–Uhlenbeck random acceleration added to ``geo``'s command, per world axis."""

    sigma: float = 1.5  # m/s², stationary standard deviation (horizontal axes)
    tau: float = 0.5  # s, correlation time (band limit ≈ 1/(2πτ) Hz)
    vertical_scale: float = 0.6  # σ_z = vertical_scale·σ

    def __post_init__(self) -> None:
        if self.sigma < 0 or self.tau <= 0 or self.vertical_scale < 0:
            raise ValueError(f"excitation needs sigma >= 0, tau > 0, vertical_scale >= 0: {self}")


@dataclass(frozen=True)
class CollectConfig:
    """Settings of ``rquad collect`` (``configs/collect.yaml``; unknown keys are errors)."""

    payloads: list[str] = field(default_factory=lambda: ["none", "light", "heavy"])
    winds: list[str] = field(default_factory=lambda: ["calm", "breezy", "windy"])
    trajectories: list[str] = field(default_factory=lambda: ["hover", "helix", "figure8"])
    seeds: list[int] = field(default_factory=lambda: [1000, 1001, 1002])  # env (wind) seeds
    episode_s: float = 12.6  # s per run
    drop_s: float = 1.5  # s, take-off transient dropped
    reject_accel: float = 25.0  # m/s², |Δa| above this is rejected
    excitation: ExcitationConfig = field(default_factory=ExcitationConfig)
    excitation_seed: int = 0  # base seed of the excitation draws
    workers: int = 2  # processes

    def __post_init__(self) -> None:
        for i, seed in enumerate(self.seeds):
            integer(f"seeds[{i}]", seed, low=0)
        integer("excitation_seed", self.excitation_seed, low=0)
        for p in self.payloads:
            resolve_payload(p)  # validates
            if p == "extra" or resolve_payload(p) >= PAYLOAD_LEVELS["extra"] - 1e-9:
                raise ValueError(
                    "payload 'extra' (0.75 kg) is the out-of-distribution test level and is "
                    "never collected"
                )
        for w in self.winds:
            if w not in WIND_LEVELS:
                raise ValueError(f"unknown wind {w!r}; valid choices: {', '.join(WIND_LEVELS)}")
        for t in self.trajectories:
            if t not in TRAJECTORIES:
                raise ValueError(
                    f"unknown trajectory {t!r}; valid choices: {', '.join(TRAJECTORIES)}"
                )
        if not (self.payloads and self.winds and self.trajectories and self.seeds):
            raise ValueError("payloads, winds, trajectories and seeds must be non-empty")
        if self.episode_s <= self.drop_s or self.drop_s < 0:
            raise ValueError("need 0 <= drop_s < episode_s")
        if self.reject_accel <= 0 or self.workers < 1:
            raise ValueError("reject_accel must be > 0 and workers >= 1")

    def runs(self) -> list[dict[str, Any]]:
        """The run matrix in a fixed order (payload-major)."""
        return [
            {"index": i, "payload": p, "wind": w, "trajectory": t, "seed": int(s)}
            for i, (p, w, t, s) in enumerate(
                itertools.product(self.payloads, self.winds, self.trajectories, self.seeds)
            )
        ]


class ExcitedGeo(LawController):
    """``geo`` whose command carries an OU random acceleration, recording features as it flies.

    The excitation is seeded per run from ``(excitation_seed, run seed)`` and discretized exactly:
    ``e ← e^{−Δt/τ}·e + σ·√(1 − e^{−2Δt/τ})·n``, starting from its stationary distribution; it
    reaches the ``geo`` law as the ``excitation`` input of its state.
    """

    def __init__(self, context: ControlContext, excitation: ExcitationConfig, base_seed: int):
        self.exc_cfg = excitation
        self.base_seed = int(base_seed)
        a = math.exp(-context.control_dt / excitation.tau)
        self._a, self._b = a, math.sqrt(1.0 - a * a)
        s = excitation.sigma
        self._sigma = np.array([s, s, s * excitation.vertical_scale])
        super().__init__(GeoTracker(context))
        self.name = "geo_excited"

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._rng = np.random.default_rng([self.base_seed, 0 if seed is None else int(seed)])
        self._e = self._sigma * self._rng.standard_normal(3)
        self.state = replace(self.state, excitation=np.zeros(3))
        self.features = np.zeros(N_FEATURES)  # of the observation passed to the last policy()

    def policy(self, obs: np.ndarray) -> np.ndarray:
        R = obs[L.rot].reshape(3, 3)
        # features use the previous command, as the residual trackers do
        self.features = features_from_obs(obs, R, self.state.last_a_cmd, self.airframe.mass)
        self._e = self._a * self._e + self._b * self._sigma * self._rng.standard_normal(3)
        self.state = replace(self.state, excitation=self._e)
        return super().policy(obs)


def collect_run(cfg: CollectConfig, run: dict[str, Any]) -> dict[str, Any]:
    """Fly one run; return its samples (features X, body-frame targets Y, times t) and stats."""
    ctx = ControlContext()  # the env's defaults: nominal airframe, 100 Hz
    ctrl = ExcitedGeo(ctx, cfg.excitation, cfg.excitation_seed)
    frame = ctx.airframe
    X: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    T: list[float] = []
    truth_err = [0.0]
    prev = {"obs": None, "x": None}

    def on_step(k: int, obs: np.ndarray, action: np.ndarray, info: dict[str, Any]) -> None:
        """After step k: pair the features of obs k−1 with the residual measured over [k−1, k]."""
        p_obs = prev["obs"]
        if info["diverged"]:
            return
        meas = measured_residual(p_obs, obs, ctx.control_dt, frame.mass, frame.gravity)
        truth_err[0] = max(truth_err[0], float(np.max(np.abs(meas - info["residual_accel"]))))
        X.append(prev["x"])
        Y.append(meas @ p_obs[L.rot].reshape(3, 3))  # body frame of k−1
        T.append(info["t"] - ctx.control_dt)

    class _Recorder:
        """Remembers the observation and the features of every policy() call."""

        action_mode = "rotor"

        def reset(self, seed: int | None = None) -> None:
            ctrl.reset(seed)

        def policy(self, obs: np.ndarray) -> np.ndarray:
            action = ctrl.policy(obs)
            prev["obs"], prev["x"] = obs.copy(), ctrl.features.copy()
            return action

    spec = RunSpec(
        "geo", run["payload"], run["wind"], run["trajectory"], run["seed"], episode_s=cfg.episode_s
    )
    result = fly(spec, callback=on_step, controller=_Recorder())
    X_arr = np.array(X).reshape(-1, N_FEATURES)
    Y_arr = np.array(Y).reshape(-1, 3)
    t_arr = np.array(T)
    keep = t_arr >= cfg.drop_s - 1e-9
    n_time = int(keep.sum())
    keep &= np.linalg.norm(Y_arr, axis=1) <= cfg.reject_accel
    return {
        "run": run,
        "X": X_arr[keep],
        "Y": Y_arr[keep],
        "t": t_arr[keep],
        "rejected": n_time - int(keep.sum()),
        "diverged": result.diverged,
        "rmse": result.rmse,
        "max_truth_error": truth_err[0],
    }


def _worker(cfg: CollectConfig, run: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return collect_run(cfg, run)


def check_output_file(out: Path) -> None:
    """Raise a one-line ``ValueError`` naming ``out`` unless its folder exists (or can be
    created) and takes new files: a probe file is created and removed there, so what is checked
    is what the write will do (also for root, whom permission bits do not stop)."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give the dataset's file name (.npz)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=out.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(
            f"cannot write the dataset to {out}: {exc.strerror or exc} "
            f"({exc.filename or out.parent}); choose a writable --out"
        ) from None


def collect(
    cfg: CollectConfig, out: str | Path, *, progress: bool = True, workers: int | None = None
) -> dict[str, Any]:
    """Fly every run of ``cfg`` over a process pool and write the dataset.

    Writes ``out`` (``.npz``: ``X`` (N, 14) features, ``Y`` (N, 3) body-frame residuals in m/s²,
    ``run`` (N,) run index, ``t`` (N,) s, ``runs`` JSON, ``config`` JSON, ``feature_names``) and
    the resolved config as YAML next to it (``<out>.yaml``). The result does not depend on the
    number of workers. Returns a summary.
    """
    from tqdm import tqdm

    out = Path(out)
    check_output_file(out)  # before 20-odd seconds of flying, not after
    runs = cfg.runs()
    n_workers = max(1, min(workers or cfg.workers, len(runs)))
    t0 = time.perf_counter()
    results: list[dict[str, Any] | None] = [None] * len(runs)
    bar = tqdm(total=len(runs), desc="collect", unit="run", disable=not progress)
    for res in map_jobs([(_worker, (cfg, r)) for r in runs], workers=n_workers):
        results[res["run"]["index"]] = res
        bar.update()
    bar.close()
    done = [r for r in results if r is not None]
    X = np.concatenate([r["X"] for r in done])
    Y = np.concatenate([r["Y"] for r in done])
    run_id = np.concatenate([np.full(len(r["X"]), r["run"]["index"]) for r in done])
    t = np.concatenate([r["t"] for r in done])
    run_table = [
        {
            **r["run"],
            "samples": len(r["X"]),
            "rejected": r["rejected"],
            "diverged": r["diverged"],
            "geo_rmse": r["rmse"] if math.isfinite(r["rmse"]) else None,
        }
        for r in done
    ]
    config = dataclasses.asdict(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        np.savez_compressed(
            fh,
            dataset_version=np.array(DATASET_VERSION),
            X=X,
            Y=Y,
            run=run_id,
            t=t,
            runs=np.array(json.dumps(run_table)),
            config=np.array(json.dumps(config, sort_keys=True)),
            feature_names=np.array(",".join(FEATURE_NAMES)),
        )
    yaml_path = out.with_suffix(".yaml")
    with open(yaml_path, "w", encoding="utf-8") as fh:
        fh.write("# resolved `rquad collect` config of " + out.name + "\n")
        yaml.safe_dump(config, fh, sort_keys=False)
    return {
        "path": str(out),
        "config_path": str(yaml_path),
        "runs": len(done),
        "samples": int(len(X)),
        "rejected": int(sum(r["rejected"] for r in done)),
        "diverged": int(sum(r["diverged"] for r in done)),
        "max_truth_error": float(max(r["max_truth_error"] for r in done)),
        "wall_s": time.perf_counter() - t0,
        "workers": n_workers,
    }


def load_dataset(path: str | Path) -> dict[str, Any]:
    """Read a dataset written by :func:`collect` (arrays plus decoded ``runs``/``config``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset {str(path)!r} does not exist (run `rquad collect`)")
    try:
        with np.load(path, allow_pickle=False) as data:
            d = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"dataset {str(path)!r} is not a readable .npz ({exc})") from None
    missing = [k for k in ("X", "Y", "run", "runs", "config") if k not in d]
    if missing:
        raise ValueError(f"dataset {str(path)!r}: missing entries {missing}")
    if int(d.get("dataset_version", -1)) != DATASET_VERSION:
        raise ValueError(f"dataset {str(path)!r}: version is not {DATASET_VERSION}")
    if d["X"].ndim != 2 or d["X"].shape[1] != N_FEATURES or d["Y"].shape != (len(d["X"]), 3):
        raise ValueError(f"dataset {str(path)!r}: X must be (N, 14) and Y (N, 3)")
    d["runs"] = json.loads(str(d["runs"]))
    d["config"] = json.loads(str(d["config"]))
    return d
