"""A stress config is checked at load as a sweep config is: an episode length the env refuses (the
config's or a scenario's), a seed the env refuses, an empty seed list or a bad controller option
is one error line, exit 2, nothing flown — not a failure of every run blamed on the controller."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from residual_quad import configs
from residual_quad.cli import main
from residual_quad.envs.residual_quad_env import MAX_EPISODE_S
from residual_quad.evaluation.studies.stress import StressConfig
from residual_quad.evaluation.sweep import SweepConfig

CONTROL_PERIOD_S = 0.01  # s, the env's default control period (100 Hz)
BASE = {"controllers": ["geo"], "seeds": [0], "episode_s": 0.5}
SCENARIO = {"name": "s1", "group": "gust"}


def _stress(tmp_path: Path, capsys, **changes) -> SimpleNamespace:
    """``rquad stress`` of a one-scenario config with ``changes``: exit code and stderr."""
    path = tmp_path / "stress.yaml"
    path.write_text(yaml.safe_dump({**BASE, "scenarios": [SCENARIO], **changes}))
    out = tmp_path / "out"
    capsys.readouterr()
    rc = main(["stress", str(path), "--out", str(out), "--no-plot", "--quiet"])
    return SimpleNamespace(rc=rc, err=capsys.readouterr().err, out_dir=out)


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"scenarios": [{**SCENARIO, "episode_s": 5000.0}]}, "scenario s1: episode_s"),
        ({"scenarios": [{**SCENARIO, "episode_s": 0.001}]}, "scenario s1: episode_s (0.001 s)"),
        ({"episode_s": 5000.0}, "episode_s must be a finite real number in (0, 3600]"),
        ({"episode_s": 0.004}, "shorter than one control period"),
        ({"seeds": [-1]}, "seeds: -1 is not an integer >= 0"),
        ({"seeds": []}, "seeds: expected a non-empty list"),
        ({"controller_options": {"geo": {"bogus": 1}}}, "controller_options[geo]"),
    ],
)
def test_what_the_env_refuses_is_refused_at_load(tmp_path, capsys, changes, named):
    got = _stress(tmp_path, capsys, **changes)
    assert got.rc == 2, got.err
    (line,) = got.err.splitlines()
    assert line.startswith("rquad stress: error: ") and "stress.yaml" in line
    assert named in line
    assert not got.out_dir.exists()  # nothing flown


def test_the_bounds_are_the_env_s_as_in_a_sweep():
    scenario = {**SCENARIO, "episode_s": MAX_EPISODE_S}
    configs.load(StressConfig, {**BASE, "scenarios": [scenario]})  # the longest the env flies
    configs.load(StressConfig, {**BASE, "episode_s": CONTROL_PERIOD_S})  # the shortest
    for bad in (MAX_EPISODE_S * 1.001, CONTROL_PERIOD_S * 0.99):
        scenario = {**SCENARIO, "episode_s": bad}
        with pytest.raises(ValueError, match="episode_s") as stress:
            configs.load(StressConfig, {**BASE, "scenarios": [scenario]})
        with pytest.raises(ValueError, match="episode_s") as sweep:
            SweepConfig(controllers=["geo"], episode_s=bad, series=[])
        # the same rule, in the env's own words
        assert (
            str(stress.value).split("episode_s", 1)[1] == str(sweep.value).split("episode_s", 1)[1]
        )
