"""Every shipped YAML loads strictly into its dataclass and equals the dataclass defaults, except
for the documented differences: a YAML file is documentation of the defaults, never a second
source of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.evaluation.studies.ablation import AblationConfig
from residual_quad.evaluation.studies.stick.study import Scenario, load_scenario
from residual_quad.evaluation.studies.stress import StressConfig
from residual_quad.evaluation.sweep import SweepConfig
from residual_quad.training.collect import CollectConfig
from residual_quad.training.ppo_config import PPOTrainConfig
from residual_quad.training.residual_train import TrainConfig
from residual_quad.training.tune import TuneConfig

CONFIG_DIR = Path(configs.__file__).parent
STICK_DIR = Path(load_scenario.__code__.co_filename).parent / "scenarios"

#: the differences from the training defaults that configs/ppo_res.yaml and
#: configs/ppo_res_realistic.yaml share
_PPO_RES_SHARED = {
    "controller": "the residual-RL policy (docs/ppo.md)",
    "tracker": "pid: its error integral carries the steady correction",
    "accel_scale": "a 4 m/s² bound: the gusts' share",
    "total_steps": "1 M: a third of the ablation's budget, the learning rate decayed by then",
    "payloads": "a payload-mass grid to 0.6 kg (extra, 0.75 kg, still held out)",
    "action_smooth": "a cost on the correction's change",
    "action_magnitude": "a cost on the correction's size",
    "position_log": "a log-shaped position cost: calm air's millimetres count",
    "features": "the last 4 corrections",
    "ppo": "smaller updates, a fixed gSDE exploration scale",
}

#: configs/ppo_res.yaml's differences from the training defaults
_PPO_RES = {
    **_PPO_RES_SHARED,
    "features": "the 10-point preview and the last 4 corrections",
    "env_kwargs": "the 10-point reference preview",
    "trajectories": "the randomized families, Lissajous and spline included",
    "trajectory_draw": "randomized: off the matrix",
}

#: configs/ppo.yaml's differences from the training defaults (the defaults are the first
#: shipped recipe, configs/ppo_memoryless.yaml: the realistic-plant file's and the ablation's
#: base); configs/ppo_adapt.yaml has them and the estimate
_PPO_ROTOR = {
    "total_steps": "5 M: the three focus draws take half the episodes (docs/ppo.md)",
    "focus": "light vehicles in gusts, heavy and light ones from rest: 50 % of episodes",
    "rotor_efficiency": "weaker motors: the held-out payload's thrust margin, not its mass",
    "payloads": "a payload-mass grid to 0.7 kg (extra, 0.75 kg, still held out)",
    "trajectories": "the randomized families, Lissajous and spline included",
    "trajectory_draw": "randomized: off the matrix",
    "episode_lengths": "mixed lengths: more starts from rest per sample",
    "reward": "the precision reward",
    "precision": "ppo_acc's tolerances, annealing and smoothness",
    "env_kwargs": "the 10-point reference preview and a 60° tilt limit in training",
    "features": "preview, the last 4 actions and the error integral",
    "eval_freq": "0: no selection on matrix conditions",
}

#: shipped name → (dataclass, the keys that differ from its defaults, and why)
SHIPPED = {
    "sweep": (SweepConfig, {}),
    "sweep_quick": (
        SweepConfig,
        {
            "controllers": "one training seed per RL controller",
            "payloads": "smoke profile: 3 payloads",
            "winds": "2 winds",
            "trajectories": "2 trajectories",
            "seeds": "1 seed",
            "episode_s": "8 s runs",
            "series": "no hover showcase",
        },
    ),
    "sweep_realistic": (
        SweepConfig,
        {
            "controllers": "the model-based controllers and one training seed per RL controller",
            "payloads": "the nominal cells: none, heavy, extra",
            "winds": "windy",
            "env": "the realistic plant preset",
            "controller_options": "the policies retrained on the realistic plant",
            "series": "no time series",
        },
    ),
    "lag_sweep": (
        SweepConfig,
        {
            "controllers": "the seven model-based trackers",
            "payloads": "none and extra",
            "winds": "windy",
            "trajectories": "the tracking trajectories",
            "env": "the realistic preset, whose lag and latency each plant of the grid sets",
            "series": "no time series",
        },
    ),
    "sweep_realistic_20": (
        SweepConfig,
        {
            "controllers": "the model-based controllers and one training seed per RL controller",
            "payloads": "the nominal cells: none, heavy, extra",
            "winds": "windy",
            "seeds": "20 seeds: the pipeline's beyond-the-source matrix",
            "env": "the realistic plant preset",
            "controller_options": "the policies retrained on the realistic plant",
            "series": "no time series",
        },
    ),
    "recovery_payload": (
        SweepConfig,
        {
            "controllers": "the default set, one training seed per RL controller, hnewton too",
            "payloads": "none at reset: the event picks the payload up",
            "winds": "breezy",
            "trajectories": "hover",
            "seeds": "20 seeds",
            "env": "the payload pickup event (docs/recovery.md)",
            "series": "every run (the recovery figure)",
        },
    ),
    "recovery_rotor": (
        SweepConfig,
        {
            "controllers": "the default set, one training seed per RL controller, hnewton too",
            "payloads": "none",
            "winds": "breezy",
            "trajectories": "hover and helix",
            "seeds": "20 seeds",
            "env": "the rotor-failure event (docs/recovery.md)",
            "series": "every run (the recovery figure)",
        },
    ),
    "ablation": (
        AblationConfig,
        {"variants": "the study's data; the dataclass has none"},
    ),
    "stress": (StressConfig, {"scenarios": "the study's data; the dataclass has none"}),
    "collect": (CollectConfig, {}),
    "train_residual": (TrainConfig, {}),
    "ppo": (PPOTrainConfig, _PPO_ROTOR),
    "ppo_memoryless": (PPOTrainConfig, {}),  # the first shipped ppo: the ablation's base
    "ppo_res": (PPOTrainConfig, _PPO_RES),
    "ppo_res_matrix": (PPOTrainConfig, _PPO_RES_SHARED),
    "ppo_res_realistic": (
        PPOTrainConfig,
        {
            **_PPO_RES,
            "env_kwargs": "the realistic plant preset and the preview (docs/ppo.md)",
            "core": "pid on that plant's defaults: INDI, lag-tuned gains, predictor",
            "env_threads": "one rollout thread: trained beside other work",
        },
    ),
    "ppo_res_rate": (
        PPOTrainConfig,
        {
            "controller": "the rate mode on geo shipped before (the ablation's base)",
            "tracker": "geo, ppo_res's default (filled in at load)",
            "accel_scale": "a 10 m/s² bound (extra needs 7.7 on z)",
            "correction_rate": "rate mode: the action steers the correction's rate",
            "total_steps": "3 M: the ablation's budget",
            "action_magnitude": "a cost on the rate",
            "features": "the held correction (action history 1)",
            "normalize_obs": "off: fixed feature scales",
            "ppo": "smaller updates, a fixed exploration scale",
        },
    ),
    "tune_matrix": (
        TuneConfig,
        {
            "scenarios": "24 flights a trial: the worst quarter is six of them",
            "episode_s": "20 s: the matrix's episode length",
            "payload_kg": "to 0.6 kg, the RL rows' training range (extra, 0.75 kg, held out)",
            "aggregate": "cvar: gains that fail a few flights score low",
        },
    ),
    "tune_lag": (
        TuneConfig,
        {
            "scenarios": "24 flights a trial: the worst quarter is six of them",
            "episode_s": "20 s: the matrix's episode length",
            "payload_kg": "to 0.6 kg, the RL rows' training range (extra, 0.75 kg, held out)",
            "aggregate": "cvar: gains that fail a few flights score low",
            "env": "the realistic plant: the gains are for lagging rotors",
            "space": "the inner loop's five gains only: the shared behind-lag attitude set",
        },
    ),
    "ppo_acc": (
        PPOTrainConfig,
        {
            "controller": "the learned outer loop (docs/ppo.md)",
            "tracker": "feedforward: no feedback gain, the policy is the loop",
            "accel_scale": "a 10 m/s² bound: pid's PD at 0.5 m of error",
            "total_steps": "7 M decisions at 100 Hz: 5 M, then the polish",
            "action_repeat": "1: the trackers' decision rate",
            "payloads": "a payload-mass grid to 0.6 kg (extra, 0.75 kg, still held out)",
            "trajectories": "the randomized families, Lissajous and spline included",
            "trajectory_draw": "randomized: off the matrix",
            "reward": "the precision reward",
            "precision": "tolerances 1.0/0.1/0.01 m, annealed; smoothness 0.1",
            "env_kwargs": "the 10-point reference preview",
            "features": "preview, the last 4 actions and the error integral",
            "eval_freq": "0: no selection on matrix conditions",
            "checkpoint_freq": "every 0.5 M steps",
            "ppo": "ppo_res's update size, a fixed gSDE exploration scale, the rate down to 3e-5, "
            "then a 2 M polish to 3e-6",
        },
    ),
    "sac_acc": (
        PPOTrainConfig,
        {
            "controller": "ppo_acc, learned off-policy (docs/ppo.md, the L2F-style try)",
            "algo": "SAC",
            "offpolicy": "L2F's sizes: 64×64 networks, a replay ratio of 0.1",
            "normalize_reward": "off: a fixed reward scale for the replay",
            "tracker": "ppo_acc's",
            "accel_scale": "ppo_acc's",
            "total_steps": "2 M decisions",
            "action_repeat": "ppo_acc's",
            "payloads": "ppo_acc's",
            "trajectories": "ppo_acc's",
            "trajectory_draw": "ppo_acc's",
            "reward": "ppo_acc's",
            "precision": "ppo_acc's tolerances; smoothness 1.0, ppo_acc's when this try ran",
            "env_kwargs": "ppo_acc's",
            "features": "ppo_acc's",
            "eval_freq": "every 250 k steps: the learning curve against wall time",
            "checkpoint_freq": "every 250 k steps",
        },
    ),
    "ppo_realistic": (
        PPOTrainConfig,
        {
            "env_kwargs": "the realistic plant preset (docs/ppo.md)",
            "env_threads": "1: trained beside other work",
            "features": "the last 4 actions (memory for the latency and the lag)",
        },
    ),
    "ppo_adapt": (
        PPOTrainConfig,
        {
            **_PPO_ROTOR,
            "controller": "ppo that also sees geo_rls's residual estimate (docs/ppo.md)",
            "features": "ppo's inputs and the estimate",
        },
    ),
    **{
        algo: (
            PPOTrainConfig,
            {
                "algo": f"the off-policy learner ({algo}, docs/ppo.md)",
                "n_envs": "64: the off-policy learner's cost grows with the gradient steps",
                "total_steps": "2 M",
                "normalize_reward": "off: a fixed reward scale for the replay",
            },
        )
        for algo in ("sac", "tqc")
    },
    "residual": (ResidualConfig, {}),
    "adaptive": (
        ResidualConfig,
        {
            "rls": "EFRA covariance management (geo_rls_dob, docs/adaptive.md)",
            "ood": "the out-of-distribution guard on",
        },
    ),
}


def test_every_shipped_yaml_is_listed():
    assert {p.stem for p in CONFIG_DIR.glob("*.yaml")} == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_yaml_equals_defaults_but_documented_keys(name):
    cls, documented = SHIPPED[name]
    loaded = configs.to_dict(configs.load(cls, name))
    defaults = configs.to_dict(cls())
    assert set(loaded) == set(defaults)
    differ = {k for k in loaded if loaded[k] != defaults[k]}
    assert differ == set(documented)


@pytest.mark.parametrize("path", sorted(STICK_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_stick_scenarios_load_strictly(path):
    # scenario files are data (every scenario differs); they must load and name themselves
    scn = configs.load(Scenario, path)
    assert scn.name and scn.levels


def test_unknown_keys_and_wrong_types_are_errors():
    with pytest.raises(ValueError, match="valid keys"):
        configs.load(SweepConfig, {"seedz": [0]})
    with pytest.raises(ValueError, match="expected a number"):
        configs.load(SweepConfig, {"episode_s": "long"})
    with pytest.raises(FileNotFoundError, match="shipped: "):
        configs.load(SweepConfig, "/no/such/file.yaml")


def test_the_realistic_ppo_res_is_the_shipped_one_on_that_plant_over_its_defaults():
    """``ppo_res_realistic`` cannot drift from ``ppo_res``: it differs only by the plant, by its
    tracker's defaults (that plant's: ``core: plant``), by the rollout threads it was trained
    with and by the zero-error anchor, which it was not retrained with. The shipped ``ppo_res``
    is ``ppo_res_matrix`` (its settings before the preview) with the preview, the trajectories
    off the matrix and the anchor, nothing else."""
    base = configs.to_dict(configs.load(PPOTrainConfig, "ppo_res_matrix"))
    real = configs.to_dict(configs.load(PPOTrainConfig, "ppo_res_realistic"))
    shipped = configs.to_dict(configs.load(PPOTrainConfig, "ppo_res"))
    assert real.pop("env_kwargs") == {"preset": "realistic", **shipped["env_kwargs"]}
    assert (real.pop("core"), shipped["core"]) == ("plant", "ideal")
    assert (real.pop("env_threads"), shipped["env_threads"]) == (1, None)
    assert real.pop("ppo") == {**shipped["ppo"], "anchored": False}
    assert real == {
        k: v for k, v in shipped.items() if k not in ("env_kwargs", "core", "env_threads", "ppo")
    }
    changed = sorted(k for k in shipped if shipped[k] != base[k])
    assert changed == ["env_kwargs", "features", "ppo", "trajectories", "trajectory_draw"]
    assert shipped["ppo"] == {**base["ppo"], "anchored": True}
    assert shipped["env_kwargs"] == {"preview": [10, 0.06]}
    assert shipped["features"] == {**base["features"], "preview_k": 10}
    assert shipped["trajectory_draw"] == "randomized" and base["trajectory_draw"] == "fixed"


def test_the_20_seed_realistic_matrix_is_the_realistic_one_with_20_seeds():
    """The pipeline's beyond-the-source matrix cannot drift from ``sweep_realistic``."""
    short = configs.to_dict(configs.load(SweepConfig, "sweep_realistic"))
    long = configs.to_dict(configs.load(SweepConfig, "sweep_realistic_20"))
    assert long.pop("seeds") == list(range(20))
    assert short.pop("seeds") == [0, 1, 2]
    assert long == short
