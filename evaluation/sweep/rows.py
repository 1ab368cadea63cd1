"""A sweep's rows and the file that holds them: the row of a flown run (:func:`result_row`) or of a
failed one (:func:`failure_row`), and ``rows.jsonl``, its reader, its fsynced writer and the
``.lock`` of its folder.

Each run becomes one JSON row appended to ``rows.jsonl`` the moment it finishes (one ``write`` +
``fsync`` of a complete line, :class:`RowWriter`), so an interrupted sweep loses no finished run.
An output folder has one writer at a time (:class:`FolderLock`); readers (:func:`read_rows`) keep
the first complete row of every ``run_id`` all the same. The sweep, the stress study and the
reproduction check all read and write rows through this module.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.envs.disturbances import resolve_payload
from residual_quad.episode import STEADY_STATE_FROM_S, EpisodeResult, RunSpec, control_dt
from residual_quad.evaluation.sweep.recovery import RecoverySpec, recovery_metrics

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: folders are not locked
    fcntl = None  # type: ignore[assignment]

#: the rows file of an output folder
ROWS_FILE = "rows.jsonl"
#: the folder (inside an output folder) of the time series kept for selected runs
SERIES_DIR = "series"
#: the lock file of an output folder (holds the writer's pid)
LOCK_FILE = ".lock"


def finite(x: float) -> float | None:
    """``x`` as a float, or None (JSON ``null``) when it is not finite."""
    return float(x) if math.isfinite(x) else None


def series_stem(run_id: str) -> str:
    """The file name (without suffix) of a run's time series: its ``run_id`` made path-safe."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)


# ---------------------------------------------------------------------------------- row schema
def result_row(
    spec: RunSpec,
    res: EpisodeResult,
    est: np.ndarray,
    series_dir: str | None = None,
    recovery: RecoverySpec | None = None,
) -> dict[str, Any]:
    """The row of one flown matrix spec (JSON-ready), from its result and the residual estimate
    the controller applied at each step (``est[k]``: at step k, NaN rows where it has none); the
    time series go to ``series_dir`` when given. A scenario with events (``recovery``) adds the
    recovery columns (:mod:`residual_quad.evaluation.sweep.recovery`)."""
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
        "rmse": finite(res.rmse),
        "max_error": finite(res.max_error),
        "diverged": res.diverged,
        "termination": res.termination,
        "control_cost": res.control_cost,
        "max_tilt_deg": float(np.degrees(res.tilt.max())),
        "residual_bias": bias,
        "residual_bias_z": bias_z,
        "steps": res.steps,
        "wall_time": res.wall_time,
    }
    if recovery is not None:
        row.update(recovery_metrics(res.t, res.error, recovery, res.diverged))
    if series_dir is not None:
        path = Path(series_dir) / (series_stem(spec.run_id) + ".npz")
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


def drop_failed_rows(path: Path) -> list[dict[str, Any]]:
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


def diverged_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Diverged runs per controller label of ``rows``, labels sorted (none: ``{}``)."""
    counts: dict[str, int] = {}
    for r in rows:
        if r.get("diverged"):
            counts[r["controller"]] = counts.get(r["controller"], 0) + 1
    return dict(sorted(counts.items()))
