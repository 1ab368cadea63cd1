"""The information audit: declarations, the table from rows and fake records, the markers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from residual_quad.controllers.base import (
    BUILTIN_CONTROLLERS,
    InformationUse,
    resolve_factory,
)
from residual_quad.controllers.policy_file import read_meta, shipped_policy_path
from residual_quad.evaluation.report.document import write_report
from residual_quad.evaluation.report.information import (
    declared_information,
    differences,
    equal_information,
    information_groups,
    information_notes,
    information_of,
    information_table,
    training_scenarios_of,
    with_policy_record,
)


def test_every_registered_controller_declares_its_information_in_its_own_class():
    for name in BUILTIN_CONTROLLERS:
        factory = resolve_factory(name)
        info = vars(factory).get("INFORMATION")  # own namespace: never inherited
        assert isinstance(info, InformationUse), name
        assert info.tuning, name


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="preview_k"):
        InformationUse(preview_k=-1, tuning="x")
    with pytest.raises(ValueError, match="preview_k"):
        InformationUse(preview_k=True, tuning="x")
    with pytest.raises(ValueError, match="'', 'policy', 'residual'"):
        InformationUse(learned="net", tuning="x")
    with pytest.raises(ValueError, match="tuning"):
        InformationUse()


FAKE_BUDGET = {"steps": 2_000_000, "train_wall_s": 600.0, "cpu_count": 2, "n_envs": 64}


def _policy(target, options):
    """Fake policy records: seed 1 of ppo has preview, history, integral and a privileged
    critic; every other policy has a bare record."""
    if options.get("training_seed") == 1:
        return {
            "features": {"preview_k": 5, "action_history": 3, "error_integral": True},
            "privileged_critic": True,
            "budget": FAKE_BUDGET,
        }
    return {"budget": FAKE_BUDGET}


def _residual(target, options):
    return {"train_samples": 1000, "epochs_run": 7, "best_epoch": 5, "train_time_s": 3.0}


READERS = {"read_policy": _policy, "read_residual": _residual}


def test_the_audit_table_from_fake_records():
    t = information_table(
        ["pid", "ppo", "ppo:training_seed=1", "geo_rls", "my.mod:Nope"], **READERS
    )
    rows = {r[0]: dict(zip(t.headers, r, strict=True)) for r in t.rows}
    assert rows["pid"]["history / memory"] == "position-error integral"
    assert rows["ppo"]["preview"] == "none" and rows["ppo"]["privileged training"] == "no"
    assert rows["ppo"]["tuning budget"].startswith("2.00 M policy steps, 10.0 min on 2 cores")
    seed1 = rows["ppo:training_seed=1"]
    assert seed1["preview"] == "5 samples" and seed1["privileged training"] == "yes"
    assert seed1["history / memory"] == "last 3 actions; position-error integral"
    assert rows["geo_rls"]["tuning budget"].startswith("network: 1,000 samples, 7 epochs")
    assert rows["my.mod:Nope"]["tuning budget"] == "undeclared"


def test_an_absent_record_reads_as_all_off():
    info, budget = information_of("ppo", read_policy=lambda t, o: {})
    assert info.preview_k == 0 and not info.memory and not info.privileged_training
    assert "policy steps" not in budget and budget == info.tuning


def test_markers_name_equal_and_unequal_comparisons():
    notes = information_notes(
        [("geo_rls", "hnewton_rls"), ("ppo", "pid"), ("ppo:training_seed=1", "ppo")], **READERS
    )
    assert notes == [
        "Information (audit table): equal information: geo_rls–hnewton_rls. unequal: "
        "ppo–pid (history / memory); ppo:training_seed=1–ppo (preview, history / memory, "
        "privileged training)."
    ]
    assert information_notes([]) == []
    groups = information_groups(["geo", "pid", "ppo", "geo_rls", "hnewton_rls", "x.y:Z"], **READERS)
    assert groups == [
        "Equal information (audit table): geo = ppo; pid; geo_rls = hnewton_rls; undeclared: x.y:Z."
    ]
    assert information_groups(["geo"]) == []
    assert "undeclared: geo–my.mod:Nope" in information_notes([("geo", "my.mod:Nope")])[0]


@given(
    k=st.integers(0, 20),
    hist=st.integers(0, 5),
    integral=st.booleans(),
    estimate=st.booleans(),
    critic=st.booleans(),
    tracker=st.sampled_from([None, "geo", "pid"]),
)
def test_equal_information_is_symmetric_and_lists_exactly_the_differences(
    k, hist, integral, estimate, critic, tracker
):
    base = InformationUse(feedforward_accel=True, tuning="t", learned="policy")
    record = {
        "features": {
            "preview_k": k,
            "action_history": hist,
            "error_integral": integral,
            "estimate": estimate,
        },
        "privileged_critic": critic,
    }
    if tracker is not None:
        record["tracker"] = tracker
    other = with_policy_record(base, record)
    assert equal_information(base, other) == equal_information(other, base)
    assert equal_information(base, other) == (not differences(base, other))
    assert ("preview" in differences(base, other)) == (k > 0)
    memory = hist > 0 or integral or tracker == "pid"
    assert ("history / memory" in differences(base, other)) == memory
    assert ("pid's position-error integral" in other.memory) == (tracker == "pid")
    assert ("privileged training" in differences(base, other)) == critic


def test_the_report_has_the_audit_table_and_the_paired_markers(tmp_path):
    rows = []
    for ctrl, v in (("geo", 0.05), ("geo_rls", 0.01), ("pid", 0.03)):
        for traj in ("helix", "figure8"):
            for seed in (0, 1):
                rows.append(
                    {
                        "controller": ctrl,
                        "run_id": f"{ctrl}|none|calm|{traj}|{seed}",
                        "payload": "none",
                        "wind": "calm",
                        "trajectory": traj,
                        "seed": seed,
                        "rmse": v + 0.001 * seed,
                        "diverged": False,
                        "control_cost": 100.0,
                        "max_error": v,
                        "wall_time": 0.1,
                    }
                )
    report = write_report(rows, tmp_path).read_text()
    assert "**Information audit" in report and "| geo_rls | yes | yes | none |" in report
    assert "Information (audit table): " in report and "geo_rls–geo (" in report
    assert "Equal information (audit table): pid; geo; geo_rls." in report
    assert (tmp_path / "tables" / "information.csv").is_file()


def test_bad_made_fields_are_refused():
    with pytest.raises(ValueError, match="tuning_trials"):
        InformationUse(tuning="x", tuning_trials=-1)
    with pytest.raises(ValueError, match="tuning_trials"):
        InformationUse(tuning="x", tuning_trials=True)
    with pytest.raises(ValueError, match="decision_hz"):
        InformationUse(tuning="x", decision_hz=0.0)


def test_a_policy_record_gives_the_rate_the_reward_the_scenarios_and_the_budget():
    """The audit's columns on how a row was made come from its record: decisions per second
    from the action repeat, the reward and the training draws from its config; a privileged
    critic recorded as the file writes it (``privileged_columns``, ``config``) is read too."""
    info = InformationUse(tuning="t", learned="policy", action="rotor thrusts", tuning_trials=7)
    record = {
        "action_repeat": 4,
        "privileged_columns": ["wind"],
        "config": {
            "reward": "precision",
            "payloads": ["none", "heavy"],
            "winds": ["windy"],
            "trajectories": ["lissajous", "spline"],
            "trajectory_draw": "randomized",
        },
        "budget": {"steps": 3_000_000, "train_wall_s": 1200.0, "cpu_count": 2, "n_envs": 8},
    }
    done = with_policy_record(info, record)
    assert done.decision_hz == 25.0 and done.privileged_training
    assert done.objective.startswith("precision reward")
    assert done.training_scenarios == (
        "payload 0–0.5 kg, windy, randomized lissajous/spline (seeds off the matrix's)"
    )
    faster = {**record["config"], "trajectory_ranges": {"spline": {"period": [6.0, 9.5]}}}
    assert with_policy_record(info, {**record, "config": faster}).training_scenarios == (
        "payload 0–0.5 kg, windy, randomized lissajous/spline, spline period 6–9.5 (seeds off "
        "the matrix's)"
    )
    focused = {
        **record["config"],
        "focus": {
            "fraction": 0.15,
            "payloads": [0.5, 0.7],
            "winds": None,
            "trajectories": None,
            "trajectory_ranges": {"lissajous": {"period": [5.0, 8.0]}},
        },
    }
    assert with_policy_record(info, {**record, "config": focused}).training_scenarios == (
        "payload 0–0.5 kg, windy, randomized lissajous/spline (seeds off the matrix's), 15 % of "
        "episodes: payload 0.5–0.7 kg, windy, lissajous/spline, lissajous period 5–8"
    )
    two = {**focused, "focus": [focused["focus"], {"fraction": 0.2, "payloads": [0.0, 0.05]}]}
    assert with_policy_record(info, {**record, "config": two}).training_scenarios == (
        "payload 0–0.5 kg, windy, randomized lissajous/spline (seeds off the matrix's), 15 % of "
        "episodes: payload 0.5–0.7 kg, windy, lissajous/spline, lissajous period 5–8, 20 % of "
        "episodes: payload 0–0.05 kg, windy, lissajous/spline"
    )
    weak = {**record["config"], "rotor_efficiency": [1.0, 0.95, 0.9]}
    assert with_policy_record(info, {**record, "config": weak}).training_scenarios == (
        "payload 0–0.5 kg, windy, randomized lissajous/spline (seeds off the matrix's), rotor "
        "efficiency 0.9–1 (weaker motors)"
    )
    table = information_table(["ppo"], read_policy=lambda t, o: record)
    row = dict(zip(table.headers, table.rows[0], strict=True))
    assert row["action"] == "rotor thrusts" and row["decisions"] == "25 Hz"
    declared = declared_information("ppo").tuning_trials
    assert row["tuning trials"] == str(declared)  # ppo's own count; the record does not change it
    assert row["samples"] == "3.00 M policy steps" and row["wall time"] == "20.0 min"
    shaped = with_policy_record(info, {"config": {"position_log": [1.0, 0.01], "winds": []}})
    assert shaped.objective.endswith("+ log-shaped position cost")
    assert with_policy_record(info, {}).decision_hz == 100.0  # nothing recorded: declared
    off = with_policy_record(info, {**record, "algo": "sac"})  # a PPO kind learned by SAC
    assert off.tuning.startswith("SAC (the file's learner)") and off.tuning_trials == 0
    assert with_policy_record(info, {**record, "algo": "ppo"}).tuning_trials == 7


def test_every_shipped_row_says_how_it_was_made():
    table = information_table(["pid", "geo_rls", "ppo", "ppo_res"])
    rows = {r[0]: dict(zip(table.headers, r, strict=True)) for r in table.rows}
    assert rows["pid"]["decisions"] == "100 Hz" and rows["pid"]["samples"] == "–"
    assert rows["geo_rls"]["samples"].endswith("samples")
    assert rows["ppo"]["action"] == "rotor thrusts" and rows["ppo"]["decisions"] == "50 Hz"
    # each RL row: its kind's declared tries, and the scenarios its shipped file's config drew
    for kind in ("ppo", "ppo_res"):
        assert rows[kind]["tuning trials"] == str(declared_information(kind).tuning_trials)
        config = read_meta(shipped_policy_path(kind))["config"]
        assert rows[kind]["training scenarios"] == training_scenarios_of(config)
        off_matrix = config.get("trajectory_draw") == "randomized"
        assert ("seeds off the matrix's" in rows[kind]["training scenarios"]) == off_matrix
        assert ("the matrix's shapes" in rows[kind]["training scenarios"]) != off_matrix
