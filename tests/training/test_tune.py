"""``rquad tune``: a seeded optuna study of a tracker's gains on the RL objective, on scenarios the
evaluation never flies; its ranges checked against the controllers' option domains."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from residual_quad.controllers.base import resolve_factory
from residual_quad.controllers.options import Range, tunable_of
from residual_quad.controllers.specs import resolve_entry
from residual_quad.envs.disturbances import PAYLOAD_LEVELS
from residual_quad.training.precision import PrecisionReward
from residual_quad.training.tune import (
    FIRST_TUNING_SEED,
    TuneConfig,
    score_flights,
    search_space,
    tune,
    tuning_scenarios,
)

pytest.importorskip("optuna")

SMALL = {"scenarios": 2, "episode_s": 4.0, "trials": 2}


def test_every_declared_range_is_inside_its_options_domain():
    for name in ("pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton", "hnewton_rls"):
        ranges = search_space(name)  # raises if an end is outside the option's domain
        assert ranges == dict(tunable_of(resolve_factory(name)))
    assert {"kp", "kd", "attitude.wn_rp", "ki"} <= set(search_space("pid"))
    assert {"forgetting", "p0", "observer_tau"} <= set(search_space("geo_rls_dob"))


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"kp": [60, 5]}, "low < high"),
        ({"kp": {"low": 0.0, "high": 5.0, "log": True}}, "log range needs low > 0"),
        ({"kp": [-1, 5]}, "option kp must be a finite number > 0"),
        ({"kq": [1, 5]}, "unknown option 'kq'"),
        ({"attitude.wn_rq": [1, 5]}, "mapping of its fields (wn_rp"),
        ({"forgetting": [0.9, 1.5]}, "unknown option 'forgetting'"),
        ({"kp": "fast"}, "must be [low, high]"),
        ({"kp": [1, float("nan")]}, "finite number"),
    ],
)
def test_a_bad_range_is_an_error_naming_it(space, message):
    with pytest.raises(ValueError, match="space") as err:
        TuneConfig(controller="pid", space=space)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("controller", "message"),
    [("ppo", "no tunable options"), ("nope", "unknown controller"), ("geo:kp=3", "without")],
)
def test_a_controller_that_cannot_be_tuned_is_named(controller, message):
    with pytest.raises(ValueError, match=message):
        TuneConfig(controller=controller)


def test_the_tuning_scenarios_are_never_the_evaluations():
    cfg = TuneConfig(scenarios=60, seed=3)
    scenarios = tuning_scenarios(cfg)
    assert scenarios == tuning_scenarios(cfg)  # seeded
    assert scenarios != tuning_scenarios(TuneConfig(scenarios=60, seed=4))
    assert {s.trajectory for s in scenarios} == {"hover", "helix", "figure8", "lissajous", "spline"}
    for s in scenarios:
        assert 0.0 <= s.payload_kg < PAYLOAD_LEVELS["extra"]  # the held-out payload never
        assert s.seed >= FIRST_TUNING_SEED  # far from the matrix's seeds (0–19)
        assert (s.trajectory == "hover") == (s.params == ())
        if s.trajectory == "hover":
            assert any(x != 0.0 for x in s.offset_m)  # not the matrix's nominal start
    assert len({s.seed for s in scenarios}) == len(scenarios)
    with pytest.raises(ValueError, match="held-out extra"):
        TuneConfig(payload_kg=(0.0, 0.75))


def test_the_objective_is_the_rl_precision_reward_per_step_of_the_full_episode():
    """Smoothness off: the score is the mean over flights of Σ_k r_pos(e_k) / K, in (0, 1]; a
    flight cut short by a crash earns nothing for its missing steps."""
    cfg = TuneConfig(controller="geo", objective=PrecisionReward(smooth=0.0), **SMALL)
    scenarios = tuning_scenarios(cfg)
    scored = score_flights({}, cfg, scenarios)
    assert 0.0 < scored["score"] <= 1.0 and scored["crashes"] == 0
    crashing = score_flights({"kp": 500.0, "kd": 0.01}, cfg, scenarios)  # far outside its range
    assert crashing["crashes"] >= 1
    assert crashing["score"] < scored["score"]


def test_a_study_writes_its_files_and_its_best_gains_load_as_a_controller(tmp_path):
    cfg = TuneConfig(controller="pid", **SMALL)
    summary = tune(cfg, tmp_path / "a")
    out = tmp_path / "a"
    assert {p.name for p in out.iterdir()} >= {
        "tune_config.yaml",
        "study.db",
        "trials.jsonl",
        "best.yaml",
        "default.json",
    }
    rows = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and summary["trials"] == 2
    assert summary["best_score"] == max(r["score"] for r in rows)
    entry = yaml.safe_load((out / "best.yaml").read_text())
    spec = resolve_entry(entry)
    assert spec.label == "pid_tuned"
    ctrl = spec.build()
    best = summary["best_params"]
    assert ctrl.kp == pytest.approx(best["kp"]) and ctrl.ki == pytest.approx(best["ki"])
    assert ctrl.inner.gains.wn_rp == pytest.approx(best["attitude.wn_rp"])
    # seeded: the same study again gives the same trials
    again = tune(cfg, tmp_path / "b")
    rows_b = [json.loads(line) for line in (tmp_path / "b/trials.jsonl").read_text().splitlines()]
    assert [r["params"] for r in rows_b] == [r["params"] for r in rows]
    assert np.allclose([r["score"] for r in rows_b], [r["score"] for r in rows], rtol=0, atol=0)
    assert again["best_params"] == best


def test_resume_continues_the_study_and_refuses_another_config(tmp_path):
    cfg = TuneConfig(controller="geo", **SMALL)
    tune(cfg, tmp_path)
    with pytest.raises(ValueError, match="--resume"):
        tune(cfg, tmp_path)
    more = TuneConfig(controller="geo", **{**SMALL, "trials": 3})
    assert tune(more, tmp_path, resume=True)["trials"] == 3
    lines = (tmp_path / "trials.jsonl").read_text().splitlines()
    assert [json.loads(x)["trial"] for x in lines] == [0, 1, 2]
    other = TuneConfig(controller="geo", **{**SMALL, "trials": 4, "episode_s": 5.0})
    with pytest.raises(ValueError, match="episode_s"):
        tune(other, tmp_path, resume=True)


def test_a_range_is_checked_when_built():
    with pytest.raises(ValueError, match="low < high"):
        Range(2.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        Range(True, 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["tune", "pid", "--space", "kp=60:5"], "low < high"),
        (["tune", "pid", "--space", "kp=5"], "PATH=LOW:HIGH"),
        (["tune", "pid", "--space", "kp=1:2,kp=2:3"], "given twice"),
        (["tune", "ppo"], "no tunable options"),
        (["tune", "pid", "--trials", "0"], "--trials"),
        (["tune", "pid", "--preset", "lunar"], "unknown preset 'lunar'"),
    ],
)
def test_the_command_line_names_a_bad_range_in_one_line(argv, fragment, capsys, tmp_path):
    from residual_quad.cli import main

    try:
        rc = main([*argv, "--out", str(tmp_path / "o"), "--no-progress"])
    except SystemExit as exc:
        rc = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("rquad tune: error: "), err
    assert fragment in err[0]
    assert not (tmp_path / "o").exists()


def test_a_robust_search_scores_the_worst_flights():
    from residual_quad.training.tune import aggregate_scores

    scores = [0.9, 0.1, 0.5, 0.7, 0.3, 0.8, 0.6, 0.2]
    assert aggregate_scores(scores, TuneConfig()) == pytest.approx(np.mean(scores))
    cvar = TuneConfig(aggregate="cvar", cvar_fraction=0.25)
    assert aggregate_scores(scores, cvar) == pytest.approx(0.15)  # the worst two of eight
    tiny = TuneConfig(aggregate="cvar", cvar_fraction=0.01)
    assert aggregate_scores(scores, tiny) == pytest.approx(0.1)  # at least one flight
    with pytest.raises(ValueError, match="aggregate must be one of mean, cvar"):
        TuneConfig(aggregate="median")
    with pytest.raises(ValueError, match="cvar_fraction"):
        TuneConfig(aggregate="cvar", cvar_fraction=0.0)


def test_a_study_flies_the_plant_it_is_given_and_tells_its_controllers(monkeypatch):
    """``env`` sets the tuning flights' plant: behind the realistic preset's 60 ms rotors the
    controllers are built with their behind-lag defaults (as a sweep builds them), and the same
    gains score differently than on the ideal plant; a scenario keyword is refused."""
    from residual_quad.controllers import batch as batch_module

    built = []
    make = batch_module.make_batch_controller

    def spy(name, n, context=None, **options):
        built.append(context)
        return make(name, n, context, **options)

    cfg = TuneConfig(controller="pid", env={"preset": "realistic"}, **SMALL)
    ideal = TuneConfig(controller="pid", **SMALL)
    scenarios = tuning_scenarios(cfg)
    assert scenarios == tuning_scenarios(ideal)  # the plant changes no scenario
    monkeypatch.setattr(batch_module, "make_batch_controller", spy)
    lagged = score_flights({}, cfg, scenarios)
    flat = score_flights({}, ideal, scenarios)
    assert built[0].rotor_tau_s == 0.06 and built[0].obs_delay_steps == 1
    assert built[1].rotor_tau_s == 0.0
    assert lagged["score"] != flat["score"]
    with pytest.raises(ValueError, match="unknown plant keywords \\['payload'\\]"):
        TuneConfig(controller="pid", env={"payload": "extra"})
