"""The tuned trackers: the shipped studies' gains behind registry names, their records checked."""

from __future__ import annotations

import json
import shutil

import pytest

from residual_quad import configs
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.specs import parse_spec
from residual_quad.controllers.tuned import (
    RECORD_FILES,
    TUNED_CONTROLLERS,
    TUNED_FOLDER,
    read_tuned,
    tuned_class,
)
from residual_quad.evaluation.report.information import information_of


def make_law(spec: str, **overrides):
    """The law a spec builds (the driver wraps it for flight)."""
    return parse_spec(spec).make(None, **overrides)


@pytest.mark.parametrize("controller", TUNED_CONTROLLERS)
def test_the_tuned_name_flies_the_studys_best_gains(controller):
    record = read_tuned(controller)
    tuned = make_law(f"{controller}_tuned")
    assert type(tuned).__mro__[1] is type(make_law(controller))  # the same law
    assert tuned.kp == pytest.approx(record.options["kp"])
    assert tuned.kd == pytest.approx(record.options["kd"])
    assert tuned.inner.gains.wn_rp == pytest.approx(record.options["attitude"]["wn_rp"])
    assert tuned.inner.gains.zeta_rp == pytest.approx(record.options["attitude"]["zeta_rp"])
    assert tuned.kp != pytest.approx(make_law(controller).kp)  # not the defaults


def test_options_given_replace_the_tuned_ones():
    record = read_tuned("pid")
    tuned = make_law("pid_tuned", ki=5.0)
    assert tuned.ki == 5.0
    assert tuned.kp == pytest.approx(record.options["kp"])
    assert tuned.inner.gains.wn_rp == pytest.approx(record.options["attitude"]["wn_rp"])
    whole = make_law("pid_tuned:kp=9", attitude={"max_tilt": 0.5})
    assert whole.kp == 9.0
    assert whole.inner.gains.max_tilt == 0.5
    assert whole.inner.gains.wn_rp == make_law("pid").inner.gains.wn_rp  # replaced whole
    with pytest.raises(ValueError, match="kp"):  # the option table is the tracker's own
        parse_spec("pid_tuned:kp=-1")


def test_a_tuned_tracker_refuses_a_plant_it_was_not_tuned_for():
    with pytest.raises(ValueError, match="rotor τ 0 s.*τ 0.06 s.*fly pid"):
        tuned_class("pid")(ControlContext(rotor_tau_s=0.06))
    with pytest.raises(ValueError, match="latency"):
        tuned_class("pid")(ControlContext(obs_delay_steps=1))


@pytest.mark.parametrize("controller", TUNED_CONTROLLERS)
def test_the_audit_row_states_the_study(controller):
    record = read_tuned(controller)
    info, budget = information_of(f"{controller}_tuned")
    assert info is not None
    default, _ = information_of(controller)
    assert default is not None
    assert record.trials == record.config["trials"]
    assert info.tuning_trials == default.tuning_trials + record.trials  # design tries + study
    assert "CVaR" in info.objective
    assert "payload 0–0.6 kg" in info.training_scenarios
    assert f"{record.trials} trials" in budget
    if "λ" in default.memory:  # the memory cell states the tuned RLS, not the default
        assert "λ 0.99," not in info.memory
        assert f"λ {record.options['forgetting']:.3f}" in info.memory
    if "observer_tau" in record.options:
        assert "τ 0.02 s" not in info.memory


@pytest.mark.parametrize("controller", TUNED_CONTROLLERS)
def test_the_shipped_study_follows_the_shipped_recipe(controller):
    from residual_quad.training.tune import TuneConfig

    recipe = configs.to_dict(configs.load(TuneConfig, configs.resolve("tune_matrix.yaml")))
    recipe["controller"] = controller
    assert read_tuned(controller).config == recipe


@pytest.mark.parametrize("controller", TUNED_CONTROLLERS)
def test_the_best_gains_score_what_the_record_says(controller):
    """Re-flying the best trial's gains over the study's own flights gives its recorded score
    (to 1e-3: the flights are seeded; only floating-point summation order may differ)."""
    from residual_quad.training.tune import TuneConfig, score_flights, tuning_scenarios

    record = read_tuned(controller)
    cfg = configs.load(TuneConfig, record.config)
    scored = score_flights(record.options, cfg, tuning_scenarios(cfg))
    assert scored["score"] == pytest.approx(record.score, rel=1e-3)
    assert scored["crashes"] == 0
    assert record.score > record.default_score  # the search found better than the defaults


@pytest.mark.parametrize("damage", ["missing", "not json", "other controller"])
def test_a_damaged_record_is_one_readable_error(tmp_path, damage):
    folder = tmp_path / "pid"
    shutil.copytree(TUNED_FOLDER / "pid", folder)
    if damage == "missing":
        (folder / "trials.jsonl").unlink()
        match = "missing trials.jsonl"
    elif damage == "not json":
        (folder / "default.json").write_text("{not json")
        match = "JSONDecodeError"
    else:
        (folder / "best.yaml").write_text(json.dumps({"spec": "geo", "options": {}}))
        match = "not an entry of 'pid'"
    with pytest.raises(ValueError, match=match) as err:
        read_tuned("pid", folder)
    assert "rquad tune pid --config configs/tune_matrix.yaml" in str(err.value)
    assert "\n" not in str(err.value)


def test_every_shipped_record_is_complete():
    for controller in TUNED_CONTROLLERS:
        assert sorted(p.name for p in (TUNED_FOLDER / controller).iterdir()) == sorted(RECORD_FILES)
