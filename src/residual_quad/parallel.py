"""Run independent jobs on a process pool or on Ray: the one parallel backend of the project.

The sweep engine (:func:`residual_quad.evaluation.sweep.run_rows`) and residual data collection
both hand their runs here. A job is a module-level function and its picklable arguments, so the
local pool (``spawn``) and Ray workers import and call it the same way; results come back in
completion order.

Nothing outlives the process that started it: local pool workers end themselves when their parent
dies, even by ``SIGKILL`` (:func:`_die_with_parent`), and a local Ray instance started here is shut
down on every exit path (a Ray cluster the caller connected to is left alone).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any

BACKENDS = ("local", "ray")
PARENT_POLL_S = 0.5  # s, how often a pool worker checks that its parent is still alive
_PR_SET_PDEATHSIG = 1  # Linux prctl option: signal this process when its parent dies

#: one unit of work for a backend: a module-level function and its (picklable) arguments
Job = tuple[Callable[..., Any], tuple[Any, ...]]


def _run_job(job: Job) -> Any:
    fn, args = job
    return fn(*args)


def _watch_parent(parent_pid: int, poll_s: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os._exit(1)  # orphaned: the pool is gone, nobody will read our results


def _die_with_parent(parent_pid: int, poll_s: float = PARENT_POLL_S) -> None:
    """Pool initializer: end this worker as soon as ``parent_pid`` (the sweep process) dies.

    A ``SIGKILL``-ed parent cannot shut its pool down, and a spawn worker blocked on its task pipe
    would otherwise stay alive (with a few hundred MB and the resource tracker) indefinitely. On
    Linux the kernel sends ``SIGKILL`` on the parent's death (``PR_SET_PDEATHSIG``); everywhere a
    daemon thread also polls ``os.getppid()`` every ``poll_s`` s and exits when it changed.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # 9 = SIGKILL
        except (OSError, AttributeError):
            pass  # no prctl: the polling thread below still ends the worker
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid, poll_s), name="parent-watch", daemon=True
    ).start()


def _local(jobs: list[Job], workers: int) -> Iterator[Any]:
    if workers <= 1:
        for job in jobs:
            yield _run_job(job)
        return
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=_die_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        pending = {pool.submit(_run_job, job) for job in jobs}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise


def _ray(jobs: list[Job], address: str | None, workers: int) -> Iterator[Any]:
    try:
        import ray
    except ImportError:
        raise ValueError(
            "the ray backend needs Ray: pip install 'residual-quad[cluster]'"
        ) from None
    started_here = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif workers > 0:
            kwargs["num_cpus"] = workers
        ray.init(**kwargs)
        # ours to end: ray.shutdown stops a local instance and only disconnects from a cluster
        started_here = True
        atexit.register(ray.shutdown)
    try:
        remote = ray.remote(num_cpus=1)(_run_job)
        pending = [remote.remote(job) for job in jobs]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    yield ray.get(ref)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


def map_jobs(
    jobs: list[Job],
    *,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
) -> Iterator[Any]:
    """Run ``jobs`` on a backend and yield their results in completion order.

    ``workers``: processes (local) or CPUs of a local Ray instance; ``None`` = every core (local)
    or Ray's own default. Close the iterator (or exhaust it) to release the workers at once.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid choices: {', '.join(BACKENDS)}")
    if backend == "local":
        n = workers or os.cpu_count() or 1
        return _local(jobs, min(n, max(1, len(jobs))))
    return _ray(jobs, address, workers or 0)
