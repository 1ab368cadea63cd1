"""``rquad bench --sections remote``: the simulation server measured beside the in-process env.

Lock-step: the remote round trip of one ``step`` (client → ``rquad serve`` in its own process →
client, over loopback) against the in-process ``env.step`` on the same flights (``geo_rls``,
extra payload, windy, helix), timed per call, alternating local and remote episodes so that a
busy machine slows both alike; median and p99, and the median beyond the in-process step as a
share of the control period. Real time: ``geo_rls`` flying a ``--realtime`` server at 100 Hz
(the achieved command rate and the share of late periods) and at 50 Hz (its RMSE beside the
in-process 50 Hz RMSE). ``quick`` shortens every flight.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from residual_quad.envs.registration import ENV_ID, REMOTE_ENV_ID
from residual_quad.episode import EpisodeResult, build_controller, run_episode
from residual_quad.evaluation.bench.timing import BenchRow

SCENARIO = {"payload": "extra", "wind": "windy", "trajectory": "helix"}
START_TIMEOUT_S = 60.0  # s for a server process to print its address


@contextmanager
def server_process(*argv: str) -> Iterator[str]:
    """``rquad serve --port 0 argv`` in a child process on loopback; yields ``host:port`` and
    stops it (SIGTERM, then SIGKILL) on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "residual_quad.cli", "serve", "--port", "0", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        match = re.search(r" on (\S+:\d+) ", line)
        if not match:
            raise RuntimeError(f"rquad serve did not start: {line!r}")
        yield match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def _timed_episode(env: Any, seed: int, control_hz: float) -> list[float]:
    """Per-step wall times (s) of one ``geo_rls`` episode on ``env``."""
    controller = build_controller("geo_rls", {"control_hz": control_hz})
    obs, _ = env.reset(seed=seed)
    controller.reset(seed)
    times = []
    while True:
        action = controller.policy(obs)
        t0 = time.perf_counter()
        obs, _, terminated, truncated, _ = env.step(action)
        times.append(time.perf_counter() - t0)
        if terminated or truncated:
            return times


def lockstep_round_trip(episodes: int, episode_s: float) -> dict[str, float]:
    """Median and p99 of the in-process step and of the remote lock-step round trip, µs."""
    local_env = gym.make(ENV_ID, episode_s=episode_s, **SCENARIO).unwrapped
    local: list[float] = []
    remote: list[float] = []
    with server_process() as address:
        remote_env = gym.make(
            REMOTE_ENV_ID, address=address, episode_s=episode_s, **SCENARIO
        ).unwrapped
        try:
            for seed in tqdm(range(episodes), desc="lock-step round trip", leave=False):
                local += _timed_episode(local_env, seed, 100.0)
                remote += _timed_episode(remote_env, seed, 100.0)
        finally:
            remote_env.close()
            local_env.close()
    us = 1e6
    return {
        "local_median": float(np.median(local)) * us,
        "local_p99": float(np.percentile(local, 99)) * us,
        "remote_median": float(np.median(remote)) * us,
        "remote_p99": float(np.percentile(remote, 99)) * us,
        "steps": float(len(remote)),
    }


def realtime_flight(
    seconds: float, control_hz: float = 100.0, seed: int = 0
) -> tuple[EpisodeResult, dict[str, int], float]:
    """``geo_rls`` flying a ``--realtime`` server: the episode, the server's period counters and
    the client's wall time (s)."""
    argv = ["--realtime", "--control-hz", f"{control_hz:g}", "--episode-s", f"{seconds:g}"]
    clock: dict[str, int] = {}

    def keep_clock(step: int, obs: Any, action: Any, info: dict[str, Any]) -> None:
        clock.update(info["clock"])

    with server_process(*argv) as address:
        result = run_episode(
            build_controller("geo_rls", {"control_hz": control_hz}),
            seed=seed,
            env_id=REMOTE_ENV_ID,
            address=address,
            episode_s=seconds,
            control_hz=control_hz,
            callback=keep_clock,
            **SCENARIO,
        )
    return result, clock, result.wall_time


def run(quick: bool = False) -> list[BenchRow]:
    """The rows of the ``remote`` section."""
    rows: list[BenchRow] = []
    rt = lockstep_round_trip(episodes=1 if quick else 3, episode_s=5.0 if quick else 20.0)
    period_us = 1e4
    local, remote = rt["local_median"], rt["remote_median"]
    rows.append(BenchRow("remote", "in-process env.step (geo_rls, helix)", local))
    rows.append(
        BenchRow(
            "remote", "lock-step round trip, loopback (median)", remote, remote / local, "step"
        )
    )
    rows.append(BenchRow("remote", "lock-step round trip, loopback (p99)", rt["remote_p99"]))
    rows.append(
        BenchRow(
            "remote",
            f"beyond the step: {100 * (remote - local) / period_us:.2f} % of the 10 ms period",
            remote - local,
            target="<= 100 us",
        )
    )
    seconds = 5.0 if quick else 60.0
    result, clock, wall = realtime_flight(seconds)
    rate = result.steps / wall
    late = clock["late"] / max(clock["periods"], 1)
    rows.append(
        BenchRow(
            "remote",
            f"realtime {seconds:g} s: {rate:.1f} Hz achieved, {100 * late:.2f} % late",
            1e6 / rate,
            target="100 Hz, <= 1 % late",
        )
    )
    return rows
