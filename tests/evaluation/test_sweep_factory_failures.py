"""A user controller whose factory raises when it is built is a controller failing, not a bad
config: each of its runs becomes a failure row (``failed_step: null``) and the sweep flies the
other controllers, on every backend, in the stress study too, and the CLI exits 3 with the
summary instead of a traceback. A factory refusing its options (a ``ValueError``) is still
refused at load, one line, exit 2."""

from __future__ import annotations

import sys
import textwrap

import pytest
import yaml

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.evaluation.studies.stress import StressConfig, run_stress
from residual_quad.evaluation.sweep import (
    FAILED_RUNS_EXIT,
    SweepConfig,
    failed_rows,
    flown_rows,
    read_rows,
    run_sweep,
)

BROKEN = '''
"""Factories that raise when called: ``NoDevice`` always (a missing device), ``Picky`` on a
gain it refuses (a bad option)."""


class NoDevice:
    action_mode = "rotor"

    def __init__(self, context, port="/dev/quad0"):
        raise RuntimeError(f"no quadrotor on {port}")

    def reset(self, seed=None):
        pass

    def policy(self, obs):
        return None


def Picky(context, gain=1.0):
    raise ValueError(f"Picky: gain must be <= 1, got {gain}")
'''
#: two seeds of one short hover: four runs with ``geo``
MATRIX = {
    "payloads": ["none"],
    "winds": ["calm"],
    "trajectories": ["hover"],
    "seeds": [0, 1],
    "episode_s": 0.5,
    "series": [],
}


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """``broken_ctrl`` importable here and in spawned and Ray workers (``PYTHONPATH``)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "broken_ctrl.py").write_text(textwrap.dedent(BROKEN))
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("PYTHONPATH", str(lib))
    yield lib
    sys.modules.pop("broken_ctrl", None)


def _cfg(controllers, **kw) -> SweepConfig:
    return configs.load(SweepConfig, {**MATRIX, "controllers": controllers, **kw})


def _assert_no_device_rows(rows, label="NoDevice", port="/dev/quad0"):
    assert len(rows) == 4
    bad = failed_rows(rows)
    assert sorted(r["run_id"] for r in bad) == [
        f"{label}|none|calm|hover|0",
        f"{label}|none|calm|hover|1",
    ]
    for r in bad:
        assert r["error"] == f"RuntimeError: no quadrotor on {port}"
        assert r["error_type"] == "RuntimeError" and "broken_ctrl.py" in r["error_at"]
        assert r["failed_step"] is None and r["failed_t"] is None  # never built
    good = flown_rows(rows)
    assert [r["controller"] for r in good] == ["geo", "geo"] and good[0]["steps"] == 50


@pytest.mark.parametrize(
    "backend, workers",
    [("vector", 1), ("local", 1), ("local", 2), ("ray", 2)],
    ids=["vector", "local-in-process", "local-pool", "ray"],
)
def test_a_raising_factory_fails_its_runs_on_every_backend(broken, tmp_path, backend, workers):
    cfg = _cfg(["geo", "broken_ctrl:NoDevice"])  # the load check builds it once: no raise
    if backend != "ray":
        rows = run_sweep(cfg, tmp_path, backend=backend, workers=workers, progress=False)
    else:
        ray = pytest.importorskip("ray")
        try:
            rows = run_sweep(cfg, tmp_path, backend="ray", workers=workers, progress=False)
        finally:
            ray.shutdown()
    _assert_no_device_rows(rows)
    assert len(read_rows(tmp_path)) == 4


def test_options_of_a_raising_factory_fail_its_runs_too(broken, tmp_path):
    cfg = _cfg(
        ["geo", {"spec": "broken_ctrl:NoDevice", "label": "dev"}],
        controller_options={"dev": {"port": "/dev/quad7"}},
    )
    rows = run_sweep(cfg, tmp_path, backend="vector", workers=1, progress=False)
    _assert_no_device_rows(rows, "dev", "/dev/quad7")


def test_the_cli_exits_3_with_the_summary_not_a_traceback(broken, tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**MATRIX, "controllers": ["geo", "broken_ctrl:NoDevice"]}))
    argv = ["sweep", str(path), "--out", str(tmp_path / "out"), "--no-report", "--workers", "1"]
    capsys.readouterr()
    assert main(argv) == FAILED_RUNS_EXIT
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "2 of 4 runs failed" in err
    assert "NoDevice|none|calm|hover|0: RuntimeError: no quadrotor on /dev/quad0" in err


def test_a_raising_factory_in_a_stress_study_fails_its_runs(broken, tmp_path):
    cfg = configs.load(
        StressConfig,
        {
            "controllers": ["geo", "broken_ctrl:NoDevice"],
            "seeds": [0, 1],
            "episode_s": 0.5,
            "scenarios": [{"name": "calm", "group": "gust"}],
        },
    )
    rows, _ = run_stress(cfg, tmp_path, workers=1)
    bad = failed_rows(rows)
    assert [r["run_id"] for r in bad] == ["NoDevice|calm|0", "NoDevice|calm|1"]
    assert all(r["failed_step"] is None and "no quadrotor" in r["error"] for r in bad)
    assert len(flown_rows(rows)) == 2


def test_a_factory_refusing_its_options_is_refused_at_load(broken, tmp_path, capsys):
    with pytest.raises(ValueError, match="gain must be <= 1, got 2"):
        _cfg([{"spec": "broken_ctrl:Picky", "options": {"gain": 2}}])
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**MATRIX, "controllers": ["geo", "broken_ctrl:Picky:gain=2"]}))
    capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("rquad sweep: error: ") and "gain must be <= 1" in line
    assert not (tmp_path / "out").exists()
