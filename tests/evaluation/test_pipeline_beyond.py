"""The pipeline's "Beyond the source" stage on tiny sweeps: a realistic-plant matrix with an RL
policy's expected crash, and two recovery sweeps whose table and figures join the section; resume
flies nothing again; ``rquad report --rewrite`` renders the same section and outcome (these fly
about 10 short runs: slow); the closing lines and the config checks (fast)."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.controllers.residual import DEFAULT_WEIGHTS
from residual_quad.evaluation.report.beyond import (
    BEYOND_DIR,
    RECOVERY_DIR,
    beyond_outcome_of,
    expected_crashes,
)
from residual_quad.evaluation.report.document import OUTCOME_FILE, rewrite_report, write_report
from residual_quad.evaluation.studies import pipeline
from residual_quad.evaluation.studies.pipeline import (
    PIPELINE_CONFIG_FILE,
    QUICK,
    REGENERATE,
    PipelineConfig,
    beyond_lines,
    beyond_stage,
    closing_lines,
    committed_outcome,
    outcome_differences,
    record_outcome,
)
from residual_quad.evaluation.sweep import SweepConfig, read_rows, run_sweep

MAIN = SweepConfig(
    controllers=["geo"],
    payloads=["heavy"],
    winds=["windy"],
    trajectories=["helix"],
    seeds=[0],
    episode_s=4.0,
    series=[],
    workers=1,
)
# sweep_realistic's options, but `ppo` flies its policy trained on the ideal plant (which crashes
# on this plant: the crash note's expected case)
REALISTIC = dataclasses.replace(
    MAIN,
    controllers=["geo", "geo_rls_dob", "ppo"],
    seeds=[0, 1],
    env={"preset": "realistic"},
    controller_options={
        k: v
        for k, v in configs.load(SweepConfig, "sweep_realistic").controller_options.items()
        if k != "ppo"
    },
)
RECOVERY = SweepConfig(
    controllers=["geo", "geo_rls_dob"],
    payloads=["none"],
    winds=["breezy"],
    trajectories=["hover"],
    seeds=[0],
    episode_s=4.0,
    series=[{}],
    workers=1,
)


@pytest.fixture(scope="module")
def flown(tmp_path_factory):
    """A pipeline output folder: the main rows, then the beyond stage and the report."""
    root = tmp_path_factory.mktemp("pipe")
    out = root / "out"
    main_yaml = configs.dump(MAIN, root / "main.yaml")
    beyond_yaml = configs.dump(REALISTIC, root / "realistic_tiny.yaml")
    payload = dataclasses.replace(
        RECOVERY, env={"events": [{"kind": "payload", "t_s": 1.0, "mass_kg": 0.5}]}
    )
    rotor = dataclasses.replace(
        RECOVERY, env={"events": [{"kind": "rotor", "t_s": 1.0, "rotor": 0, "efficiency": 0.7}]}
    )
    recovery = [
        str(configs.dump(payload, root / "pickup.yaml")),
        str(configs.dump(rotor, root / "fault.yaml")),
    ]
    lag = configs.dump(
        dataclasses.replace(MAIN, controllers=["pid"], seeds=[0, 1]), root / "lag.yaml"
    )
    cfg = PipelineConfig(
        sweep=str(main_yaml),
        beyond=str(beyond_yaml),
        recovery=recovery,
        lag=str(lag),
        lag_rotor_tau_s=[0.03, 0.06],
        lag_latency_steps=[1],
    )
    configs.dump(cfg, out / PIPELINE_CONFIG_FILE)
    rows = run_sweep(MAIN, out / "sweep", workers=1, progress=False)
    section = beyond_stage(cfg, out, DEFAULT_WEIGHTS, baseline=rows)
    report = write_report(
        rows, out, beyond_sections=[section], beyond_outcome=beyond_outcome_of(out)
    )
    return cfg, out, section, report.read_text()


@pytest.mark.slow
def test_the_section_has_the_matrix_the_paired_table_the_crashes_and_the_recovery(flown):
    _, out, section, report = flown
    assert section.startswith("## Beyond the source: realistic_tiny\n")
    assert "6 runs of 3 controllers under plant options `preset: realistic`" in section
    assert "| heavy | windy | " in section and "– (2/2 div.)" in section  # ppo crashes
    assert "**Paired comparisons" in section
    assert "`ppo`: shipped RL policies, trained on the ideal plant" in section
    assert "**Recovery after the first event" in section
    for events in ("payload@1s:mass_kg=0.5", "rotor@1s:rotor=0,efficiency=0.7"):
        assert f"| {events} | hover | none, breezy | geo | 1 |" in section
    assert "`recovery/pickup/rows.jsonl`, `recovery/fault/rows.jsonl`" in section
    for name in ("pickup", "fault"):
        assert f"![recovery, {name}](figures/recovery/{name}.png)" in section
        assert (out / "figures" / RECOVERY_DIR / f"{name}.png").stat().st_size > 0
    assert (out / "tables" / "beyond_recovery.csv").is_file()
    assert section.strip() in report
    outcome = json.loads((out / OUTCOME_FILE).read_text())
    assert outcome["beyond"] == {
        "realistic_tiny": {"runs": 6, "failed": 0, "diverged": {"ppo": 2}},
        "pickup": {"runs": 2, "failed": 0, "diverged": {}},
        "fault": {"runs": 2, "failed": 0, "diverged": {}},
        "lag/tau030ms_delay1": {"runs": 2, "failed": 0, "diverged": {}},
        "lag/tau060ms_delay1": {"runs": 2, "failed": 0, "diverged": {}},
    }
    # the lag sweep: one folder per plant, its table (intervals over the 2 seeds) and figure
    assert "**Lag sweep: mean RMSE (m) per rotor time constant and latency" in section
    assert "| τ 30 ms, latency 1 | " in section and "| τ 60 ms, latency 1 | " in section
    assert section.index("τ 30 ms") < section.index("τ 60 ms")
    assert "![lag sweep](figures/lag.png)" in section
    assert (out / "figures" / "lag.png").stat().st_size > 0
    assert (out / "tables" / "beyond_lag.csv").is_file()
    saved = configs.load(SweepConfig, out / "lag" / "tau060ms_delay1" / "sweep_config.yaml")
    assert saved.env == {"rotor_tau_s": 0.06, "action_delay_steps": 1, "obs_delay_steps": 1}


@pytest.mark.slow
def test_resume_flies_nothing_again(flown, monkeypatch):
    cfg, out, section, _ = flown
    folders = (BEYOND_DIR, "recovery/pickup", "recovery/fault", "lag/tau030ms_delay1")
    before = {d: read_rows(out / d) for d in folders}
    from residual_quad.evaluation.sweep import engine

    def no_flying(*args, **kwargs):
        raise AssertionError("resume flew a run again")

    monkeypatch.setattr(engine, "run_one", no_flying)
    monkeypatch.setattr(engine, "run_batch", no_flying)
    again = beyond_stage(cfg, out, DEFAULT_WEIGHTS, resume=True, baseline=read_rows(out / "sweep"))
    assert again == section
    for d, rows in before.items():
        assert read_rows(out / d) == rows


@pytest.mark.slow
def test_the_section_and_outcome_survive_rewrite(flown, tmp_path):
    _, out, section, report = flown
    copy_dir = tmp_path / "copy"
    shutil.copytree(out, copy_dir)
    rewritten = rewrite_report(copy_dir).read_text()
    assert rewritten == report.replace(str(out), str(copy_dir))
    assert section.strip() in rewritten
    mine = json.loads((copy_dir / OUTCOME_FILE).read_text())
    assert mine == json.loads((out / OUTCOME_FILE).read_text())
    # committed results keep no series: the recovery figures stay as drawn
    for name in ("pickup", "fault"):
        shutil.rmtree(copy_dir / RECOVERY_DIR / name / "series")
    assert rewrite_report(copy_dir).read_text() == rewritten


def test_closing_lines_name_the_rl_crashes_as_expected_and_others_not():
    outcome = {
        "runs": 10,
        "failed": 0,
        "diverged": {},
        "targets": [{"target": "t", "goal": "g", "measured": "m", "met": True}],
        "beyond": {
            "sweep_realistic_20": {"runs": 1620, "failed": 0, "diverged": {"ppo": 180}},
            "recovery_rotor": {"runs": 360, "failed": 1, "diverged": {"pid": 3, "ppo_res": 40}},
            "recovery_payload": {"runs": 180, "failed": 0, "diverged": {}},
        },
    }
    lines = closing_lines(outcome, None)
    assert lines[2] == (
        "beyond the source, sweep_realistic_20: diverged runs: 180 of 1620 (ppo 180); expected "
        "for ppo: RL policies trained on the ideal plant (docs/rl_policies.md)"
    )
    assert lines[3].endswith(
        "(pid 3, ppo_res 40); expected for ppo_res: RL policies trained on "
        "the ideal plant (docs/rl_policies.md); not expected: pid"
    )
    assert ", 1 failed" in lines[3]
    assert lines[4] == "beyond the source, recovery_payload: diverged runs: 0 of 180"
    assert expected_crashes({"ppo_res:training_seed=2": 1, "geo": 2}) == (
        ["ppo_res:training_seed=2"],
        ["geo"],
    )
    assert beyond_lines({}) == []
    plants = {
        "lag/tau020ms_delay0": {"runs": 84, "failed": 0, "diverged": {}},
        "lag/tau080ms_delay2": {"runs": 84, "failed": 1, "diverged": {"pid": 2}},
    }
    assert beyond_lines(plants) == [
        "beyond the source, lag sweep (2 plants): diverged runs: 2 of 168, 1 failed "
        "(pid at tau080ms_delay2 2); not expected: pid at tau080ms_delay2"
    ]


def test_a_policy_retrained_on_the_sweeps_plant_is_not_expected_to_crash(tmp_path):
    """``ppo: {plant: realistic}`` on the realistic preset flies a policy retrained on that
    plant: its crashes are named as not expected, in the closing lines and the section's note."""
    from residual_quad.evaluation.report.beyond import retrained_for_plant
    from residual_quad.evaluation.sweep.config import CONFIG_FILE

    cfg = {
        "controllers": ["geo", "ppo", "ppo_res"],
        "env": {"preset": "realistic"},
        "controller_options": {"ppo": {"plant": "realistic"}, "geo": {"kp": 1.0}},
    }
    (tmp_path / CONFIG_FILE).write_text(json.dumps(cfg))  # JSON is YAML
    assert retrained_for_plant(tmp_path) == ["ppo"]
    assert retrained_for_plant(tmp_path / "missing") == []
    crashes = {"ppo": 2, "ppo_res": 5}
    assert expected_crashes(crashes, ["ppo"]) == (["ppo_res"], ["ppo"])
    line = beyond_lines({"m": {"runs": 9, "diverged": crashes, "retrained": ["ppo"]}})[0]
    assert line.endswith("(docs/rl_policies.md); not expected: ppo")
    assert "expected for ppo_res:" in line


def test_the_beyond_record_is_compared_with_the_committed_one():
    committed = committed_outcome()
    mine = copy.deepcopy(committed)
    mine["beyond"] = {"sweep_realistic_20": {"runs": 1620, "failed": 0, "diverged": {}}}
    if "beyond" not in committed:  # until the committed results are regenerated
        diffs = outcome_differences(mine, committed)
        assert diffs == [
            "beyond-the-source sweep sweep_realistic_20 is not in the committed outcome "
            f"(regenerate it: {REGENERATE})"
        ]
        committed = copy.deepcopy(mine)
    theirs = copy.deepcopy(committed)
    assert outcome_differences(mine, theirs) == [] or "beyond" in committed
    mine = copy.deepcopy(theirs)
    name = next(iter(mine["beyond"]))
    mine["beyond"][name]["diverged"] = {"geo": 1}
    assert any(
        d.startswith(f"beyond the source, {name}: ") for d in outcome_differences(mine, theirs)
    )
    mine.pop("beyond")
    assert f"beyond-the-source sweep not flown here: {name}" in outcome_differences(mine, theirs)


def test_recovery_needs_beyond_and_unique_names():
    assert PipelineConfig().beyond == "sweep_realistic_20"
    assert PipelineConfig().recovery == ["recovery_payload", "recovery_rotor"]
    assert QUICK.recovery == PipelineConfig().recovery and QUICK.beyond
    with pytest.raises(ValueError, match="needs beyond"):
        PipelineConfig(beyond="")
    assert PipelineConfig(beyond="", recovery=[], lag="").recovery == []
    with pytest.raises(ValueError, match="share a name"):
        PipelineConfig(recovery=["recovery_rotor", "configs/recovery_rotor.yaml"])


def test_the_lag_sweep_needs_beyond_and_a_valid_grid():
    assert PipelineConfig().lag == "lag_sweep"
    assert PipelineConfig().lag_rotor_tau_s == [0.02, 0.04, 0.06, 0.08]
    assert PipelineConfig().lag_latency_steps == [0, 1, 2]
    assert QUICK.lag == PipelineConfig().lag and len(QUICK.lag_rotor_tau_s) == 2
    with pytest.raises(ValueError, match="lag: 'lag_sweep' joins the beyond-the-source section"):
        PipelineConfig(beyond="", recovery=[])
    assert PipelineConfig(beyond="", recovery=[], lag="").lag == ""
    with pytest.raises(ValueError, match="need a value each"):
        PipelineConfig(lag_latency_steps=[])
    with pytest.raises(ValueError, match="lag_rotor_tau_s: .*rotor_tau_s"):
        PipelineConfig(lag_rotor_tau_s=[0.06, -0.01])
    with pytest.raises(ValueError, match="lag_rotor_tau_s: .*rotor_tau_s"):
        PipelineConfig(lag_rotor_tau_s=[float("nan")])
    with pytest.raises(ValueError, match="lag_latency_steps: .*action_delay_steps"):
        PipelineConfig(lag_latency_steps=[1, 2.5])


def test_record_outcome_writes_the_committed_expectation(tmp_path, monkeypatch):
    target = tmp_path / "committed_outcome.json"
    monkeypatch.setattr(pipeline, "COMMITTED_OUTCOME", target)
    outcome = {"runs": 1, "failed": 0, "diverged": {}, "targets": [], "beyond": {}}
    (tmp_path / OUTCOME_FILE).write_text(json.dumps(outcome))
    assert record_outcome(tmp_path) == target
    written = json.loads(target.read_text())
    assert written.pop("what") == pipeline.COMMITTED_WHAT
    assert written == outcome


def test_record_outcome_is_refused_for_other_settings(tmp_path, capsys):
    assert main(["pipeline", "--quick", "--record-outcome", "--out", str(tmp_path)]) != 0
    assert "only the default pipeline" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_sweep_configs_name_the_network_relative_to_the_working_directory(tmp_path, monkeypatch):
    """A results folder inside the working directory (a clone) gets the same saved configs in
    every clone; one outside keeps the absolute path, which is the only one that finds it."""
    inside = tmp_path / "clone"
    (inside / "out" / "model").mkdir(parents=True)
    monkeypatch.chdir(inside)
    weights = inside / "out" / "model" / "residual.npz"
    shutil.copy(DEFAULT_WEIGHTS, weights)  # the sweep config checks that the file loads
    assert pipeline.portable_path(weights) == "out/model/residual.npz"
    assert pipeline.portable_path(weights.relative_to(inside)) == "out/model/residual.npz"
    elsewhere = tmp_path / "elsewhere" / "residual.npz"
    assert pipeline.portable_path(elsewhere) == str(elsewhere.resolve())
    s_cfg, _ = pipeline._prepared_sweep("sweep_quick", {}, weights)
    named = {c: o["weights"] for c, o in s_cfg.controller_options.items() if "weights" in o}
    assert named and set(named.values()) == {"out/model/residual.npz"}
    assert set(named) == set(pipeline.RESIDUAL_CONTROLLERS) & set(s_cfg.controllers)
