"""The episode loop under bad input and faults: a clear error before flying, or a flagged end.

``run_episode`` never raises because a flight diverged; a bad argument is a ``ValueError`` that
names it, raised before any buffer is allocated; the env is closed on every exit path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad import episode
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.episode import RunSpec, build_controller, fly, run_episode


def test_impossible_start_ends_flagged_not_as_a_clean_flight():
    """The case of the report: before, MuJoCo's silent reset made this a clean 8 s flight
    (``diverged=False``, RMSE 4 mm)."""
    result = run_episode(
        "geo", trajectory="helix", episode_s=8, reset_options={"velocity": [1e6, 0, 0]}
    )
    assert result.diverged and result.termination == "simulation_unstable"
    assert result.steps == 1 and result.rmse == math.inf


@pytest.mark.parametrize("controller", ["geo", "pid", "hnewton"])
@pytest.mark.parametrize("option", ["velocity", "position_offset", "yaw_offset"])
def test_non_finite_start_is_a_value_error_before_the_controller_sees_it(controller, option):
    value = math.nan if option == "yaw_offset" else [0.0, math.nan, 0.0]
    with pytest.raises(ValueError, match=option):
        run_episode(controller, reset_options={option: value})


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"episode_s": 0.004}, "episode_s"),  # was an IndexError in the loop
        ({"episode_s": 1e9}, "episode_s"),  # was a MemoryError (745 GiB preallocated)
        ({"episode_s": math.inf}, "episode_s"),
        ({"control_hz": 0}, "control_hz"),  # was a ZeroDivisionError in run_episode
        ({"control_hz": "fast"}, "control_hz"),
        ({"frame_every": -1}, "frame_every"),
        ({"callback": 3}, "callback"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        run_episode("geo", **kwargs)


def test_growing_buffers_give_the_same_result(monkeypatch):
    """Buffers grow by doubling past their initial size: nothing changes but the memory."""
    kw = dict(payload="heavy", wind="windy", trajectory="helix", seed=3, episode_s=4.0)
    full = run_episode("geo", **kw)
    monkeypatch.setattr(episode, "_INITIAL_CAPACITY", 7)
    grown = run_episode("geo", **kw)
    assert grown.steps == full.steps == 400
    for name in ("t", "pos", "ref", "thrusts", "tilt", "residual_true", "wind"):
        assert np.array_equal(getattr(grown, name), getattr(full, name)), name
    assert (grown.rmse, grown.max_error, grown.control_cost) == (
        full.rmse,
        full.max_error,
        full.control_cost,
    )


def test_env_is_closed_when_the_flight_raises(monkeypatch):
    closed = []
    monkeypatch.setattr(ResidualQuadEnv, "close", lambda self: closed.append(self))

    class Broken:
        action_mode = "rotor"

        def reset(self, seed):
            pass

        def policy(self, obs):
            raise RuntimeError("controller bug")

    with pytest.raises(ValueError, match="velocity"):
        run_episode("geo", reset_options={"velocity": [1.0]})
    with pytest.raises(RuntimeError, match="controller bug"):
        run_episode(Broken())
    assert len(closed) == 2


@pytest.mark.parametrize(
    "spec, match",
    [
        (RunSpec("geo", trajectory="helix", trajectory_params=(("period", 0.0),)), "period"),
        (RunSpec("geo", trajectory="helix", trajectory_params=(("bogus", 1.0),)), "bogus"),
        (RunSpec("geo", trajectory="circle", trajectory_params=(("period", 6.0),)), "circle"),
        (RunSpec("geo", reset_options=(("velocity", (math.inf, 0.0, 0.0)),)), "velocity"),
        (RunSpec("geo", episode_s=0.0), "episode_s"),
    ],
)
def test_fly_names_a_bad_spec(spec, match):
    with pytest.raises(ValueError, match=match):
        fly(spec)


def test_build_controller_names_a_bad_control_rate():
    with pytest.raises(ValueError, match="control_hz"):
        build_controller("geo", {"control_hz": 0})


def test_run_episode_flies_a_users_env_like_the_keyword_form():
    """``run_episode(controller, env=...)`` flies an env the user built, through its wrappers,
    with the result of the keyword form; scenario arguments beside ``env`` are refused."""
    import gymnasium as gym

    kwargs = {"payload": "light", "wind": "windy", "trajectory": "helix", "episode_s": 4.0}
    expected = run_episode("geo", seed=3, **kwargs)
    user_env = gym.wrappers.RecordEpisodeStatistics(gym.make("ResidualQuad-v0", **kwargs))
    got = run_episode("geo", env=user_env, seed=3)
    assert got.steps == expected.steps and got.rmse == expected.rmse
    assert np.array_equal(got.pos, expected.pos) and np.array_equal(got.thrusts, expected.thrusts)
    assert user_env.episode_count == 1  # the flight went through the wrapper
    user_env.reset(seed=0)  # left open for the caller
    user_env.close()
    with pytest.raises(ValueError, match=r"\['episode_s', 'payload'\]"):
        run_episode("geo", env=ResidualQuadEnv(), payload="light", episode_s=2.0)
