"""``--resume`` continues a folder only with the config its rows were flown with: a changed
setting that moves a row's numbers (the plant preset, the episode length, a label's options, a
stress scenario) is one error line naming the first differing key and both values, nothing flown
or rewritten; what changes no row (workers, backend, batch size, kept series, more matrix
entries) still resumes. The pipeline's ``--resume`` and ``--retry-failed`` go through the same
check, and ``rquad ablate`` names a differing key the same way (``configs.first_difference``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.evaluation.studies.pipeline import QUICK, run_pipeline
from residual_quad.evaluation.studies.stress import StressConfig, run_stress
from residual_quad.evaluation.sweep import (
    CONFIG_FILE,
    ROWS_FILE,
    SweepConfig,
    read_rows,
    run_sweep,
)

#: two runs of 0.5 s: a resume check needs rows, not flight time
TINY = {
    "controllers": ["geo"],
    "payloads": ["none"],
    "winds": ["calm"],
    "trajectories": ["hover"],
    "seeds": [0, 1],
    "episode_s": 0.5,
    "series": [],
}


def run_main(argv: list[str], capsys) -> SimpleNamespace:
    """``rquad argv`` in this process: exit code, stdout and stderr."""
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    return SimpleNamespace(rc=rc, out=captured.out, err=captured.err)


def _yaml(tmp_path: Path, name: str = "cfg.yaml", **changes) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**TINY, **changes}))
    return str(path)


def _snapshot(out: Path) -> tuple[bytes, bytes]:
    return (out / ROWS_FILE).read_bytes(), (out / CONFIG_FILE).read_bytes()


def _flown(tmp_path: Path, capsys, **changes) -> tuple[Path, list[str]]:
    """A folder of the tiny sweep (with ``changes``) flown by the CLI, and its argv."""
    out = tmp_path / "out"
    argv = ["sweep", _yaml(tmp_path, **changes), "--out", str(out), "--no-report"]
    argv += ["--workers", "1", "--backend", "local"]
    assert run_main(argv, capsys).rc == 0
    return out, argv


def test_first_difference_names_nested_keys_and_missing_values():
    a = {"env": {}, "episode_s": 8.0, "workers": 0}
    b = {"env": {"preset": "realistic"}, "episode_s": 8, "workers": 4}
    assert configs.first_difference(a, b) == ("env.preset", configs.UNSET, "realistic")
    assert repr(configs.UNSET) == "(not set)"
    assert configs.first_difference(a, {**a, "workers": 4}, ignore=["workers"]) is None
    assert configs.first_difference(a, {**a, "episode_s": 3.0}) == ("episode_s", 8.0, 3.0)
    assert configs.first_difference({**a, "old": 1}, a) == ("old", 1, configs.UNSET)
    assert configs.first_difference({"x": [1, 2]}, {"x": [1, 2, 3]}) == ("x", [1, 2], [1, 2, 3])


def test_resume_with_another_preset_is_refused_and_the_folder_untouched(tmp_path, capsys):
    out, argv = _flown(tmp_path, capsys)
    before = _snapshot(out)
    got = run_main([*argv, "--resume", "--preset", "realistic"], capsys)
    assert got.rc == 2 and got.out == ""
    (line,) = got.err.splitlines()
    assert line.startswith("rquad sweep: error: ")
    assert "env.preset: (not set) in its sweep_config.yaml, 'realistic' now" in line
    assert "another --out" in line
    assert _snapshot(out) == before  # nothing flown, the saved config still the rows' own


def test_resume_with_another_episode_length_is_refused(tmp_path, capsys):
    out, argv = _flown(tmp_path, capsys)
    before = _snapshot(out)
    # a shorter episode and one more seed: before, the new run flew and joined the old rows
    changed = _yaml(tmp_path, "short.yaml", episode_s=0.3, seeds=[0, 1, 2])
    got = run_main(["sweep", changed, *argv[2:], "--resume"], capsys)
    assert got.rc == 2
    assert "episode_s: 0.5 in its sweep_config.yaml, 0.3 now" in got.err
    assert len(got.err.splitlines()) == 1
    assert _snapshot(out) == before
    with pytest.raises(ValueError, match="episode_s: 0.5 in its sweep_config.yaml, 0.3 now"):
        run_sweep(SweepConfig(**{**TINY, "episode_s": 0.3}), out, resume=True, progress=False)


def test_retry_failed_with_another_config_keeps_the_failure_rows(tmp_path, capsys):
    out, argv = _flown(tmp_path, capsys)
    rows = read_rows(out)
    failed = {**rows[1], "failed": True, "error": "RuntimeError: boom"}
    (out / ROWS_FILE).write_text(json.dumps(rows[0]) + "\n" + json.dumps(failed) + "\n")
    before = _snapshot(out)
    got = run_main([*argv, "--retry-failed", "--preset", "realistic"], capsys)
    assert got.rc == 2 and "env.preset" in got.err
    assert _snapshot(out) == before  # the failure row was not dropped


def test_resume_with_the_same_config_flies_nothing(tmp_path, capsys):
    out, argv = _flown(tmp_path, capsys)
    before = _snapshot(out)
    got = run_main([*argv, "--resume"], capsys)
    assert got.rc == 0 and got.out.startswith("2 rows")
    assert _snapshot(out) == before


def test_what_changes_no_row_still_resumes(tmp_path, capsys):
    out, argv = _flown(tmp_path, capsys)
    old = {r["run_id"]: r for r in read_rows(out)}
    # another backend, worker count and batch size, kept series, one more seed and controller
    more = _yaml(
        tmp_path,
        "more.yaml",
        seeds=[0, 1, 2],
        controllers=["geo", "pid"],
        series=[{"seed": 2}],
        workers=2,
    )
    argv = ["sweep", more, "--out", str(out), "--no-report", "--resume"]
    got = run_main([*argv, "--backend", "vector", "--workers", "1", "--batch-size", "2"], capsys)
    assert got.rc == 0, got.err
    rows = {r["run_id"]: r for r in read_rows(out)}
    assert len(rows) == 6
    assert all(rows[run_id] == row for run_id, row in old.items())  # the old rows as they were
    saved = configs.read_yaml(out / CONFIG_FILE)
    assert saved["seeds"] == [0, 1, 2] and saved["controllers"] == ["geo", "pid"]


def test_a_label_that_names_another_controller_is_refused(tmp_path):
    def cfg(controllers, **kw):
        return configs.load(SweepConfig, {**TINY, "controllers": controllers, **kw})

    mine = {"spec": "geo", "options": {"kp": 12.0}, "label": "mine"}
    run_sweep(cfg(["pid", mine]), tmp_path, backend="local", workers=1, progress=False)
    other = {**mine, "options": {"kp": 13.0}}
    with pytest.raises(ValueError, match=r"controllers\.mine\.options\.kp: 12\.0 in its .*, 13\.0"):
        run_sweep(cfg(["pid", other]), tmp_path, resume=True)
    opts = {"pid": {"ki": 0.0}}
    with pytest.raises(ValueError, match=r"controller_options\.pid: \(not set\) in its"):
        run_sweep(cfg(["pid", mine], controller_options=opts), tmp_path, resume=True)
    # a label dropped with its options changes no row of the others; a new one flies
    new = {"spec": "geo", "options": {"kp": 13.0}, "label": "yours"}
    rows = run_sweep(
        cfg(["pid", new], controller_options={"yours": {"kd": 5.0}}),
        tmp_path,
        resume=True,
        backend="local",
        workers=1,
        progress=False,
    )
    assert len(rows) == 6


def test_a_stress_scenario_changed_under_its_name_is_refused(tmp_path):
    scenario = {"name": "yawed", "group": "yaw", "yaw_offset_deg": 90.0}
    base = {"controllers": ["geo"], "seeds": [0], "episode_s": 0.5, "scenarios": [scenario]}
    run_stress(configs.load(StressConfig, base), tmp_path, workers=1, backend="local")
    turned = {**scenario, "yaw_offset_deg": 45.0}
    with pytest.raises(ValueError, match=r"scenarios\.yawed\.yaw_offset_deg: 90\.0 in its "):
        run_stress(
            configs.load(StressConfig, {**base, "scenarios": [turned]}), tmp_path, resume=True
        )
    with pytest.raises(ValueError, match="episode_s: 0.5 in its stress_config.yaml, 0.4 now"):
        run_stress(configs.load(StressConfig, {**base, "episode_s": 0.4}), tmp_path, resume=True)
    more = {**base, "seeds": [0, 1], "scenarios": [scenario, {"name": "calm", "group": "gust"}]}
    rows, _ = run_stress(configs.load(StressConfig, more), tmp_path, resume=True, workers=1)
    assert len(rows) == 4


def test_the_pipeline_resumes_only_its_own_config(tmp_path, capsys, monkeypatch):
    import residual_quad.training.collect as collect_module

    def no_stage(*args, **kwargs):
        raise AssertionError("a pipeline stage ran")

    monkeypatch.setattr(collect_module, "collect", no_stage)
    out = tmp_path / "p"
    out.mkdir()
    configs.dump(QUICK, out / "pipeline_config.yaml")
    other = dataclasses.replace(QUICK, train_overrides={"epochs": 3})
    with pytest.raises(ValueError, match=r"train_overrides\.epochs: 15 in its pipeline_config"):
        run_pipeline(other, out, resume=True)
    assert sorted(p.name for p in out.iterdir()) == ["pipeline_config.yaml"]  # nothing ran
    got = run_main(["pipeline", "--out", str(out), "--resume"], capsys)  # the full profile
    assert (
        got.rc == 2 and "sweep: 'sweep_quick' in its pipeline_config.yaml, 'sweep' now" in got.err
    )
    got = run_main(["pipeline", "--out", str(out), "--retry-failed"], capsys)
    assert got.rc == 2 and "'sweep_quick' in its pipeline_config.yaml" in got.err
    # the processes and the GIF change no row
    from residual_quad.evaluation.studies.pipeline import RESUME_FREE_KEYS
    from residual_quad.evaluation.sweep import check_resume_config

    free = dataclasses.replace(QUICK, workers=3, figure_workers=2, animation=True)
    assert set(RESUME_FREE_KEYS) == {"workers", "figure_workers", "animation"}
    check_resume_config(free, out, "pipeline_config.yaml", RESUME_FREE_KEYS)
