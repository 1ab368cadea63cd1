"""The evaluation matrix: payloads × winds × trajectories × seeds × controllers.

Each run becomes one JSON row appended to ``rows.jsonl`` the moment it finishes (one ``write`` +
``fsync`` of a complete line), so an interrupted sweep — Ctrl-C, a killed worker, a lost node —
loses no finished run, and ``resume=True`` skips every run already in the file. Runs are pure
functions of their spec (seeded env, controllers reset with the seed), so the local process pool and
the Ray backend produce the same rows bit for bit (``wall_time`` aside).

An output folder has one writer at a time: the engine holds an exclusive lock on
``out_dir/.lock`` (``flock``, with the holder's pid in the file) for the sweep's whole life, so a
second sweep, ``--resume`` or stress run on the same folder refuses at once instead of writing
duplicate rows. Readers keep the first complete row of every ``run_id`` all the same.

Tables and figures never fly anything: they only read these rows (and the time series saved for
the showcase runs listed in the config).
"""

from __future__ import annotations

import errno
import inspect
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import BatchedGroups, batch_from_spec, has_batch_path
from residual_quad.controllers.specs import (
    ControllerEntry,
    ControllerSpec,
    normalized_entries,
    parse_spec,
    resolve_entries,
)
from residual_quad.envs.disturbances import WIND_LEVELS, WindModel, resolve_payload
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.episode import (
    STEADY_STATE_FROM_S,
    EpisodeResult,
    RunSpec,
    build_controller,
    control_dt,
    fly,
    fly_batch,
)
from residual_quad.parallel import BACKENDS, Job, map_jobs
from residual_quad.training.blas import blas_threads

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: folders are not locked
    fcntl = None  # type: ignore[assignment]

ROWS_FILE = "rows.jsonl"
CONFIG_FILE = "sweep_config.yaml"
SERIES_DIR = "series"
LOCK_FILE = ".lock"
#: sweep backends: the process pool or Ray, one run per job; ``vector``: batches of runs on the
#: vector env, one batch per job on the process pool
SWEEP_BACKENDS = (*BACKENDS, "vector")
#: most runs one vector-backend job flies together
MAX_BATCH = 256
#: the backend ``rquad sweep`` and the pipeline use unless told otherwise (the fastest on one
#: machine: ``rquad bench --sections sweep``)
DEFAULT_BACKEND = "vector"
#: the keys of a ``series`` filter (fields of a matrix run)
SERIES_KEYS = ("payload", "wind", "trajectory", "seed", "controller")
#: env arguments set per run (by the matrix, or by the controller: ``action_mode``), so ``env:``
#: cannot set them
MATRIX_ENV_KEYS = (
    "payload",
    "wind",
    "trajectory",
    "episode_s",
    "seed",
    "action_mode",
    "disable_env_checker",
)


class ControllerLabels:
    """The run labels of a config's ``controllers`` entries and their resolved specs (a config
    sets ``self._specs``, label → spec, when it validates its entries)."""

    @property
    def labels(self) -> list[str]:
        """The run label of every controller entry, in config order."""
        return list(self._specs)

    def _resolve_controllers(self) -> list[ControllerSpec]:
        """Check the ``controllers`` entries (a non-empty list, unique labels, importable user
        modules), normalize them and keep label → spec; returns the specs."""
        if not isinstance(self.controllers, list) or not self.controllers:
            raise ValueError(
                f"controllers: expected a non-empty list of specs, got {self.controllers!r}"
            )
        specs = resolve_entries(self.controllers)
        self.controllers = normalized_entries(self.controllers, specs)
        self._specs = {s.label: s for s in specs}
        return specs

    def controller_spec(self, label: str) -> ControllerSpec:
        """The resolved spec of a run label (a compact spec that is not an entry parses itself)."""
        spec = self.__dict__.get("_specs", {}).get(label)
        return spec if spec is not None else parse_spec(label)


@dataclass
class SweepConfig(ControllerLabels):
    """The matrix and how to fly it; the defaults are ``configs/sweep.yaml``: the 432 runs of the
    four source trackers [RES §8] plus ``geo_rls_dob``, ``hnewton_rls`` and the RL controllers
    ``ppo`` and ``ppo_res`` in their three shipped training seeds (1 296 runs)."""

    #: compact specs (``geo``, ``hnewton:lm``, ``my_pkg.ctrl:Make``) or mappings
    #: ``{spec, options, label}``; each run's ``controller`` column is the entry's label
    controllers: list[str | ControllerEntry] = field(
        default_factory=lambda: [
            "pid",
            "geo",
            "geo_res",
            "geo_rls",
            "geo_rls_dob",
            "hnewton_rls",
            "ppo",
            "ppo:training_seed=1",
            "ppo:training_seed=2",
            "ppo_res",
            "ppo_res:training_seed=1",
            "ppo_res:training_seed=2",
        ]
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
        """Check everything a sweep would otherwise only trip over mid-flight.

        Duplicate entries in a matrix list are errors (naming the duplicate) rather than silently
        de-duplicated: they would fly the same ``run_id`` twice, and a config that lists a seed
        twice is more likely a typo than a wish. ``env`` is checked by building the env once,
        ``controller_options`` by building each optioned controller once.
        """
        for p in self.payloads:
            resolve_payload(p)
        specs = self._resolve_controllers()
        for w in self.winds:
            _check_wind(w)
        for t in self.trajectories:
            if t not in TRAJECTORIES:
                raise ValueError(
                    f"unknown trajectory {t!r}; valid choices: {', '.join(TRAJECTORIES)}"
                )
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(f"seeds: {seed!r} is not an integer >= 0")
        for name in ("payloads", "winds", "trajectories", "seeds"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: the list is empty; a sweep needs at least one entry")
            _check_unique(name, values)
        if not (isinstance(self.episode_s, int | float) and 0 < self.episode_s < math.inf):
            raise ValueError(f"episode_s must be a finite number > 0 (s), got {self.episode_s!r}")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise ValueError(f"workers must be an integer >= 0 (0: every core), got {self.workers}")
        _check_env(self.env, self.episode_s)
        _check_controller_options(self.controller_options, self.env, self._specs)
        _check_user_controllers(specs, self.controller_options, self.env)
        _check_series(self.series)
        ids = [s.run_id for s in expand(self)]
        _check_unique("runs", ids)  # e.g. a wind given as a name and as the same numbers


def _check_wind(wind: Any) -> None:
    """A wind level name or a ``[mean, sigma]`` pair of finite speeds >= 0 (m/s)."""
    if isinstance(wind, str):
        WindModel.from_spec(wind)  # unknown names list the valid ones
        return
    ok = isinstance(wind, list | tuple) and len(wind) == 2
    ok = ok and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf for v in wind
    )
    if not ok:
        raise ValueError(
            f"winds: {wind!r} is neither a level name ({', '.join(WIND_LEVELS)}) nor a "
            "[mean, sigma] pair of finite speeds >= 0 in m/s"
        )


def _check_unique(name: str, values: list[Any]) -> None:
    seen: set[Any] = set()
    for v in values:
        key = tuple(v) if isinstance(v, list) else v
        if key in seen:
            raise ValueError(
                f"{name}: {v!r} is listed twice; every entry must be unique (it would fly the "
                "same run twice)"
            )
        seen.add(key)


def _check_env(env: Any, episode_s: float) -> None:
    """``env`` must be ``ResidualQuad-v0`` keyword arguments that build an env."""
    if not isinstance(env, dict):
        raise ValueError(f"env: expected a mapping of ResidualQuad-v0 arguments, got {env!r}")
    params = [
        p
        for p in inspect.signature(ResidualQuadEnv.__init__).parameters
        if p != "self" and p not in MATRIX_ENV_KEYS
    ]
    unknown = sorted(set(env) - set(params), key=str)
    if unknown:
        set_by_matrix = [k for k in unknown if k in MATRIX_ENV_KEYS]
        why = f" ({', '.join(set_by_matrix)}: set per run)" if set_by_matrix else ""
        raise ValueError(f"env: unknown key(s) {unknown}{why}; valid keys: {params}")
    try:
        ResidualQuadEnv(**env, episode_s=episode_s).close()
    except Exception as exc:  # any failure here is a bad value in the config
        raise ValueError(f"env: invalid settings {env!r}: {type(exc).__name__}: {exc}") from None


def _check_user_controllers(
    specs: list[ControllerSpec], options: dict[str, dict[str, Any]], env: dict[str, Any]
) -> None:
    """Build every spec that is not a plain built-in name once: a factory that fails, an object
    that is not a Controller or a bad option is named now, not in the middle of the sweep."""
    for spec in specs:
        if (spec.is_import_path or spec.options) and spec.label not in options:
            build_controller(spec, env)


def _check_controller_options(
    options: Any, env: dict[str, Any], specs: dict[str, ControllerSpec]
) -> None:
    """Every ``controller_options`` entry names a controller label and builds it."""
    if not isinstance(options, dict):
        raise ValueError(f"controller_options: expected a mapping label → options, got {options!r}")
    for label, opts in options.items():
        if not isinstance(opts, dict):
            raise ValueError(f"controller_options[{label}]: expected a mapping, got {opts!r}")
        spec = specs.get(str(label)) or parse_spec(str(label))
        try:
            build_controller(spec, env, opts)
        except Exception as exc:  # unknown option, wrong type, missing weights file, ...
            raise ValueError(
                f"controller_options[{label}]: invalid options {opts!r}: {exc}"
            ) from None


def _check_series(series: Any) -> None:
    if not isinstance(series, list):
        raise ValueError(f"series: expected a list of filters, got {series!r}")
    for i, flt in enumerate(series):
        if not isinstance(flt, dict):
            raise ValueError(f"series[{i}]: expected a mapping, got {flt!r}")
        unknown = sorted(set(flt) - set(SERIES_KEYS), key=str)
        if unknown:
            raise ValueError(
                f"series[{i}]: unknown key(s) {unknown}; valid keys: {list(SERIES_KEYS)}"
            )


def expand(cfg: SweepConfig) -> list[RunSpec]:
    """Every run of the matrix, in a fixed order."""
    return [
        RunSpec(c, p, w if isinstance(w, str) else tuple(w), t, int(s), episode_s=cfg.episode_s)
        for c, p, w, t, s in product(
            cfg.labels, cfg.payloads, cfg.winds, cfg.trajectories, cfg.seeds
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
    """Fly one matrix spec and return its row (JSON-ready).

    A controller that cannot be built, raises, or returns an action the env refuses (NaN, wrong
    shape) gives a failure row (:func:`failure_row`) instead of an exception, so one bad run never
    takes a sweep down; a diverging flight is not a failure (its row says ``diverged``)."""
    try:
        ctrl = build_controller(
            cfg.controller_spec(spec.controller),
            cfg.env,
            cfg.controller_options.get(spec.controller),
        )
    except Exception as exc:  # a user factory that fails only in this worker
        return failure_row(spec, exc, None, cfg.env)
    estimates: list[np.ndarray] = []

    def record(step: int, obs: np.ndarray, action: np.ndarray, info: dict[str, Any]) -> None:
        estimates.append(np.array(getattr(ctrl, "last_residual", (np.nan,) * 3), dtype=float))

    try:
        res = fly(spec, cfg.env, callback=record, controller=ctrl)
    except Exception as exc:  # the controller raised or acted non-finite at step len(estimates)
        return failure_row(spec, exc, len(estimates), cfg.env)
    est = np.vstack([np.full(3, np.nan), *estimates]) if estimates else np.full((1, 3), np.nan)
    return result_row(spec, res, est, series_dir)


def run_batch(
    specs: list[RunSpec], cfg: SweepConfig, series_dirs: list[str | None]
) -> list[dict[str, Any]]:
    """Fly matrix specs together on the vector env (:func:`fly_batch`), every controller in the
    same batch (one vector env per action mode), and return their rows in ``specs`` order, equal
    to :func:`run_one`'s to ≤ 1e-9 (``wall_time``: the batch's, shared evenly).

    A failure inside the batch (a controller raising, a non-finite action) never loses the
    batch's other runs: the batch is flown again one controller label at a time (a run's numbers
    do not depend on the batch it flies in), and the runs of a label whose own batch fails again
    are flown one by one with :func:`run_one`, which isolates the failing run(s) into failure
    rows with the step they failed at."""
    try:
        results = _fly_together(specs, cfg)
    except Exception:
        results = None
    if results is not None:
        return [
            result_row(s, res, res.extras["residual_est"], d)
            for s, res, d in zip(specs, results, series_dirs, strict=True)
        ]
    rows: list[dict[str, Any] | None] = [None] * len(specs)
    by_label: dict[str, list[int]] = {}
    for i, s in enumerate(specs):
        by_label.setdefault(s.controller, []).append(i)
    for idx in by_label.values():
        try:
            part = _fly_together([specs[i] for i in idx], cfg)
        except Exception:  # this label fails: one run at a time finds the failing ones
            for i in idx:
                rows[i] = run_one(specs[i], cfg, series_dirs[i])
            continue
        for i, res in zip(idx, part, strict=True):
            rows[i] = result_row(specs[i], res, res.extras["residual_est"], series_dirs[i])
    return rows  # type: ignore[return-value]


def _fly_together(specs: list[RunSpec], cfg: SweepConfig) -> list[EpisodeResult]:
    """The results of ``specs`` flown in one batch per action mode, in ``specs`` order; raises
    whatever a batch controller or the vector env raises."""
    context = ControlContext(control_dt=control_dt(cfg.env))
    by_label: dict[str, list[int]] = {}
    for i, s in enumerate(specs):
        by_label.setdefault(s.controller, []).append(i)
    by_mode: dict[str, list[tuple[Any, list[int]]]] = {}
    for label, idx in by_label.items():
        ctrl = batch_from_spec(
            cfg.controller_spec(label), len(idx), context, **cfg.controller_options.get(label, {})
        )
        by_mode.setdefault(ctrl.action_mode, []).append((ctrl, idx))
    out: list[EpisodeResult | None] = [None] * len(specs)
    for parts in by_mode.values():
        idx = [i for _, part in parts for i in part]
        local = {i: k for k, i in enumerate(idx)}
        ctrl = BatchedGroups([(c, [local[i] for i in part]) for c, part in parts])
        with blas_threads(1):  # one process per core: a second BLAS thread only contends
            results = fly_batch([specs[i] for i in idx], ctrl, cfg.env)
        for i, res in zip(idx, results, strict=True):
            out[i] = res
    return out  # type: ignore[return-value]


# ------------------------------------------------------------------------------ failed runs
#: the exit status of ``rquad sweep``, ``rquad stress`` and ``rquad pipeline`` when the sweep
#: finished but some runs failed (user errors are 2)
FAILED_RUNS_EXIT = 3
_MAX_ERROR_CHARS = 500  # a failure reason is one line of at most this many characters


def failure_row(
    spec: RunSpec,
    exc: BaseException,
    step: int | None,
    env: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The row of a run whose controller failed: ``failed: true``, the reason (exception type and
    message, one line), where it was raised, the step and simulated time it failed at, and the
    run's scenario. ``step``: control steps flown before the failure (0: at reset or the first
    action), ``None`` when the controller could not even be built; ``env``: the run's env
    settings (the control period of the time)."""
    message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(reason) > _MAX_ERROR_CHARS:
        reason = reason[: _MAX_ERROR_CHARS - 1] + "…"
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name}" if tb else None
    row: dict[str, Any] = {"run_id": spec.run_id, "controller": spec.controller}
    if spec.scenario is not None:
        row.update(scenario=spec.scenario, group=spec.group)
    row.update(
        payload=spec.payload,
        wind=spec.wind if isinstance(spec.wind, str) else list(spec.wind),
        trajectory=spec.trajectory,
        seed=spec.seed,
        failed=True,
        error=reason,
        error_type=type(exc).__name__,
        error_at=where,
        failed_step=step,
        failed_t=None if step is None else step * control_dt(env or {}),  # s
    )
    return row


def is_failed(row: dict[str, Any]) -> bool:
    """Whether ``row`` records a failed run (a controller error) rather than a flight."""
    return bool(row.get("failed"))


def flown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of runs that flew (finished or diverged): what metrics are computed from."""
    return [r for r in rows if not is_failed(r)]


def failed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failure rows among ``rows``, in their order."""
    return [r for r in rows if is_failed(r)]


def failure_summary(rows: list[dict[str, Any]], limit: int = 3) -> str | None:
    """A short summary of the failed runs (count, then the first ``limit`` with run id and
    reason), or None when no run failed."""
    failed = failed_rows(rows)
    if not failed:
        return None
    lines = [f"{len(failed)} of {len(rows)} runs failed (controller errors):"]
    for r in failed[:limit]:
        at = "" if r.get("failed_step") is None else f" at step {r['failed_step']}"
        lines.append(f"  {r['run_id']}{at}: {r.get('error')}")
    if len(failed) > limit:
        lines.append(f'  … and {len(failed) - limit} more (rows with "failed": true)')
    return "\n".join(lines)


def vector_batches(
    specs: list[RunSpec],
    cfg: SweepConfig,
    series_dir: str | None,
    workers: int,
    batch_size: int = MAX_BATCH,
) -> list[Job]:
    """The jobs of the vector backend: ``max(workers, ⌈runs / batch_size⌉)`` batches, each an
    equal share of every controller and scenario (run ``j`` goes to batch ``j mod batches``), so
    the cores finish together. A batch's rows are written when it finishes: smaller batches
    lose less to an interruption and move the progress bar more often, larger ones fly faster."""
    if not specs:
        return []
    parts = max(1, min(len(specs), max(workers, math.ceil(len(specs) / batch_size))))
    jobs: list[Job] = []
    for j in range(parts):
        batch = specs[j::parts]
        dirs = [series_dir if _wants_series(cfg, s) else None for s in batch]
        jobs.append((run_batch, (batch, cfg, dirs)))
    return jobs


def result_row(
    spec: RunSpec, res: EpisodeResult, est: np.ndarray, series_dir: str | None = None
) -> dict[str, Any]:
    """The row of one flown matrix spec (JSON-ready), from its result and the residual estimate
    the controller applied at each step (``est[k]``: at step k, NaN rows where it has none); the
    time series go to ``series_dir`` when given."""
    bias = bias_z = None
    steady = res.t >= STEADY_STATE_FROM_S - 1e-9
    if not res.diverged and steady.any() and np.isfinite(est[1:]).all():  # est[0]: no step yet
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
def _parse_row(line: str) -> dict[str, Any] | None:
    """The row of one complete line, or None if it is not a complete JSON object."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``rows.jsonl`` (or of the folder holding it), in file order.

    An incomplete line (a killed writer) is skipped with a warning; a complete last line without
    its newline counts. A ``run_id`` is never counted twice: the first complete row of each is
    kept and the duplicates are dropped with one warning.
    """
    path = Path(path)
    if path.is_dir():
        path = path / ROWS_FILE
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    seen: set[Any] = set()
    duplicates = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = _parse_row(line)
            if row is None:
                print(f"warning: skipping an incomplete row in {path}", file=sys.stderr)
                continue
            run_id = row.get("run_id")
            if run_id is not None:
                key = json.dumps(run_id)
                if key in seen:
                    duplicates += 1
                    continue
                seen.add(key)
            rows.append(row)
    if duplicates:
        print(
            f"warning: {path} holds {duplicates} duplicate row(s) of run ids already seen; "
            "kept the first row of each",
            file=sys.stderr,
        )
    return rows


class RowWriter:
    """Appends complete JSON lines, each written and fsynced before the next run is reported.

    Opening repairs a killed writer's tail: a complete last row that only lacks its newline is
    kept (the newline is added); a truly partial last line is cut off. A failed append (disk full)
    is cut back too, so the file always ends with a complete row.
    """

    def __init__(self, path: Path):
        self.path = path
        self._repair_tail()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size  # bytes of complete rows

    def _repair_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        tail = data[cut:].decode("utf-8", errors="replace").strip()
        with self.path.open("r+b") as f:
            if tail and _parse_row(tail) is not None:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")  # a complete row: keep it
            else:
                f.truncate(cut)  # a partial line: the run is flown again
            f.flush()
            os.fsync(f.fileno())

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` as one line; on ``OSError`` the file is cut back to its last row."""
        data = (json.dumps(row) + "\n").encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass  # the reader and the next writer skip or cut a partial line anyway
            raise
        self._size += len(data)

    def close(self) -> None:
        os.close(self._fd)


class FolderLock:
    """An exclusive lock on an output folder: ``flock`` on ``folder/.lock``.

    The lock file holds the holder's pid; the kernel releases the lock when the holder's file is
    closed or the process dies (even by ``SIGKILL``), so a killed sweep never leaves a stale lock.
    A second holder — another process, or the same one — gets a ``ValueError`` at once.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``ValueError`` naming the folder and the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip() or "?"
                os.close(fd)
                raise ValueError(
                    f"{self.folder} is in use by another sweep (pid {holder}); wait for it to "
                    "finish (then --resume) or choose another output folder"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the file stays: removing it would race with a new holder)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _output_error(what: str, path: Path, exc: OSError) -> ValueError:
    reason = exc.strerror or str(exc)
    return ValueError(f"cannot {what} {path}: {reason}")


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
    batches: Callable[[list[str], int], list[Job]] | None = None,
    retry_failed: bool = False,
) -> list[dict[str, Any]]:
    """The sweep engine: fly ``jobs`` (run id → job returning a row with that ``run_id``).

    ``backend="vector"`` needs ``batches(run_ids, workers)``: the jobs that fly those runs in
    batches, each returning a list of rows; they run on the process pool.

    Every row is appended to ``out_dir/rows.jsonl`` the moment it arrives (one fsynced line);
    ``resume`` skips the run ids already there — failure rows included, unless ``retry_failed``:
    then the failure rows are dropped from the file (one atomic rewrite) and those runs fly
    again —, and without it an existing rows file is an error. A job's failure row (a controller
    error, ``"failed": true``) is kept like any row and the sweep goes on; nothing here raises
    because a run failed. ``config`` (a dataclass) is saved as ``out_dir/config_file``. With
    ``out_dir=None`` nothing is written. Returns every row, old and new, in the order of
    ``jobs`` (the file keeps completion order), so whatever is computed from them does not
    depend on the backend's timing.
    """
    if backend not in SWEEP_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid choices: {', '.join(SWEEP_BACKENDS)}")
    if backend == "vector" and batches is None:
        raise ValueError("backend 'vector' needs the batches of the runs (batches=...)")
    if retry_failed and not resume:
        raise ValueError("retry_failed (--retry-failed) continues a sweep: it needs resume=True")
    how = (backend, address, workers, progress, desc, on_row, batches)
    if out_dir is None:
        return _fly_rows(jobs, [], None, *how)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _output_error("create the output folder", out, exc) from exc
    lock = FolderLock(out)
    try:
        lock.acquire()
    except OSError as exc:
        raise _output_error("write to the output folder", out, exc) from exc
    try:
        rows_path = out / ROWS_FILE
        rows = read_rows(rows_path)
        if rows and not resume:
            raise ValueError(
                f"{rows_path} already holds {len(rows)} rows; pass resume=True (--resume) to "
                "continue it or choose another output folder"
            )
        if retry_failed and failed_rows(rows):
            try:
                rows = _drop_failed_rows(rows_path)
            except OSError as exc:
                raise _output_error("rewrite", rows_path, exc) from exc
        try:
            if config is not None:
                configs.dump(config, out / config_file)
            writer = RowWriter(rows_path)
        except OSError as exc:
            raise _output_error("write to", Path(exc.filename or rows_path), exc) from exc
        try:
            return _fly_rows(jobs, rows, writer, *how)
        finally:
            writer.close()
    finally:
        lock.release()


def _drop_failed_rows(path: Path) -> list[dict[str, Any]]:
    """Rewrite ``path`` without its failure rows (a temporary file, fsynced, renamed over it: a
    kill leaves either file whole) and return the rows kept."""
    keep = flown_rows(read_rows(path))
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(b"".join((json.dumps(r) + "\n").encode("utf-8") for r in keep))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return keep


def _fly_rows(
    jobs: dict[str, Job],
    rows: list[dict[str, Any]],
    writer: RowWriter | None,
    backend: str,
    address: str | None,
    workers: int | None,
    progress: bool,
    desc: str,
    on_row: Callable[[dict[str, Any]], None] | None,
    batches: Callable[[list[str], int], list[Job]] | None,
) -> list[dict[str, Any]]:
    """Fly the jobs whose run id is not in ``rows`` yet, appending each new row to ``writer``."""
    done_ids = {r.get("run_id") for r in rows}
    todo_ids = [run_id for run_id in jobs if run_id not in done_ids]
    where = writer.path if writer is not None else None
    if backend == "vector":
        assert batches is not None
        n_workers = workers or os.cpu_count() or 1
        todo = batches(todo_ids, n_workers) if todo_ids else []
        stream = map_jobs(todo, backend="local", workers=n_workers)
    else:
        todo = [jobs[run_id] for run_id in todo_ids]
        stream = map_jobs(todo, backend=backend, address=address, workers=workers)
    bar = None
    if progress and todo_ids:
        from tqdm import tqdm

        bar = tqdm(total=len(todo_ids), desc=desc, unit="run", file=sys.stderr)
    try:
        for result in stream:
            for row in result if isinstance(result, list) else [result]:
                _take_row(row, rows, writer, where, on_row, bar)
    except BrokenProcessPool:
        raise RuntimeError(
            f"a worker process died; the {len(rows)} finished rows are safe in {where}; "
            "rerun with --resume to fly the rest"
        ) from None
    finally:
        stream.close()  # release the workers (and a Ray instance started for this) at once
        if bar is not None:
            bar.close()
    order = {run_id: i for i, run_id in enumerate(jobs)}
    rows.sort(key=lambda r: order.get(r.get("run_id"), len(order)))  # stable: unknown ids last
    return rows


def _take_row(
    row: dict[str, Any],
    rows: list[dict[str, Any]],
    writer: RowWriter | None,
    where: Path | None,
    on_row: Callable[[dict[str, Any]], None] | None,
    bar: Any,
) -> None:
    """Append one finished row to the file (fsynced), the list, the hook and the progress bar."""
    if writer is not None:
        try:
            writer.write(row)
        except OSError as exc:
            raise ValueError(
                f"cannot append a row to {where}: {exc.strerror or exc}; the "
                f"{len(rows)} rows written before are kept there; free the space (or "
                "fix the folder) and rerun with --resume to fly the rest"
            ) from exc
    rows.append(row)
    if on_row is not None:
        on_row(row)
    if bar is not None:
        bar.update(1)
        if row.get("diverged"):
            bar.write(f"diverged: {row['run_id']} ({row['termination']})")
        elif is_failed(row):
            bar.write(f"failed: {row['run_id']} ({row.get('error')})")


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    backend: str = DEFAULT_BACKEND,
    address: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    batch_size: int = MAX_BATCH,
    retry_failed: bool = False,
) -> list[dict[str, Any]]:
    """Fly the matrix into ``out_dir/rows.jsonl`` and return every row (old and new).

    A run whose controller fails (raises, or returns a non-finite action) is a failure row
    (:func:`failure_row`, ``"failed": true``) and the other runs fly on; this never raises
    because of a failed run (:func:`failure_summary` summarizes them).

    Args:
        cfg: the matrix.
        out_dir: output folder; the resolved config is saved there as ``sweep_config.yaml``.
        resume: keep the rows already in ``out_dir`` and fly only the missing runs; without it an
            existing rows file is an error (nothing is overwritten by accident).
        backend: ``local`` (process pool, one run per job), ``ray`` or ``vector`` (batches of
            runs of one controller on the vector env, one batch per process: same rows to
            ≤ 1e-9, :func:`run_batch`).
        address: Ray cluster address (``ray start --head`` prints it); none: a local Ray instance.
        workers: processes (local, vector) or CPUs (local Ray); default ``cfg.workers`` or
            every core.
        batch_size: most runs per batch of the vector backend (:func:`vector_batches`).
        retry_failed: with ``resume``, fly the runs recorded as failed again (default: keep their
            failure rows).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    series_dir = Path(out_dir) / SERIES_DIR
    if cfg.series:
        try:
            series_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _output_error("create the series folder", series_dir, exc) from exc
    specs = {s.run_id: s for s in expand(cfg)}
    jobs: dict[str, Job] = {
        run_id: (run_one, (s, cfg, str(series_dir) if _wants_series(cfg, s) else None))
        for run_id, s in specs.items()
    }
    if backend in ("local", "vector"):
        n_workers = workers or cfg.workers or None
    else:
        n_workers = None if workers is None and not cfg.workers else (workers or cfg.workers)

    def batches(run_ids: list[str], n: int) -> list[Job]:
        # controllers without a vectorized path would only loop inside a batch, where they fly
        # no faster (measured: 5-10 % slower): they keep one job per run
        vectorized = {
            label: has_batch_path(
                cfg.controller_spec(label), **cfg.controller_options.get(label, {})
            )
            for label in cfg.labels
        }
        batched = [specs[i] for i in run_ids if vectorized.get(specs[i].controller, False)]
        single = [jobs[i] for i in run_ids if not vectorized.get(specs[i].controller, False)]
        return vector_batches(batched, cfg, str(series_dir), n, batch_size) + single

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
        batches=batches,
        retry_failed=retry_failed,
    )
