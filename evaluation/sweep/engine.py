"""The sweep engine: fly runs into an output folder's ``rows.jsonl``, on a process pool, Ray or
batches on the vector env.

Runs are pure functions of their spec (seeded env, controllers reset with the seed), so the local
process pool, the Ray backend and the vector batches produce the same rows (bit for bit for the
first two, ``wall_time`` aside; to ≤ 1e-9 for the batches). :func:`run_rows` is the engine proper
(it knows nothing of the matrix: the stress study uses it too), holding the folder's lock for the
sweep's whole life, resuming and retrying failed runs; :func:`run_sweep` flies a
:class:`~residual_quad.evaluation.sweep.config.SweepConfig` with it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Collection
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from residual_quad import configs
from residual_quad.controllers.batch import BatchedGroups, batch_from_spec, has_batch_path
from residual_quad.controllers.specs import entry_label, resolve_entry
from residual_quad.episode import (
    EpisodeResult,
    RunSpec,
    build_controller,
    control_context,
    fly,
    fly_batch,
    observation_env,
)
from residual_quad.evaluation.sweep.config import (
    CONFIG_FILE,
    RESUME_FREE_KEYS,
    SweepConfig,
    expand,
    wants_series,
)
from residual_quad.evaluation.sweep.recovery import recovery_spec
from residual_quad.evaluation.sweep.rows import (
    ROWS_FILE,
    SERIES_DIR,
    FolderLock,
    RowWriter,
    drop_failed_rows,
    failed_rows,
    failure_row,
    is_failed,
    read_rows,
    result_row,
)
from residual_quad.parallel import BACKENDS, Job, map_jobs
from residual_quad.training.blas import blas_threads

#: sweep backends: the process pool or Ray, one run per job; ``vector``: batches of runs on the
#: vector env, one batch per job on the process pool
SWEEP_BACKENDS = (*BACKENDS, "vector")
#: most runs one vector-backend job flies together
MAX_BATCH = 256
#: the backend ``rquad sweep`` and the pipeline use unless told otherwise (the fastest on one
#: machine: ``rquad bench --sections sweep``)
DEFAULT_BACKEND = "vector"


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
    recovery = recovery_spec(cfg.env, spec.episode_s, cfg.recovery_band_m)
    return result_row(spec, res, est, series_dir, recovery)


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
    recovery = recovery_spec(cfg.env, cfg.episode_s, cfg.recovery_band_m)
    if results is not None:
        return [
            result_row(s, res, res.extras["residual_est"], d, recovery)
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
            rows[i] = result_row(
                specs[i], res, res.extras["residual_est"], series_dirs[i], recovery
            )
    return rows  # type: ignore[return-value]


def _fly_together(specs: list[RunSpec], cfg: SweepConfig) -> list[EpisodeResult]:
    """The results of ``specs`` flown in one batch per action mode and observation (a policy's
    preview: :func:`~residual_quad.episode.observation_env`), in ``specs`` order; raises
    whatever a batch controller or the vector env raises."""
    context = control_context(cfg.env)
    by_label: dict[str, list[int]] = {}
    for i, s in enumerate(specs):
        by_label.setdefault(s.controller, []).append(i)
    by_mode: dict[tuple[str, str], list[tuple[Any, list[int]]]] = {}
    envs: dict[tuple[str, str], dict[str, Any]] = {}
    for label, idx in by_label.items():
        ctrl = batch_from_spec(
            cfg.controller_spec(label), len(idx), context, **cfg.controller_options.get(label, {})
        )
        own = {**observation_env(ctrl), **cfg.env}  # the sweep's env wins, as in run_episode
        key = (ctrl.action_mode, repr(sorted(own.items())))
        by_mode.setdefault(key, []).append((ctrl, idx))
        envs[key] = own
    out: list[EpisodeResult | None] = [None] * len(specs)
    for key, parts in by_mode.items():
        idx = [i for _, part in parts for i in part]
        local = {i: k for k, i in enumerate(idx)}
        ctrl = BatchedGroups([(c, [local[i] for i in part]) for c, part in parts])
        with blas_threads(1):  # one process per core: a second BLAS thread only contends
            results = fly_batch([specs[i] for i in idx], ctrl, envs[key])
        for i, res in zip(idx, results, strict=True):
            out[i] = res
    return out  # type: ignore[return-value]


def vector_batches(
    specs: list[RunSpec],
    cfg: SweepConfig,
    series_dir: str | None,
    workers: int,
    batch_size: int = MAX_BATCH,
) -> list[Job]:
    """The jobs of the vector backend: ``max(2·workers, ⌈runs / batch_size⌉)`` batches (at most
    one per run; one worker has nothing to balance: ``⌈runs / batch_size⌉``) of consecutive runs,
    each controller's runs kept together (in the order its label first appears), so each
    controller's batched step is shared by as many envs as possible: spreading every controller
    over every batch left ~9 envs per controller and call in the 3 132-run matrix and cost 1.65×
    the CPU time (docs/results/benchmarks.md). The pool hands the next batch to the first free
    core, so the cores finish within one batch of each other. A batch's rows are written when it
    finishes: smaller batches lose less to an interruption and move the progress bar more often,
    larger ones fly faster."""
    if not specs:
        return []
    first: dict[str, int] = {}
    for s in specs:
        first.setdefault(s.controller, len(first))
    ordered = sorted(specs, key=lambda s: first[s.controller])  # stable: the matrix's order within
    n = len(ordered)
    balance = 2 * workers if workers > 1 else 1
    parts = max(1, min(n, max(balance, math.ceil(n / batch_size))))
    bounds = [round(j * n / parts) for j in range(parts + 1)]
    jobs: list[Job] = []
    for j in range(parts):
        batch = ordered[bounds[j] : bounds[j + 1]]
        dirs = [series_dir if wants_series(cfg, s) else None for s in batch]
        jobs.append((run_batch, (batch, cfg, dirs)))
    return jobs


def sweep_batches(
    cfg: SweepConfig,
    specs: dict[str, RunSpec],
    jobs: dict[str, Job],
    series_dir: str | None,
    batch_size: int = MAX_BATCH,
) -> Callable[[list[str], int], list[Job]]:
    """The vector backend's ``batches(run_ids, workers)`` for a matrix: the runs of controllers
    with a vectorized path in :func:`vector_batches`, every other run its own job from ``jobs``
    (inside a batch such a controller would only loop, no faster: measured 5-10 % slower)."""

    def batches(run_ids: list[str], n: int) -> list[Job]:
        vectorized = {
            label: has_batch_path(
                cfg.controller_spec(label), **cfg.controller_options.get(label, {})
            )
            for label in cfg.labels
        }
        batched = [specs[i] for i in run_ids if vectorized.get(specs[i].controller, False)]
        single = [jobs[i] for i in run_ids if not vectorized.get(specs[i].controller, False)]
        return vector_batches(batched, cfg, series_dir, n, batch_size) + single

    return batches


def _runs_settings(data: dict[str, Any], shared: dict[str, set[str]]) -> dict[str, Any]:
    """The settings of a config (plain data) that fix the numbers of the runs ``shared`` names:
    ``controllers`` as label → resolved spec and options, ``controller_options`` and
    ``scenarios`` (by name) narrowed to the labels and names both configs fly."""
    out = dict(data)
    labels = shared.get("controllers", set())
    if isinstance(data.get("controllers"), list):
        out["controllers"] = {
            spec.label: {"spec": spec.target, "options": configs.to_dict(spec.options)}
            for spec in (
                resolve_entry(e)
                for e in data["controllers"]
                if _entry_name("controllers", e) in labels
            )
        }
    if isinstance(data.get("controller_options"), dict):
        out["controller_options"] = {
            k: v for k, v in data["controller_options"].items() if k in labels
        }
    if isinstance(data.get("scenarios"), list):
        names = shared.get("scenarios", set())
        out["scenarios"] = {
            _entry_name("scenarios", s): s
            for s in data["scenarios"]
            if _entry_name("scenarios", s) in names
        }
    return out


def _entry_name(key: str, entry: Any) -> str | None:
    """The name a list entry gives its runs' ids: a controller's label, a scenario's name."""
    if key == "controllers":
        return entry_label(entry)
    return entry.get("name") if isinstance(entry, dict) else None


def check_resume_config(
    config: Any, folder: str | Path, config_file: str, free_keys: Collection[str] = ()
) -> None:
    """Refuse to resume ``folder`` with another config than the one saved there as
    ``config_file`` (a ``ValueError`` naming the first key that differs and both values): its
    rows would mix with runs of other settings under the same run ids.

    ``free_keys`` are top-level keys a resume may change: how the runs are flown, which series
    are kept, the matrix axes (each run's id names its own payload, wind, trajectory and seed, so
    adding or dropping an entry adds or drops runs and changes none). The ``controllers`` and
    stress ``scenarios`` may gain or lose entries too, but a label or scenario name both configs
    use must mean the same controller (spec, options, ``controller_options``) or scenario. Keys
    the saved file lacks (a folder of an older version) count as their defaults. Nothing is
    checked when the folder holds no saved config."""
    path = Path(folder) / config_file
    if not path.is_file():
        return
    saved = configs.read_yaml(path)
    if not isinstance(saved, dict):
        raise ValueError(
            f"{path} does not hold a saved config (a YAML mapping); move it away to resume, or "
            "choose a new --out"
        )
    ours = configs.parse_yaml(yaml.safe_dump(configs.to_dict(config), sort_keys=False))
    theirs = {**configs.field_defaults(type(config)), **saved}
    shared: dict[str, set[str]] = {}
    for key in ("controllers", "scenarios"):
        if isinstance(theirs.get(key), list) and isinstance(ours.get(key), list):
            names = [{_entry_name(key, e) for e in side[key]} for side in (theirs, ours)]
            shared[key] = (names[0] & names[1]) - {None}
    differs = configs.first_difference(
        _runs_settings(theirs, shared), _runs_settings(ours, shared), ignore=free_keys
    )
    if differs is not None:
        key, there, here = differs
        raise ValueError(
            f"{folder} holds rows flown with another config ({key}: {there!r} in its "
            f"{config_file}, {here!r} now); resume it only with that config, or fly this one "
            "into a new folder (another --out)"
        )


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
    free_keys: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The sweep engine: fly ``jobs`` (run id → job returning a row with that ``run_id``).

    ``backend="vector"`` needs ``batches(run_ids, workers)``: the jobs that fly those runs in
    batches, each returning a list of rows; they run on the process pool.

    Every row is appended to ``out_dir/rows.jsonl`` the moment it arrives (one fsynced line);
    ``resume`` skips the run ids already there — failure rows included, unless ``retry_failed``:
    then the failure rows are dropped from the file (one atomic rewrite) and those runs fly
    again —, and without it an existing rows file is an error. A job's failure row (a controller
    error, ``"failed": true``) is kept like any row and the sweep goes on; nothing here raises
    because a run failed. ``config`` (a dataclass) is saved as ``out_dir/config_file``; resuming
    a folder whose rows were flown with another config is a ``ValueError`` naming the first key
    that differs, nothing flown or rewritten (:func:`check_resume_config`; ``free_keys``: the
    keys a resume may change). With ``out_dir=None`` nothing is written. Returns every row, old
    and new, in the order of ``jobs`` (the file keeps completion order), so whatever is computed
    from them does not depend on the backend's timing.
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
        if rows and config is not None:
            check_resume_config(config, out, config_file, free_keys)
        if retry_failed and failed_rows(rows):
            try:
                rows = drop_failed_rows(rows_path)
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
            existing rows file is an error (nothing is overwritten by accident). The folder's
            saved config must agree with ``cfg`` but for :data:`RESUME_FREE_KEYS`
            (:func:`check_resume_config`).
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
        run_id: (run_one, (s, cfg, str(series_dir) if wants_series(cfg, s) else None))
        for run_id, s in specs.items()
    }
    if backend in ("local", "vector"):
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
        batches=sweep_batches(cfg, specs, jobs, str(series_dir), batch_size),
        retry_failed=retry_failed,
        free_keys=RESUME_FREE_KEYS,
    )


def run_sweeps(
    sweeps: list[tuple[SweepConfig, str | Path]],
    *,
    workers: int | None = None,
    resume: bool = False,
    retry_failed: bool = False,
    desc: str = "sweeps",
) -> list[str]:
    """Fly several small sweeps (``(config, out_dir)`` each) as one job each on one process
    pool: each sweep flies in one worker, its runs in one vector batch (one worker has nothing
    to balance), while the other workers fly the other sweeps. For many small matrices — the lag
    sweep's 84 runs per plant — this is cheaper than :func:`run_sweep` one after the other with
    every worker on each: a batched controller's step costs about as much for 12 envs as for
    100, so a sweep cut into a batch per core pays it once per batch, and each sweep starts its
    own pool (docs/results/benchmarks.md). The pool takes the larger sweeps first, so the
    workers finish close together. The rows are those of :func:`run_sweep` (a run's numbers do
    not depend on its batch). Returns the output folders in completion order."""
    if not sweeps:
        return []
    runs = [len(expand(cfg)) for cfg, _ in sweeps]
    order = sorted(range(len(sweeps)), key=lambda i: -runs[i])  # stable: ties keep their order
    jobs: list[Job] = [
        (_sweep_job, (sweeps[i][0], str(sweeps[i][1]), resume, retry_failed)) for i in order
    ]
    from tqdm import tqdm

    done = []
    with tqdm(total=len(jobs), desc=desc, unit="sweep", file=sys.stderr) as bar:
        stream = map_jobs(jobs, backend="local", workers=workers)
        try:
            for out in stream:
                done.append(out)
                bar.update(1)
        except BrokenProcessPool:
            raise RuntimeError(
                f"a worker process died after {len(done)} of {len(jobs)} sweeps; every finished "
                "row is safe in its folder; rerun with resume to fly the rest"
            ) from None
        finally:
            stream.close()
    return done


def _sweep_job(cfg: SweepConfig, out_dir: str, resume: bool, retry_failed: bool) -> str:
    """One sweep of :func:`run_sweeps`, flown in this process, as one vector batch."""
    run_sweep(
        cfg,
        out_dir,
        resume=resume,
        workers=1,
        progress=False,
        batch_size=sys.maxsize,  # one worker, no size limit: the whole sweep in one batch
        retry_failed=retry_failed,
    )
    return out_dir
