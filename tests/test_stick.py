"""Planar stick robots, scenario loading and the ``rquad stick`` command."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from residual_quad.controllers.stick_robot import StickRobot
from residual_quad.evaluation import stick_cli
from residual_quad.evaluation.stick import (
    brute_force_optimum,
    load_scenario,
    resolve_scenario_path,
    scenario_from_dict,
)

EPS = 1e-6


@pytest.mark.parametrize("lengths", [[1.0, 1.0], [1.0, 0.7, 0.5], [0.3, 0.9, 0.4, 1.1, 0.6]])
def test_point_jacobian_and_hessian_match_finite_differences(lengths):
    r = StickRobot(lengths)
    rng = np.random.default_rng(len(lengths))
    q = rng.uniform(-2, 2, r.n)
    I = np.eye(r.n)
    for link in range(r.n):
        for frac in (1.0, 0.5):
            p, J, H = r.point_all(q, link, frac)
            Jn = np.stack(
                [(r.point(q + EPS * I[j], link, frac) - r.point(q - EPS * I[j], link, frac))
                 / (2 * EPS) for j in range(r.n)], axis=1)  # fmt: skip
            Hn = np.stack(
                [(r.point_jacobian(q + EPS * I[j], link, frac)
                  - r.point_jacobian(q - EPS * I[j], link, frac)) / (2 * EPS)
                 for j in range(r.n)], axis=2)  # fmt: skip
            assert np.abs(J - Jn).max() < 1e-8
            assert np.abs(H - Hn).max() < 1e-8
            assert np.allclose(H, np.swapaxes(H, 1, 2))
            np.testing.assert_allclose(p, r.point(q, link, frac))


def test_dynamics_match_lagrangian_finite_differences():
    r = StickRobot([1.0, 0.7, 0.5], masses=[2.0, 1.0, 0.5])
    q = np.array([0.3, -0.8, 1.1])
    qd = np.array([0.5, -1.0, 0.7])
    I = np.eye(3)
    M = r.mass_matrix(q)
    assert np.allclose(M, M.T) and np.all(np.linalg.eigvalsh(M) > 0)
    Md = sum((r.mass_matrix(q + EPS * I[j]) - r.mass_matrix(q - EPS * I[j])) / (2 * EPS) * qd[j]
             for j in range(3))  # fmt: skip

    def T2(x):
        return qd @ r.mass_matrix(x) @ qd

    dT = np.array([(T2(q + EPS * I[j]) - T2(q - EPS * I[j])) / (2 * EPS) for j in range(3)])

    def V(x):
        return sum(r.masses[i] * 9.81 * r.point(x, i, 0.5)[1] for i in range(3))

    dV = np.array([(V(q + EPS * I[j]) - V(q - EPS * I[j])) / (2 * EPS) for j in range(3)])
    np.testing.assert_allclose(r.bias(q, qd), Md @ qd - 0.5 * dT + dV, atol=1e-7)
    tau = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(M @ r.forward_dynamics(q, qd, tau) + r.bias(q, qd), tau)


def test_issue_yaml_schema_loads_and_unknown_keys_fail():
    data = {
        "name": "s2", "links": [1.0, 1.0], "q0": [0.2, 1.2], "dt": 0.01, "duration": 5.0,
        "kp": 10.0, "vmax": 10.0, "lm_mu": 0.3,
        "levels": [[{"task": "point", "link": 2, "target": [2.5, 0.5]}]],
    }  # fmt: skip
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
        assert resolve_scenario_path(name).exists()
        assert load_scenario(name).name == name
    assert load_scenario("s4").dynamic
    with pytest.raises(FileNotFoundError):
        resolve_scenario_path("nope")


def test_brute_force_optimum_known_values():
    s2 = load_scenario("s2")
    assert brute_force_optimum(s2)[0] == pytest.approx(np.hypot(2.5, 0.5) - 2.0, abs=1e-8)
    s3 = brute_force_optimum(load_scenario("s3"))
    assert s3[0] < 1e-8
    # level-2 optimum: elbow at distance 2 from the base (stretched) while the tip stays on A
    assert s3[1] == pytest.approx(1.63669, abs=1e-5)


def test_cli_writes_json(tmp_path):
    parser = argparse.ArgumentParser()
    stick_cli.register(parser.add_subparsers())
    out = tmp_path / "s2.json"
    args = parser.parse_args(["stick", "s2", "--methods", "newton", "--json", str(out),
                              "--plot", str(tmp_path)])  # fmt: skip
    assert args.func(args) == 0
    rep = json.loads(out.read_text())
    m = rep["methods"]["newton"]
    for key in ("final_error", "optimum", "gap", "total_variation", "max_abs_qdot",
                "converge_time", "higher_level_violated"):  # fmt: skip
        assert key in m
    assert m["gap"][0] < 1e-3
    assert (tmp_path / "s2_errors.png").stat().st_size > 0
    bad = parser.parse_args(["stick", "s2", "--methods", "gn,foo"])
    with pytest.raises(ValueError, match="unknown method"):
        bad.func(bad)
