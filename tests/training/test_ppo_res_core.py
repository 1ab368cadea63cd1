"""``ppo_res``'s ``core``: which defaults its tracker takes. ``ideal`` (every file without the
entry) keeps the source's; ``plant`` gives the tracker the defaults of the plant the policy was
trained on — behind lag the lag-tuned gains, INDI, the rotor model and the latency predictor —
in the training pilot, in the training's evaluation and in the deployed controller alike, on
whatever plant it flies (the loop the policy learned)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.controllers import make_controller  # noqa: E402
from residual_quad.controllers.attitude import AttitudeGains, default_attitude_gains  # noqa: E402
from residual_quad.controllers.batch import make_batch_controller  # noqa: E402
from residual_quad.controllers.driver import LawController  # noqa: E402
from residual_quad.controllers.policy_file import (  # noqa: E402
    PolicyFileError,
    default_policy_path,
    read_meta,
)
from residual_quad.controllers.ppo_res import ResidualPilot, ResidualPPOController  # noqa: E402
from residual_quad.envs.residual_quad_env import ResidualQuadEnv  # noqa: E402
from residual_quad.episode import control_context  # noqa: E402
from residual_quad.training.callbacks import policy_controller  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig  # noqa: E402
from residual_quad.training.ppo_model import make_training_env  # noqa: E402

REALISTIC = {"preset": "realistic"}
LAGGED = control_context(REALISTIC)  # 60 ms rotors, one period of latency each way


def _config(**kw) -> PPOTrainConfig:
    base = {
        "controller": "ppo_res",
        "tracker": "pid",
        "core": "plant",
        "accel_scale": 4.0,
        "seed": 0,
        "total_steps": 2048,
        "n_envs": 8,
        "episode_s": 5.0,
        "eval_freq": 1024,
        "eval_scenarios": [["heavy", "breezy", "hover"]],
        "checkpoint_freq": 1024,
        "env_threads": 1,
        "env_kwargs": REALISTIC,
        "ppo": PPOHyperparams(n_steps=64, batch_size=256, n_epochs=2, log_std_init=-3.0),
    }
    base.update(kw)
    return PPOTrainConfig(**base)


@pytest.fixture(scope="module")
def plant_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ppo_res_core")
    train(_config(), out, progress=False)
    return out / "final.zip"


def _is_plant_core(law: ResidualPPOController) -> bool:
    """The tracker runs the realistic plant's defaults (checked field by field)."""
    assert law.inner.gains == default_attitude_gains(0.06, 0.02)
    assert law.rotor_model is not None and law.rotor_model.tau_s == 0.06
    assert law.attitude_loop == "indi" and law.indi is not None
    assert law.predictor is not None
    return True


def _is_ideal_core(law: ResidualPPOController) -> bool:
    assert law.inner.gains == AttitudeGains() and law.rotor_model is None
    assert law.attitude_loop == "pd" and law.indi is None and law.predictor is None
    return True


def test_the_file_records_its_core_and_flies_on_it(plant_run):
    assert read_meta(plant_run, "ppo_res")["core"] == "plant"
    assert _is_plant_core(make_controller("ppo_res", LAGGED, path=plant_run).law)
    # built without a plant (or flown on another), the core is still the one it trained with
    assert _is_plant_core(make_controller("ppo_res", path=plant_run).law)
    # a file without the entry keeps the source's defaults behind lag (what it trained on)
    shipped = make_controller("ppo_res", LAGGED)
    assert "core" not in shipped.law.meta and _is_ideal_core(shipped.law)


def test_pilot_evaluation_and_deployment_share_the_core():
    """What the policy acts through in training, what the training's evaluation flies and what
    a sweep flies are one tracker."""
    cfg = _config()
    venv = make_training_env(cfg)
    try:
        assert _is_plant_core(venv.venv.pilot.law)
    finally:
        venv.close()
    ideal = make_training_env(_config(core="ideal"))
    try:
        assert _is_ideal_core(ideal.venv.pilot.law)  # the realistic plant, the source's core
    finally:
        ideal.close()


def test_ppo_acc_takes_the_plant_core_too():
    """The setting is the acceleration policies': ``ppo_acc``'s pilot (its feed-forward tracker,
    no PD) flies the training plant's attitude loop, rotor model and predictor as well."""
    venv = make_training_env(_config(controller="ppo_acc", tracker="feedforward"))
    try:
        law = venv.venv.pilot.law
        assert _is_plant_core(law) and law.kp == 0.0 and law.kd == 0.0
    finally:
        venv.close()


def test_training_evaluation_flies_the_plant_core(plant_run):
    from residual_quad.controllers.policy_file import load_policy

    _, model, _, _ = load_policy(plant_run, "ppo_res", "cpu")
    cfg = _config()
    venv = make_training_env(cfg)
    try:
        ctrl = policy_controller(model, cfg, venv)  # no VecNormalize: no normalizer
    finally:
        venv.close()
    assert isinstance(ctrl, LawController) and _is_plant_core(ctrl.law)


def test_zero_correction_over_the_plant_core_is_pid_with_the_plant_defaults():
    """Known answer: with no correction the pilot is ``pid`` as ``make_controller`` builds it for
    the realistic plant (INDI, rotor model, predictor, lag-tuned gains), bit for bit over a
    flight on that plant."""
    pilot = ResidualPilot(1, 4.0, tracker="pid", core="plant", trained_on=REALISTIC)
    pid = make_controller("pid", LAGGED)
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix", **REALISTIC)
    obs, _ = env.reset(seed=3)
    pilot.decide(np.zeros((1, 3)))
    for _ in range(120):
        a = pid.policy(obs)
        np.testing.assert_array_equal(pilot(obs[None])[0], a)
        obs, *_ = env.step(a)


def test_batched_plant_core_equals_the_single_one(plant_run, batch_flight):
    """Corrections bit for bit, rotor actions ≤ 1e-9 (the INDI and predictor's batch
    contract), on a realistic flight the single controllers' observations drive."""
    batch = make_batch_controller("ppo_res", 2, LAGGED, path=plant_run)
    singles = [make_controller("ppo_res", LAGGED, path=plant_run) for _ in range(2)]
    envs = [
        ResidualQuadEnv(payload=p, wind="windy", trajectory=t, **REALISTIC)
        for p, t in (("extra", "helix"), ("none", "figure8"))
    ]

    def held_equal(i: int) -> None:
        assert np.array_equal(batch.state.policy.held[i], singles[i].state.policy.held)

    batch_flight(batch, singles, envs, 40, atol=1e-9, each=held_equal)


@pytest.mark.parametrize("bad", ["Plant", "indi", "", None, 1, ["plant"]])
def test_a_file_with_an_unknown_core_names_the_file_and_the_choices(
    plant_run, tmp_path, bad, edited_policy
):
    damaged = edited_policy(plant_run, tmp_path / "core.zip", core=bad)
    with pytest.raises(PolicyFileError, match=r"core\.zip.*valid choices: ideal, plant"):
        ResidualPPOController(path=damaged)


def test_a_rotor_level_file_with_a_core_is_refused(tmp_path, edited_policy):
    ppo_core = edited_policy(default_policy_path(), tmp_path / "ppo_core.zip", core="plant")
    with pytest.raises(PolicyFileError, match=r"ppo_core\.zip.*core is a ppo_res/ppo_acc entry"):
        make_controller("ppo", path=ppo_core)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"core": "realistic"}, r"core must be one of \('ideal', 'plant'\)"),
        ({"core": None}, r"core must be one of"),
        (
            {"controller": "ppo", "tracker": None, "core": "plant"},
            "core is ppo_res's and ppo_acc's",
        ),
    ],
)
def test_bad_core_settings_fail_before_training(changes, message):
    with pytest.raises(ValueError, match=message):
        _config(**changes)


def test_a_plant_core_file_records_the_gains_it_trained_over(plant_run):
    """The plant's default gains are written into the file, so a later change of the defaults
    cannot change the loop a policy learned over; its controller flies those."""
    from residual_quad.controllers.policy_file import read_meta

    meta = read_meta(plant_run)
    assert AttitudeGains(**meta["attitude"]) == default_attitude_gains(0.06, 0.02)
    ctrl = make_controller("ppo_res", LAGGED, path=str(plant_run))
    assert ctrl.inner.gains == AttitudeGains(**meta["attitude"])
