"""``--turbulence`` of ``rquad eval``: Dryden gusts reach the flight; a bad level lists the valid
ones; ``rquad sweep`` takes the same option in its YAML ``env``."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_main

from residual_quad import configs
from residual_quad.envs.turbulence import DRYDEN_LEVELS
from residual_quad.episode import run_episode
from residual_quad.evaluation.sweep import SweepConfig

ARGV = ["eval", "--controller", "pid", "--wind", "breezy", "--episode-s", "4", "--json"]


def test_eval_turbulence_flies_the_dryden_gusts(capsys):
    res = run_main([*ARGV, "--turbulence", "moderate"], capsys)
    assert res.rc == 0, res.err
    got = json.loads(res.out)
    want = run_episode("pid", wind="breezy", episode_s=4.0, turbulence="moderate")
    plain = run_episode("pid", wind="breezy", episode_s=4.0)
    assert got["control_cost"] == want.control_cost != plain.control_cost


def test_bad_turbulence_is_the_one_line_error_listing_the_levels(capsys):
    res = run_main(["eval", "--turbulence", "storm"], capsys)
    assert res.rc == 2 and len(res.err.strip().splitlines()) == 1
    assert all(level in res.err for level in DRYDEN_LEVELS)


def test_gif_refuses_turbulence_it_would_not_show(capsys, tmp_path):
    res = run_main(["eval", "--turbulence", "light", "--gif", str(tmp_path / "f.gif")], capsys)
    assert res.rc == 2 and "--turbulence light" in res.err


def test_sweep_yaml_takes_turbulence_in_env_and_names_a_bad_level(tmp_path):
    base = "controllers: [pid]\npayloads: [none]\nwinds: [breezy]\ntrajectories: [hover]\n"
    good = tmp_path / "good.yaml"
    good.write_text(base + "env: {turbulence: light}\n")
    assert configs.load(SweepConfig, good).env == {"turbulence": "light"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "env: {turbulence: storm}\n")
    with pytest.raises(ValueError, match="light") as err:
        configs.load(SweepConfig, bad)
    assert "storm" in str(err.value)
