"""Run independent jobs on a process pool or on Ray: the one parallel backend of the project.

The sweep engine (:func:`residual_quad.evaluation.sweep.run_rows`) and residual data collection
both hand their runs here. A job is a module-level function and its picklable arguments, so the
local pool (``spawn``) and Ray workers import and call it the same way; results come back in
completion order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any

BACKENDS = ("local", "ray")

#: one unit of work for a backend: a module-level function and its (picklable) arguments
Job = tuple[Callable[..., Any], tuple[Any, ...]]


def _run_job(job: Job) -> Any:
    fn, args = job
    return fn(*args)


def _local(jobs: list[Job], workers: int) -> Iterator[Any]:
    if workers <= 1:
        for job in jobs:
            yield _run_job(job)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
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
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif workers > 0:
            kwargs["num_cpus"] = workers
        ray.init(**kwargs)
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


def map_jobs(
    jobs: list[Job],
    *,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
) -> Iterator[Any]:
    """Run ``jobs`` on a backend and yield their results in completion order.

    ``workers``: processes (local) or CPUs of a local Ray instance; ``None`` = every core (local)
    or Ray's own default.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid choices: {', '.join(BACKENDS)}")
    if backend == "local":
        n = workers or os.cpu_count() or 1
        return _local(jobs, min(n, max(1, len(jobs))))
    return _ray(jobs, address, workers or 0)
