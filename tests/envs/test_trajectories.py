"""Trajectory derivatives against finite differences; user trajectories plug in."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.envs.trajectories import (
    TRAJECTORIES,
    Figure8,
    Helix,
    Reference,
    Trajectory,
    make_trajectory,
)
from residual_quad.episode import run_episode


@pytest.mark.parametrize("name", list(TRAJECTORIES))
def test_derivatives_match_finite_differences(name):
    traj = make_trajectory(name)
    h = 1e-5
    for t in np.linspace(0.0, 20.0, 41):
        r, rp, rm = traj(t), traj(t + h), traj(t - h)
        assert (rp.pos - rm.pos) / (2 * h) == pytest.approx(r.vel, abs=1e-6)
        assert (rp.vel - rm.vel) / (2 * h) == pytest.approx(r.acc, abs=1e-6)
        assert (rp.yaw - rm.yaw) / (2 * h) == pytest.approx(r.yaw_rate, abs=1e-6)


def test_res_section_8_parameters():
    """Helix and figure-8 as specified in [RES §8]."""
    h = Helix()
    assert h(0.0).pos == pytest.approx([2.0, 0.0, 1.5])
    assert h(16.0).pos == pytest.approx([2.0, 0.0, 3.5])  # two turns of 8 s: 1.5 → 3.5 m
    assert h(0.0).yaw == pytest.approx(math.pi / 2)
    f = Figure8()
    xs = np.array([f(t).pos for t in np.linspace(0, 12, 1201)])
    assert xs[:, 0].max() == pytest.approx(2.5, abs=1e-3)
    assert xs[:, 1].max() == pytest.approx(0.7, abs=1e-3)
    assert f(12.0).pos == pytest.approx(f(0.0).pos)  # 12 s period
    speeds = [np.linalg.norm(f(t).vel) for t in np.linspace(0, 12, 1201)]
    assert np.argmax(speeds) in (0, 600, 1200)  # fastest through the origin


def test_unknown_trajectory_lists_choices():
    with pytest.raises(ValueError, match="hover, helix, figure8"):
        make_trajectory("spiral")
    with pytest.raises(ValueError, match="Trajectory instance"):
        make_trajectory(42)


class Line(Trajectory):
    """Constant-velocity line at 1.5 m, 0.3 m/s along x."""

    def __call__(self, t: float) -> Reference:
        return Reference(np.array([0.3 * t, 0.0, 1.5]), np.array([0.3, 0.0, 0.0]), np.zeros(3), 0.0)


def test_user_trajectory_object_is_flown():
    result = run_episode("geo", trajectory=Line(), episode_s=6.0)
    assert not result.diverged
    assert result.rmse < 0.02
    assert result.pos[-1, 0] == pytest.approx(1.8, abs=0.05)
