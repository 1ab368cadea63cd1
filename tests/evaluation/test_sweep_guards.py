"""The sweep engine's guards, in process: strict configs, the folder lock, duplicate-free readers,
the tail repair on resume and clear errors for an unwritable or full output folder."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.evaluation.report.tables import make_tables
from residual_quad.evaluation.studies.stress import StressConfig, run_stress
from residual_quad.evaluation.sweep import SweepConfig, read_rows, run_sweep
from residual_quad.evaluation.sweep.rows import FolderLock, RowWriter

TINY = dict(  # 4 runs of 3.5 s: about a second in process
    controllers=["pid", "geo"],
    payloads=["none", "heavy"],
    winds=["calm"],
    trajectories=["helix"],
    seeds=[0],
    episode_s=3.5,
    series=[],
)


def _load(source, **overrides):
    return configs.load(SweepConfig, source, **overrides)


def _strip(rows):
    """Rows without the wall-clock time, keyed by run id."""
    return {r["run_id"]: {k: v for k, v in r.items() if k != "wall_time"} for r in rows}


def _cli_error(capsys, argv) -> str:
    """Run the CLI in process; it must exit 2 with one error line on stderr and no traceback
    (a progress bar may precede it)."""
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors (checked at parse time) exit 2 too
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "run/s]" not in line]
    assert len(lines) == 1 and lines[0].startswith("rquad ") and "Traceback" not in err, err
    return lines[0]


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return str(path)


def _tiny_yaml(tmp_path: Path, text: str) -> str:
    """A one-second matrix with ``text`` (YAML) on top: a missed check fails fast."""
    data = {**TINY, "payloads": ["none"], "episode_s": 1.0, **yaml.safe_load(text)}
    return _yaml(tmp_path, yaml.safe_dump(data))


# ------------------------------------------------------------------ configs: duplicates and keys
@pytest.mark.parametrize(
    "extra, named",
    [
        ("seeds: [0, 0]", "seeds: 0 is listed twice"),
        ("controllers: [geo, geo]", "controllers: 'geo' is listed twice"),
        ("winds: [[1.0, 0.5], [1.0, 0.5]]", "winds: [1.0, 0.5] is listed twice"),
    ],
)
def test_duplicate_matrix_entries_are_errors_at_load(tmp_path, capsys, extra, named):
    path = _tiny_yaml(tmp_path, extra)
    with pytest.raises(ValueError, match=re.escape(named)):
        _load(path)
    err = _cli_error(capsys, ["sweep", path, "--out", str(tmp_path / "o"), "--no-report"])
    assert "listed twice" in err
    assert not (tmp_path / "o" / "rows.jsonl").exists()


def test_duplicate_cli_overrides_are_errors(tmp_path, capsys):
    cfg, out = _tiny_yaml(tmp_path, "{}"), str(tmp_path / "o")
    sweep = ["sweep", cfg, "--out", out, "--no-report", "--workers", "1"]
    assert "duplicate seed(s) [0]" in _cli_error(capsys, [*sweep, "--seeds", "0,0"])
    assert "'geo' is listed twice" in _cli_error(capsys, [*sweep, "--controllers", "geo,geo"])
    stress = ["stress", "--scenarios", "yaw90_fig8fast_extra", "--seeds", "0", "--episode-s", "1"]
    stress += ["--out", out, "--quiet", "--no-plot", "--workers", "1"]
    assert "'geo' is listed twice" in _cli_error(capsys, [*stress, "--controllers", "geo,geo"])
    assert "duplicate seed(s) [1]" in _cli_error(capsys, [*stress[:4], "1,1", *stress[5:]])


def test_stress_config_duplicates_are_errors():
    with pytest.raises(ValueError, match="seeds: 1 is listed twice"):
        StressConfig(seeds=[1, 1])
    scenario = {"name": "x", "group": "yaw"}
    with pytest.raises(ValueError, match="scenario names: 'x' is listed twice"):
        configs.load(StressConfig, {"scenarios": [scenario, scenario]})


@pytest.mark.parametrize(
    "text, named",
    [
        ("env: {control_hz: 0}", "control_hz"),
        ("env: {foo: 1}", "foo"),
        ("env: {turbulence: stormy}", "light, moderate, severe"),
        ("env: {imu_bias: {gyro_walks: 1}}", "gyro_walks"),
        ("env: {imu_bias: {accel_walk: .nan}}", "accel_walk"),
        ("env: {payload: heavy}", "set per run"),
        ("env: 5", "env"),
        ("controller_options: {geo: {bogus: 1}}", "bogus"),
        ("controller_options: {lqr: {}}", "lqr"),
        ("controller_options: {geo_rls: {weights: /no/such/file.npz}}", "/no/such/file.npz"),
        ("series: [{bogus: 1}]", "bogus"),
        ("series: [3]", "series[0]"),
        ("winds: [hurricane]", "hurricane"),
        ("winds: [[1.0, .nan]]", "nan"),
        ("trajectories: [loop]", "loop"),
        ("seeds: [-1]", "-1"),
        ("seeds: []", "seeds"),
        ("episode_s: .inf", "episode_s"),
    ],
)
def test_sweep_config_rejects_at_load_what_would_fail_mid_sweep(tmp_path, capsys, text, named):
    path = _tiny_yaml(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(named)):
        _load(path)
    err = _cli_error(capsys, ["sweep", path, "--out", str(tmp_path / "o"), "--no-report"])
    assert named in err
    assert not (tmp_path / "o" / "rows.jsonl").exists()


@pytest.mark.parametrize("text", ["", "\n# only a comment\n", "[1, 2]", "5", "geo"])
def test_empty_or_non_mapping_sweep_yaml_is_an_error(tmp_path, capsys, text):
    path = _yaml(tmp_path, text)
    err = _cli_error(capsys, ["sweep", path, "--out", str(tmp_path / "o"), "--no-report"])
    assert path in err and ("empty" in err or "mapping" in err)


def test_env_takes_turbulence_and_imu_bias(tmp_path):
    """The realism options are plain ``env`` settings: a level name and a dict of fields."""
    text = "env: {turbulence: moderate, imu_bias: {gyro_initial: 0.01, accel_walk: 0.01}}"
    cfg = _load(_tiny_yaml(tmp_path, text))
    assert cfg.env == {
        "turbulence": "moderate",
        "imu_bias": {"gyro_initial": 0.01, "accel_walk": 0.01},
    }


def test_valid_configs_still_load():
    for name in ("sweep", "sweep_quick"):
        assert _load(name).controllers
    assert _load(None) == SweepConfig()


# ------------------------------------------------------------------ readers never double-count
def test_read_rows_keeps_the_first_row_of_each_run_id(tmp_path, capsys):
    def row(cid, rmse, diverged=False):
        return {
            "run_id": f"{cid}|none|calm|helix|0",
            "controller": cid,
            "payload": "none",
            "payload_kg": 0.0,
            "wind": "calm",
            "trajectory": "helix",
            "seed": 0,
            "rmse": rmse,
            "max_error": rmse,
            "diverged": diverged,
            "termination": "tilt" if diverged else None,
            "control_cost": 1.0,
            "residual_bias": None,
            "residual_bias_z": None,
        }

    rows = [row("geo", 0.1), row("pid", 0.2, True), row("geo", 0.9), row("pid", 0.3), row("geo", 1)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    got = read_rows(tmp_path)
    assert got == rows[:2]
    err = capsys.readouterr().err
    assert err.count("duplicate") == 1 and "3 duplicate row(s)" in err
    tables = make_tables(got)
    div = {r[0]: r for r in tables["divergence"].rows}
    assert div["pid"][1:3] == [1, 1] and div["geo"][1:3] == [1, 0]  # runs, diverged


# ------------------------------------------------------------------ the folder lock
def test_a_locked_folder_refuses_a_second_sweep_at_once(tmp_path):
    cfg = SweepConfig(**TINY)
    held = re.escape(f"{tmp_path} is in use by another sweep (pid {os.getpid()})")
    with FolderLock(tmp_path):  # another sweep holds the folder
        for resume in (False, True):
            with pytest.raises(ValueError, match=held):
                run_sweep(cfg, tmp_path, resume=resume, workers=1, progress=False)
        stress = configs.load(StressConfig, "stress")
        stress.controllers, stress.seeds, stress.scenarios = ["geo"], [0], stress.scenarios[:1]
        with pytest.raises(ValueError, match=str(tmp_path)):
            run_stress(stress, tmp_path)
        assert not (tmp_path / "rows.jsonl").exists()
        assert not (tmp_path / "sweep_config.yaml").exists()
    rows = run_sweep(cfg, tmp_path, workers=1, progress=False)  # released: the folder is free
    assert len(rows) == 4
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())


def test_the_lock_is_released_when_the_sweep_fails(tmp_path):
    cfg = SweepConfig(**TINY)

    def boom(row):
        raise RuntimeError("a failing callback")

    with pytest.raises(RuntimeError, match="failing callback"):
        run_sweep(cfg, tmp_path, workers=1, progress=False, on_row=boom)
    assert len(read_rows(tmp_path)) == 1  # the row before the failure is kept
    rows = run_sweep(cfg, tmp_path, resume=True, workers=1, progress=False)
    assert len(rows) == 4 and len(read_rows(tmp_path)) == 4


# ------------------------------------------------------------------ the tail repair on resume
def test_a_complete_last_row_without_newline_is_kept_on_resume(tmp_path, capsys):
    cfg_path = configs.dump(SweepConfig(**TINY), tmp_path / "cfg.yaml")
    out = tmp_path / "out"
    argv = ["sweep", str(cfg_path), "--out", str(out), "--workers", "1", "--no-report"]
    assert main(argv) == 0
    path = out / "rows.jsonl"
    before = path.read_text()
    path.write_text(before.rstrip("\n"))  # a writer killed between the row and its newline
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("4 rows in")
    assert path.read_text() == before  # nothing lost, nothing flown again, newline restored
    assert len(read_rows(path)) == 4


def test_only_a_truly_partial_last_line_is_cut(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = json.dumps({"run_id": "a", "rmse": 0.1}) + "\n"
    for tail, kept in [('{"run_id": "b", "rm', good), ("[1, 2]", good), ("   ", good)]:
        path.write_text(good + tail)
        RowWriter(path).close()
        assert path.read_text() == kept
    path.write_text(good + json.dumps({"run_id": "b"}))
    RowWriter(path).close()
    assert [r["run_id"] for r in read_rows(path)] == ["a", "b"]
    assert path.read_text().endswith("\n")


# ------------------------------------------------------------------ unwritable / full output
def test_disk_full_keeps_every_finished_row_and_names_the_file(tmp_path, monkeypatch):
    cfg = SweepConfig(**TINY)
    full = run_sweep(cfg, tmp_path / "full", workers=1, progress=False)
    real_write = RowWriter.write
    calls = []

    def write(self, row):
        calls.append(row["run_id"])
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, row)

    monkeypatch.setattr(RowWriter, "write", write)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"rows\.jsonl: No space left on device.*2 rows") as exc:
        run_sweep(cfg, out, workers=1, progress=False)
    assert str(out / "rows.jsonl") in str(exc.value)
    assert len(read_rows(out)) == 2
    monkeypatch.setattr(RowWriter, "write", real_write)
    resumed = run_sweep(cfg, out, resume=True, workers=1, progress=False)
    assert _strip(resumed) == _strip(full)
    assert len((out / "rows.jsonl").read_text().splitlines()) == 4


def test_disk_full_at_the_cli_is_one_line(tmp_path, monkeypatch, capsys):
    cfg_path = configs.dump(SweepConfig(**TINY), tmp_path / "cfg.yaml")

    def write(self, row):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RowWriter, "write", write)
    out = tmp_path / "out"
    argv = ["sweep", str(cfg_path), "--out", str(out), "--workers", "1", "--no-report"]
    err = _cli_error(capsys, argv)
    assert str(out / "rows.jsonl") in err and "No space left" in err


def test_a_failed_append_is_cut_back_to_the_last_row(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    writer = RowWriter(path)
    writer.write({"run_id": "a"})
    real_fsync = os.fsync

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError):
        writer.write({"run_id": "b"})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_text() == '{"run_id": "a"}\n'
    writer.write({"run_id": "c"})
    writer.close()
    assert [r["run_id"] for r in read_rows(path)] == ["a", "c"]


def test_an_unwritable_output_folder_is_a_clear_error(tmp_path, capsys):
    cfg_path = configs.dump(SweepConfig(**TINY), tmp_path / "cfg.yaml")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "sub"):  # a file where the folder should be (root-proof)
        argv = ["sweep", str(cfg_path), "--out", str(out), "--workers", "1", "--no-report"]
        assert str(out) in _cli_error(capsys, argv)
    ro = tmp_path / "read_only"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("permissions are not enforced for this user (root)")
        argv = ["sweep", str(cfg_path), "--out", str(ro), "--workers", "1", "--no-report"]
        assert str(ro) in _cli_error(capsys, argv)
    finally:
        ro.chmod(0o755)


def test_a_lock_file_that_cannot_be_created_is_a_clear_error(tmp_path, monkeypatch):
    real_open = os.open

    def deny(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(ValueError, match=f"cannot write to the output folder {tmp_path}"):
        run_sweep(SweepConfig(**TINY), tmp_path, workers=1, progress=False)
