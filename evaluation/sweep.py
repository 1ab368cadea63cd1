"""The evaluation matrix: payloads × winds × trajectories × seeds × controllers.

Each run becomes one JSON row appended to ``rows.jsonl`` the moment it finishes (one ``write`` +
``fsync`` of a complete line), so an interrupted sweep — Ctrl-C, a killed worker, a lost node —
loses no finished run, and ``resume=True`` skips every run already in the file. Runs are pure
functions of their spec (seeded env, controllers reset with the seed), so the local process pool and
the Ray backend produce the same rows bit for bit (``wall_time`` aside).

Tables and figures never fly anything: they only read these rows (and the time series saved for
the showcase runs listed in the config).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.envs.disturbances import resolve_payload
from residual_quad.episode import (
    STEADY_STATE_FROM_S,
    RunSpec,
    build_controller,
    fly,
    parse_label,
)
from residual_quad.parallel import BACKENDS, Job, map_jobs

ROWS_FILE = "rows.jsonl"
CONFIG_FILE = "sweep_config.yaml"
SERIES_DIR = "series"


@dataclass
class SweepConfig:
    """The matrix and how to fly it; the defaults are ``configs/sweep.yaml``: the 432 runs of the
    four source trackers [RES §8] plus ``hnewton_rls`` and ``ppo`` (648 runs)."""

    controllers: list[str] = field(
        default_factory=lambda: ["pid", "geo", "geo_res", "geo_rls", "hnewton_rls", "ppo"]
    )
    payloads: list[Any] = field(default_factory=lambda: ["none", "light", "heavy", "extra"])
    winds: list[Any] = field(default_factory=lambda: ["calm", "breezy", "windy"])
    trajectories: list[str] = field(default_factory=lambda: ["hover", "helix", "figure8"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    episode_s: float = 20.0  # s
    env: dict[str, Any] = field(default_factory=dict)  # extra ResidualQuad-v0 kwargs
    controller_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per name
    series: list[dict[str, Any]] = field(  # filters of the runs whose time series are kept
        default_factory=lambda: [
            {"payload": "heavy", "wind": "windy", "trajectory": "helix", "seed": 0},
            {"payload": "extra", "wind": "windy", "trajectory": "helix", "seed": 0},
            {"payload": "extra", "wind": "calm", "trajectory": "hover", "seed": 0},
        ]
    )
    workers: int = 0  # 0: one per CPU core

    def __post_init__(self) -> None:
        for p in self.payloads:
            resolve_payload(p)
        for label in self.controllers:
            parse_label(label)


def expand(cfg: SweepConfig) -> list[RunSpec]:
    """Every run of the matrix, in a fixed order."""
    return [
        RunSpec(c, p, w if isinstance(w, str) else tuple(w), t, int(s), episode_s=cfg.episode_s)
        for c, p, w, t, s in product(
            cfg.controllers, cfg.payloads, cfg.winds, cfg.trajectories, cfg.seeds
        )
    ]


def _wants_series(cfg: SweepConfig, spec: RunSpec) -> bool:
    for flt in cfg.series:
        if all(getattr(spec, k) == v for k, v in flt.items() if k != "controller") and (
            "controller" not in flt or flt["controller"] == spec.controller
        ):
            return True
    return False


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def run_one(spec: RunSpec, cfg: SweepConfig, series_dir: str | None = None) -> dict[str, Any]:
    """Fly one matrix spec and return its row (JSON-ready)."""
    ctrl = build_controller(spec.controller, cfg.env, cfg.controller_options.get(spec.controller))
    estimates: list[np.ndarray] = []

    def record(step: int, obs: np.ndarray, action: np.ndarray, info: dict[str, Any]) -> None:
        estimates.append(np.array(getattr(ctrl, "last_residual", (np.nan,) * 3), dtype=float))

    res = fly(spec, cfg.env, callback=record, controller=ctrl)
    est = np.vstack([np.full(3, np.nan), *estimates]) if estimates else np.full((1, 3), np.nan)
    bias = bias_z = None
    steady = res.t >= STEADY_STATE_FROM_S - 1e-9
    if not res.diverged and steady.any() and np.isfinite(est).all():
        # the estimate applied at step k predicts the residual measured over step k → k+1
        err = est[1:][steady[1:]] - res.residual_true[1:][steady[1:]]
        mean_err = err.mean(axis=0)
        bias, bias_z = float(np.linalg.norm(mean_err)), float(mean_err[2])
    row = {
        "run_id": spec.run_id,
        "controller": spec.controller,
        "payload": spec.payload,
        "payload_kg": resolve_payload(spec.payload),
        "wind": spec.wind if isinstance(spec.wind, str) else list(spec.wind),
        "trajectory": spec.trajectory,
        "seed": spec.seed,
        "rmse": _finite(res.rmse),
        "max_error": _finite(res.max_error),
        "diverged": res.diverged,
        "termination": res.termination,
        "control_cost": res.control_cost,
        "max_tilt_deg": float(np.degrees(res.tilt.max())),
        "residual_bias": bias,
        "residual_bias_z": bias_z,
        "steps": res.steps,
        "wall_time": res.wall_time,
    }
    if series_dir is not None:
        path = Path(series_dir) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.run_id) + ".npz")
        np.savez_compressed(
            path,
            t=res.t,
            pos=res.pos,
            ref=res.ref,
            thrusts=res.thrusts,
            tilt=res.tilt,
            residual_true=res.residual_true,
            residual_est=est,
            wind=res.wind,
            run_id=np.array(spec.run_id),
        )
    return row


# ---------------------------------------------------------------------------------- rows file
def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``rows.jsonl``; an incomplete last line (a killed writer) is ignored."""
    path = Path(path)
    if path.is_dir():
        path = path / ROWS_FILE
    rows = []
    if not path.exists():
        return rows
    with path.open() as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"warning: skipping an incomplete row in {path}", file=sys.stderr)
    return rows


class RowWriter:
    """Appends complete JSON lines, each flushed and fsynced before the next run is reported."""

    def __init__(self, path: Path):
        self.path = path
        self._truncate_partial_tail()
        self._f = path.open("a")

    def _truncate_partial_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def write(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def run_rows(
    jobs: dict[str, Job],
    out_dir: str | Path | None,
    *,
    config: Any = None,
    config_file: str = CONFIG_FILE,
    resume: bool = False,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    desc: str = "sweep",
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """The sweep engine: fly ``jobs`` (run id → job returning a row with that ``run_id``).

    Every row is appended to ``out_dir/rows.jsonl`` the moment it arrives (one fsynced line);
    ``resume`` skips the run ids already there, and without it an existing rows file is an error.
    ``config`` (a dataclass) is saved as ``out_dir/config_file``. With ``out_dir=None`` nothing is
    written. Returns every row, old and new, in the order of ``jobs`` (the file keeps completion
    order), so whatever is computed from them does not depend on the backend's timing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid choices: {', '.join(BACKENDS)}")
    rows: list[dict[str, Any]] = []
    writer = None
    rows_path = None
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows_path = out / ROWS_FILE
        rows = read_rows(rows_path)
        if rows and not resume:
            raise ValueError(
                f"{rows_path} already holds {len(rows)} rows; pass resume=True (--resume) to "
                "continue it or choose another output folder"
            )
        if config is not None:
            configs.dump(config, out / config_file)
        writer = RowWriter(rows_path)
    done_ids = {r["run_id"] for r in rows}
    todo = [job for run_id, job in jobs.items() if run_id not in done_ids]
    stream = map_jobs(todo, backend=backend, address=address, workers=workers)
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=desc, unit="run", file=sys.stderr)
    try:
        for row in stream:
            if writer is not None:
                writer.write(row)
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if bar is not None:
                bar.update(1)
                if row.get("diverged"):
                    bar.write(f"diverged: {row['run_id']} ({row['termination']})")
    except BrokenProcessPool:
        raise RuntimeError(
            f"a worker process died; the {len(rows)} finished rows are safe in {rows_path}; "
            "rerun with --resume to fly the rest"
        ) from None
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    order = {run_id: i for i, run_id in enumerate(jobs)}
    rows.sort(key=lambda r: order.get(r["run_id"], len(order)))  # stable: unknown ids keep theirs
    return rows


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Fly the matrix into ``out_dir/rows.jsonl`` and return every row (old and new).

    Args:
        cfg: the matrix.
        out_dir: output folder; the resolved config is saved there as ``sweep_config.yaml``.
        resume: keep the rows already in ``out_dir`` and fly only the missing runs; without it an
            existing rows file is an error (nothing is overwritten by accident).
        backend: ``local`` (process pool) or ``ray``.
        address: Ray cluster address (``ray start --head`` prints it); none: a local Ray instance.
        workers: processes (local) or CPUs (local Ray); default ``cfg.workers`` or every core.
    """
    series_dir = Path(out_dir) / SERIES_DIR
    if cfg.series:
        series_dir.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, Job] = {
        s.run_id: (run_one, (s, cfg, str(series_dir) if _wants_series(cfg, s) else None))
        for s in expand(cfg)
    }
    if backend == "local":
        n_workers = workers or cfg.workers or None
    else:
        n_workers = None if workers is None and not cfg.workers else (workers or cfg.workers)
    return run_rows(
        jobs,
        out_dir,
        config=cfg,
        resume=resume,
        backend=backend,
        address=address,
        workers=n_workers,
        progress=progress,
        on_row=on_row,
    )
