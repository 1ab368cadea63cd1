"""Fault tests of the sweep engine: SIGKILL at random points then resume, orphan workers, two
sweeps on one folder. Every loop is bounded in count and time, and every process a test starts
(or finds under one it started) is killed by pid before it ends."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.evaluation.sweep import SweepConfig, read_rows, run_sweep

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")

MATRIX = dict(  # 16 runs of 10 s: about 3 s in one process
    controllers=["pid", "geo"],
    payloads=["none", "light", "heavy", "extra"],
    winds=["calm", "windy"],
    trajectories=["helix"],
    seeds=[0],
    episode_s=10.0,
    series=[],
)
N_RUNS = 16


def _strip(rows):
    """Rows without the wall-clock time, keyed by run id."""
    return {r["run_id"]: {k: v for k, v in r.items() if k != "wall_time"} for r in rows}


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process; None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    state = fields[0].decode()
    return None if state in ("Z", "X") else (int(fields[1]), state)


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            kids.setdefault(st[0], []).append(int(name))
    out, stack = set(), [pid]
    while stack:
        for child in kids.get(stack.pop(), []):
            out.add(child)
            stack.append(child)
    return out


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if _stat(p) is not None}


def _kill_all(pids: set[int]) -> None:
    for pid in _alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


def _sweep_cmd(cfg_path: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "residual_quad.cli",
        "sweep",
        str(cfg_path),
        "--out",
        str(out),
        "--no-report",
        *extra,
    ]


# ------------------------------------------------------------------ orphans
def test_pool_workers_die_with_their_killed_parent():
    code = (
        "import time\n"
        "from residual_quad.parallel import map_jobs\n"
        "it = map_jobs([(time.sleep, (60,))] * 2, workers=2)\n"
        "next(it)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < 3:  # 2 workers + resource tracker
            seen |= _descendants(proc.pid)
            time.sleep(0.1)
        assert len(seen) >= 3, "the pool never started"
        time.sleep(1.0)  # let the workers reach their task
        seen |= _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        left = _wait_gone(seen, 5.0)
        assert not left, f"orphans still alive 5 s after the parent's SIGKILL: {sorted(left)}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        _kill_all(seen)


def test_parent_watch_thread_ends_an_orphan():
    """The getppid fallback alone (no death signal): an orphaned watcher exits within a second."""
    child = (
        "import os, time\n"
        "from residual_quad.parallel import _watch_parent\n"
        "parent = os.getppid()\n"  # before the pid goes out: the parent may die right after
        "print(os.getpid(), flush=True)\n"
        "_watch_parent(parent, 0.1)\n"
    )
    middle = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", middle], stdout=subprocess.PIPE, text=True)
    pids: set[int] = set()
    try:
        pids.add(int(proc.stdout.readline()))
        assert _alive(pids)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert not _wait_gone(pids, 3.0)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        _kill_all(pids)


# ------------------------------------------------------------------ SIGKILL, then resume
def _kill_after_rows(cmd: list[str], out: Path, after_rows: int, extra_s: float = 0.0) -> None:
    """Start the sweep ``cmd``, SIGKILL it once ``out`` holds ``after_rows`` rows (plus
    ``extra_s``), and check that no process it started outlives it by 5 s."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= _descendants(proc.pid)
            rows_file = out / "rows.jsonl"
            if rows_file.exists() and len(read_rows(rows_file)) >= after_rows:
                break
            time.sleep(0.02)
        time.sleep(extra_s)
        seen |= _descendants(proc.pid)
        assert proc.poll() is None, "the sweep ended before the kill point"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert seen, "no worker process was seen"
        left = _wait_gone(seen, 5.0)
        assert not left, f"orphans alive 5 s after the kill: {sorted(left)}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        _kill_all(seen)


def _assert_resumes_to(cfg: SweepConfig, out: Path, full: list[dict], backend: str) -> None:
    resumed = run_sweep(cfg, out, resume=True, backend=backend, workers=1, progress=False)
    assert _strip(resumed) == _strip(full)
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert len(lines) == len(set(lines)) == N_RUNS  # nothing lost, nothing duplicated


def test_sigkill_at_random_points_then_resume_equals_the_uninterrupted_run(tmp_path):
    cfg = SweepConfig(**MATRIX)
    full = run_sweep(cfg, tmp_path / "full", backend="local", workers=1, progress=False)
    cfg_path = configs.dump(cfg, tmp_path / "cfg.yaml")
    rng = random.Random(20240611)
    for trial in range(2):
        out = tmp_path / f"killed{trial}"
        after_rows, extra_s = rng.randint(1, 8), rng.uniform(0.0, 0.2)
        cmd = _sweep_cmd(cfg_path, out, "--workers", "2", "--backend", "local")
        _kill_after_rows(cmd, out, after_rows, extra_s)
        assert len(read_rows(out)) < N_RUNS, "the sweep should have been killed midway"
        _assert_resumes_to(cfg, out, full, "local")


def test_sigkill_of_a_vector_sweep_keeps_finished_batches_and_resumes_exactly(tmp_path):
    """The vector backend writes a batch's rows when it ends: a kill loses only the batches in
    flight, no worker outlives the parent, and the resumed rows equal the uninterrupted run bit
    for bit (a run's numbers do not depend on the batch it flew in)."""
    cfg = SweepConfig(**MATRIX)
    full = run_sweep(cfg, tmp_path / "full", backend="vector", workers=2, progress=False)
    cfg_path = configs.dump(cfg, tmp_path / "cfg.yaml")
    out = tmp_path / "killed"
    cmd = _sweep_cmd(cfg_path, out, "--workers", "2", "--backend", "vector", "--batch-size", "2")
    _kill_after_rows(cmd, out, 2)
    partial = read_rows(out)
    assert 2 <= len(partial) < N_RUNS and len(partial) % 2 == 0  # whole batches only
    _assert_resumes_to(cfg, out, full, "vector")


@pytest.mark.slow
def test_sigkill_of_a_ray_sweep_leaves_no_ray_process_and_resumes(tmp_path):
    pytest.importorskip("ray")
    # the whole matrix (16 runs): the kill lands with most still to fly (with 4 runs of 0.2 s
    # on 2 Ray workers a loaded machine had written all 4 before the kill)
    cfg = SweepConfig(**MATRIX)
    full = run_sweep(cfg, tmp_path / "full", backend="local", workers=1, progress=False)
    cfg_path = configs.dump(cfg, tmp_path / "cfg.yaml")
    out = tmp_path / "killed"
    cmd = _sweep_cmd(cfg_path, out, "--backend", "ray", "--workers", "2")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= _descendants(proc.pid)
            if (out / "rows.jsonl").exists() and read_rows(out):
                break
            time.sleep(0.1)
        seen |= _descendants(proc.pid)
        assert proc.poll() is None and read_rows(out), "no row before the kill point"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        left = _wait_gone(seen, 10.0)
        names = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left}
        assert not left, f"Ray processes alive 10 s after the driver's SIGKILL: {names}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        _kill_all(seen)
    assert len(read_rows(out)) < N_RUNS
    resumed = run_sweep(cfg, out, resume=True, backend="local", workers=1, progress=False)
    assert _strip(resumed) == _strip(full)
    assert len((out / "rows.jsonl").read_text().splitlines()) == N_RUNS


# ------------------------------------------------------------------ two sweeps, one folder
def test_a_second_sweep_on_a_busy_folder_refuses_and_the_first_is_intact(tmp_path, capsys):
    cfg = SweepConfig(**MATRIX)
    cfg_path = configs.dump(cfg, tmp_path / "cfg.yaml")
    out = tmp_path / "out"
    first = subprocess.Popen(
        _sweep_cmd(cfg_path, out, "--workers", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seen: set[int] = set()
    try:
        lock = out / ".lock"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.poll() is None:
            if lock.exists() and lock.read_text().strip() == str(first.pid):
                break
            time.sleep(0.05)
        assert first.poll() is None, "the first sweep ended before the second started"
        for extra in ([], ["--resume"]):
            t0 = time.monotonic()
            capsys.readouterr()
            argv = ["sweep", str(cfg_path), "--out", str(out), "--no-report", *extra]
            assert main(argv) == 2
            err = capsys.readouterr().err.strip()
            assert f"{out} is in use by another sweep (pid {first.pid})" in err
            assert len(err.splitlines()) == 1 and time.monotonic() - t0 < 5.0
        argv = ["stress", "--scenarios", "yaw90_fig8fast_extra", "--controllers", "geo"]
        argv += ["--seeds", "0", "--out", str(out), "--no-plot", "--quiet"]
        assert main(argv) == 2
        assert f"pid {first.pid}" in capsys.readouterr().err
        seen |= _descendants(first.pid)
        stdout, _ = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait(timeout=10)
        _kill_all(seen)
    assert first.returncode == 0 and stdout.startswith(f"{N_RUNS} rows in")
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert len(lines) == len({r["run_id"] for r in read_rows(out)}) == N_RUNS
