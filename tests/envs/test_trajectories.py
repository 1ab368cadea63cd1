"""Trajectory derivatives against finite differences; user trajectories plug in."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def test_lissajous_closes_once_per_period_and_spans_its_amplitudes():
    from residual_quad.envs.trajectories import Lissajous

    traj = Lissajous(a=2.0, b=1.5, c=0.3, period=10.0)
    assert traj(10.0).pos == pytest.approx(traj(0.0).pos, abs=1e-12)
    assert traj(10.0).vel == pytest.approx(traj(0.0).vel, abs=1e-12)
    xs = np.array([traj(t).pos for t in np.linspace(0.0, 10.0, 2001)])
    assert np.ptp(xs, axis=0) == pytest.approx([4.0, 3.0, 0.6], abs=1e-3)


def test_a_spline_is_seeded_closed_and_stays_in_its_box():
    from residual_quad.envs.trajectories import Spline

    a, b = Spline(seed=7), Spline(seed=7)
    ts = np.linspace(0.0, 40.0, 801)
    assert all(np.array_equal(a(t).pos, b(t).pos) for t in ts)  # the same seed, the same path
    assert not np.allclose(Spline(seed=8)(3.0).pos, a(3.0).pos)
    for t in (0.0, 5.0):  # periodic to the acceleration
        for field in ("pos", "vel", "acc"):
            assert getattr(a(t + a.period), field) == pytest.approx(getattr(a(t), field), abs=1e-9)
    pos = np.array([a(t).pos for t in ts])
    # a quintic overshoots its waypoints a little, never far
    assert np.all(np.abs(pos[:, :2]) <= 1.5 * a.size)
    assert np.all(np.abs(pos[:, 2] - a.z) <= 1.5 * a.height + 1e-9)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"seed": -1}, "seed"),
        ({"waypoints": 2}, "waypoints"),
        ({"waypoints": 3.5}, "waypoints"),
        ({"period": 0.0}, "period"),
        ({"size": float("nan")}, "size"),
        ({"size": 1.7e308}, "size"),
        ({"z": -1e5}, "z"),
    ],
)
def test_bad_spline_parameters_are_named(params, message):
    from residual_quad.envs.trajectories import make_named_trajectory

    with pytest.raises(ValueError, match=message):
        make_named_trajectory("spline", **params)


@pytest.mark.parametrize("name", ["lissajous", "spline"])
def test_the_training_families_fly_in_the_single_and_the_vector_env(name):
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    result = run_episode("geo", trajectory=name, seed=0, episode_s=4.0)
    assert not result.diverged and result.rmse < 0.3
    venv = ResidualQuadVectorEnv(2, scenarios=[{"trajectory": name}] * 2, episode_s=1.0)
    obs, _ = venv.reset(seed=[0, 1])
    assert np.all(np.isfinite(obs))
    venv.close()


@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-(10**6), 10**6).map(lambda k: k * math.pi),  # near or on a tie
            st.integers(-(10**6), 10**6).map(lambda k: (k + 0.5) * 2.0 * math.pi),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_the_headings_wrapped_as_arrays_are_the_float_path_s_bits(values):
    """``wrap_headings`` (the tables' array path) is ``math.remainder(yaw, 2π)`` of each element,
    bit for bit, ties and non-finite headings (the float path's NaN) included."""
    from residual_quad.envs.trajectories import _wrapped, wrap_headings

    yaw = np.array(values, dtype=float)
    got = wrap_headings(yaw)
    want = np.array([_wrapped(v) for v in yaw.tolist()])
    assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
