"""Lock-step remote control reproduces in-process ``run_episode`` bit for bit (the source's claim
that gains tuned in simulation behave the same over the link, as a test)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from remote_helpers import address, served

from residual_quad.envs.registration import REMOTE_ENV_ID
from residual_quad.episode import RunSpec, fly, run_episode

SERIES = ("t", "pos", "ref", "thrusts", "tilt", "residual_true", "wind")
SCENARIO = {"payload": "extra", "wind": "windy", "trajectory": "helix"}


def assert_identical(local, remote):
    for name in SERIES:
        a, b = getattr(local, name), getattr(remote, name)
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), name
    assert (local.rmse, local.max_error, local.control_cost) == (
        remote.rmse,
        remote.max_error,
        remote.control_cost,
    )
    assert (local.steps, local.termination) == (remote.steps, remote.termination)


def _both(controller, episode_s, seeds, **env):
    with served() as server:
        for seed in seeds:
            kw = {**SCENARIO, "seed": seed, "episode_s": episode_s, **env}
            local = run_episode(controller, **kw)
            remote = run_episode(controller, env_id=REMOTE_ENV_ID, address=address(server), **kw)
            assert_identical(local, remote)
            assert np.isfinite(local.rmse)


def test_geo_rls_remote_is_bit_identical_short():
    _both("geo_rls", 4.0, [0, 1, 2])


def test_fifty_hz_remote_is_bit_identical():
    _both("geo_rls", 4.0, [0], control_hz=50.0)


def test_ctbr_and_reset_options_travel():
    with served() as server:
        spec = RunSpec(
            "geo", "heavy", (1.0, 0.5), "figure8", 4, reset_options=(("yaw_offset", 0.3),)
        )
        local = fly(spec, env={"action_mode": "rotor"})
        remote = fly(spec, env={"env_id": REMOTE_ENV_ID, "address": address(server)})
        assert_identical(local, remote)


def test_a_trajectory_with_parameters_travels():
    with served() as server:
        spec = RunSpec(
            "geo", trajectory="helix", trajectory_params=(("period", 6.0),), episode_s=2.0
        )
        local = fly(spec)
        remote = fly(spec, env={"env_id": REMOTE_ENV_ID, "address": address(server)})
        assert_identical(local, remote)


def test_sb3_runs_against_the_remote_plant():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    with served(scenario={"episode_s": 0.5}) as server:
        env = gym.make(REMOTE_ENV_ID, address=address(server), action_mode="ctbr")
        try:
            model = PPO(
                "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu"
            )
            model.learn(total_timesteps=64)
            obs, _ = env.reset(seed=0)
            action, _ = model.predict(obs, deterministic=True)
            env.step(action)
        finally:
            env.close()


@pytest.mark.slow
def test_geo_rls_remote_is_bit_identical_full_episodes():
    _both("geo_rls", 20.0, [0, 1, 2])
    _both("geo_rls", 20.0, [0, 1, 2], control_hz=50.0)
