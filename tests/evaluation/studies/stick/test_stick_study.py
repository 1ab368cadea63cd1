"""Stick-robot study: scenarios, brute-force optima and the Newton variants on S1-S4
([HN sec. VI-A]; docs/hnewton.md)."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.evaluation.studies.stick.study import (
    brute_force_optimum,
    load_scenario,
    run_acceleration_pd,
    run_method,
    scenario_from_dict,
    scenario_path,
)


@pytest.fixture(scope="module")
def s2():
    scn = load_scenario("s2")
    opt = brute_force_optimum(scn)
    runs = {m: run_method(scn, m) for m in ("gn", "bfgs", "newton")}
    return scn, opt, {m: r.metrics(opt, scn.dt) for m, r in runs.items()}


@pytest.fixture(scope="module")
def s3():
    scn = load_scenario("s3")
    opt = brute_force_optimum(scn)
    runs = {m: run_method(scn, m) for m in ("gn", "newton")}
    return scn, opt, runs


def test_s2_newton_and_bfgs_reach_optimum_gn_chatters(s2):
    _, _, met = s2
    for m in ("newton", "bfgs"):
        assert met[m]["gap"][0] < 1e-3
        assert met[m]["converge_time"] is not None
    assert met["gn"]["total_variation"] >= 50 * met["newton"]["total_variation"]
    assert met["gn"]["converge_time"] is None


def test_s3_newton_keeps_level1_and_reaches_level2(s3):
    scn, opt, runs = s3
    newton = runs["newton"]
    assert newton.errors[-1, 0] < 1e-8
    assert newton.errors[-1, 1] - opt[1] < 1e-3
    gn = runs["gn"].metrics(opt, scn.dt)
    chatters = gn["total_variation"] >= 50 * newton.metrics(opt, scn.dt)["total_variation"]
    assert gn["higher_level_violated"] or chatters


def test_s3_augmentation_without_switch_freezes_level2(s3):
    scn, opt, _ = s3
    # exact (numpy) HLSP: with R_1 always on, level 1 uses every degree of freedom
    frozen = run_method(scn, "newton", switch="always", backend="numpy")
    assert frozen.errors[-1, 0] < 1e-6
    assert frozen.errors[-1, 1] > opt[1] + 0.1  # docs/hnewton.md: 1.903 vs 1.637


def test_s1_velocity_pd_agrees_with_acceleration_pd():
    scn = load_scenario("s1")
    acc = run_acceleration_pd(scn)
    vel = run_method(scn, "newton").errors[:, 0]
    gap = np.abs(acc - vel).max()
    assert gap <= 0.05  # documented in docs/hnewton.md
    assert vel[-1] < 1e-3 and acc[-1] < 1e-3


def test_s4_dynamic_respects_torque_limits_and_converges():
    scn = load_scenario("s4_dynamic")
    opt = brute_force_optimum(scn)
    run = run_method(scn, "newton")
    assert np.abs(run.tau).max() <= scn.tau_max + 1e-6
    assert np.abs(run.tau).max() >= scn.tau_max - 1e-6  # the limit binds during the swing
    assert run.errors[-1, 0] - opt[0] < 1e-3


def test_yaml_schema_loads_and_unknown_keys_fail():
    data = {
        "name": "s2",
        "links": [1.0, 1.0],
        "q0": [0.2, 1.2],
        "dt": 0.01,
        "duration": 5.0,
        "kp": 10.0,
        "vmax": 10.0,
        "lm_mu": 0.3,
        "levels": [[{"task": "point", "link": 2, "target": [2.5, 0.5]}]],
    }
    scn = scenario_from_dict(data)
    assert scn.levels[0][0].link == 2 and scn.vmax == 10.0
    with pytest.raises(ValueError, match="unknown key"):
        scenario_from_dict({**data, "kpp": 3.0})
    bad_task = {**data, "levels": [[{"task": "point", "link": 2, "target": [1, 1], "lnk": 1}]]}
    with pytest.raises(ValueError, match="unknown key"):
        scenario_from_dict(bad_task)
    with pytest.raises(ValueError, match="link"):
        scenario_from_dict({**data, "levels": [[{"task": "point", "link": 3, "target": [1, 1]}]]})


def test_shipped_scenarios_resolve_by_name():
    for name in ("s1", "s2", "s3", "s4_dynamic"):
        assert scenario_path(name).exists()
        assert load_scenario(name).name == name
    assert load_scenario("s4").dynamic
    with pytest.raises(FileNotFoundError):
        scenario_path("nope")


def test_brute_force_optimum_known_values():
    s2 = load_scenario("s2")
    assert brute_force_optimum(s2)[0] == pytest.approx(np.hypot(2.5, 0.5) - 2.0, abs=1e-8)
    s3 = brute_force_optimum(load_scenario("s3"))
    assert s3[0] < 1e-8
    # level-2 optimum: elbow at distance 2 from the base (stretched) while the tip stays on A
    assert s3[1] == pytest.approx(1.63669, abs=1e-5)
