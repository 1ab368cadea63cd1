"""Run independent jobs on a process pool or on Ray: the one parallel backend of the project.

The sweep engine (:func:`residual_quad.evaluation.sweep.engine.run_rows`) and residual data
collection both hand their runs here. A job is a module-level function and its picklable
arguments, so the local pool (``spawn``) and Ray workers import and call it the same way; results
come back in completion order.

Nothing outlives the process that started it: local pool workers end themselves when their parent
dies, even by ``SIGKILL`` (:func:`_die_with_parent`), and a local Ray instance started here is shut
down on every exit path (a Ray cluster the caller connected to is left alone). Ray's own processes
mostly follow a killed driver by themselves, but its agents wait about a minute on the dead GCS
first; on Linux a small watchdog process (:func:`_reap_ray_orphans`) ends them at once.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
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


# ------------------------------------------------------------------ Ray watchdog (Linux /proc)
def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks) of a live process, None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), fields[19].decode()


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _proc_stat(int(name))) is not None:
            kids.setdefault(st[0], []).append(int(name))
    return kids


def _reap_ray_orphans(driver_pid: int, roots: list[str], poll_s: float = PARENT_POLL_S) -> None:
    """Watchdog body: while ``driver_pid`` (our parent) lives, note every process of the Ray
    instance it started (``roots``: ``"pid:start_time"`` of the processes ``ray.init`` spawned,
    and all their descendants); once the driver is gone, ``SIGKILL`` those still alive (same pid
    *and* start time, so a reused pid is never hit)."""
    known = {int(r.split(":")[0]): r.split(":")[1] for r in roots}
    seen: dict[int, str] = {}
    while os.getppid() == driver_pid:
        kids = _children_map()
        stack = [pid for pid, start in known.items() if (_proc_stat(pid) or (0, ""))[1] == start]
        while stack:
            pid = stack.pop()
            if (st := _proc_stat(pid)) is not None:
                seen[pid] = st[1]
                stack.extend(kids.get(pid, []))
        time.sleep(poll_s)
    for pid, start in seen.items():
        st = _proc_stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _start_ray_watchdog(before: set[int]) -> subprocess.Popen | None:
    """Watch the processes this driver spawned since ``before`` (its children then); Linux only."""
    if not os.path.isdir("/proc/self"):
        return None
    me = os.getpid()
    roots = [
        f"{pid}:{st[1]}"
        for pid in set(_children_map().get(me, [])) - before
        if (st := _proc_stat(pid)) is not None
    ]
    code = "import sys; from residual_quad.parallel import _reap_ray_orphans as r; "
    code += "r(int(sys.argv[1]), sys.argv[2:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(me), *roots],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the sweep's terminal does not stop it first
    )


def _ray(jobs: list[Job], address: str | None, workers: int) -> Iterator[Any]:
    try:
        import ray
    except ImportError:
        raise ValueError(
            "the ray backend needs Ray: pip install 'residual-quad[cluster]'"
        ) from None
    started_here = False
    watchdog = None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif workers > 0:
            kwargs["num_cpus"] = workers
        local = os.path.isdir("/proc/self") and not address
        before = set(_children_map().get(os.getpid(), [])) if local else set()
        ray.init(**kwargs)
        # ours to end: ray.shutdown stops a local instance and only disconnects from a cluster
        started_here = True
        atexit.register(ray.shutdown)
        if local:
            watchdog = _start_ray_watchdog(before)
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
        if watchdog is not None:  # Ray ended cleanly: nothing left to reap
            watchdog.terminate()
            watchdog.wait(timeout=10)


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
