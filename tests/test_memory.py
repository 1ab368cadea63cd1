"""The fixed mmap threshold (residual_quad.memory): a freed large array goes back to the system
instead of staying resident behind a small block, as it does under glibc's dynamic threshold."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from unittest import mock

import pytest

from residual_quad import memory

# A 16 MiB array freed (glibc raises its dynamic threshold to 16 MiB), then a 10 MiB array with
# a small block after it, freed: the MiB still resident afterwards. Run in a fresh process, as
# the allocator's history is part of the experiment.
_PROBE = """
import sys
import numpy as np
from residual_quad.memory import fix_mmap_threshold
fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
big = np.ones(2_000_000); del big
before = rss_mib()
a = np.ones(1_250_000)
small = np.ones(16)
del a
print(fixed, rss_mib() - before)
"""


def _held_mib(mode: str) -> tuple[str, float]:
    # the allocator's own defaults: a user's MALLOC_* or GLIBC_TUNABLES would set the threshold
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    fixed, held = out.stdout.split()
    return fixed, float(held)


def _glibc() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not _glibc(), reason="the dynamic mmap threshold is glibc's")
def test_fixed_threshold_returns_a_freed_array_that_the_dynamic_one_keeps():
    fixed, held_fixed = _held_mib("fixed")
    _, held_dynamic = _held_mib("dynamic")
    assert fixed == "True"
    assert held_dynamic > 8.0  # the 10 MiB hole stays resident: the failure this guards against
    assert held_fixed < 1.0


def test_bad_thresholds_are_named_errors():
    for bad in (0, -5, 1.5, True, "128k"):
        with pytest.raises(ValueError, match="threshold must be a positive number of bytes"):
            memory.fix_mmap_threshold(bad)


def test_without_glibc_nothing_is_set():
    with mock.patch.object(memory.sys, "platform", "darwin"):
        assert memory.fix_mmap_threshold() is False


def test_training_fixes_the_threshold_before_building_its_envs(tmp_path):
    pytest.importorskip("stable_baselines3")
    from residual_quad.training import ppo

    calls: list[str] = []
    with (
        mock.patch.object(ppo, "fix_mmap_threshold", lambda: calls.append("fix")),
        mock.patch.object(ppo, "make_training_env", side_effect=RuntimeError("stop")),
    ):
        with pytest.raises(RuntimeError, match="stop"):
            ppo.train(ppo.PPOTrainConfig(), tmp_path / "run", progress=False)
    assert calls == ["fix"]
