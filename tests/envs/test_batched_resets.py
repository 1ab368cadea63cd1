"""A batched reset (:func:`begin_resets` + :func:`finish_resets`) against the envs' own resets,
one by one: every observation, info entry, MuJoCo state, wind block and generator equal, bit
for bit, and the flights after it too."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad.envs.disturbances import WindModel, WindProcess, refill_blocks
from residual_quad.envs.resets import begin_resets, finish_resets
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.trajectories import Reference
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS

#: Every part of a reset that differs between envs: each wind kind (calm, Gauss–Markov at two
#: decays, Dryden), payload events, rotor lag and latency, noise and bias, a preview, options.
CONFIGS = [
    {"wind": "windy", "payload": "heavy", "trajectory": "figure8"},
    {"wind": "breezy", "trajectory": "helix", "pos_noise": 0.01, "imu_noise": 0.2},
    {"wind": "calm", "payload": "extra"},
    {"wind": "windy", "turbulence": "moderate", "trajectory": "helix"},
    {"wind": (2.0, 1.0), "wind_tau": 0.3, "payload": 0.3},
    {"preset": "realistic", "wind": "windy", "payload": "light", "trajectory": "figure8"},
    {"wind": "windy", "events": [{"kind": "payload", "t_s": 0.05, "mass_kg": 0.5}]},
    {"wind": "breezy", "trajectory": "figure8", "preview": (3, 0.1)},
]
OPTIONS = [
    None,
    {"position_offset": [0.2, -0.1, 0.05]},
    None,
    {"yaw_offset": 0.4, "velocity": [0.5, 0.0, -0.2]},
    None,
    None,
    {"position_offset": [0.0, 0.0, -0.8]},  # in the ground-effect band
    None,
]


def _state(env: ResidualQuadEnv) -> dict[str, object]:
    plant = env.plant
    physics = np.empty(mujoco.mj_stateSize(plant.model, FULL))
    mujoco.mj_getState(plant.model, plant.data, physics, FULL)
    proc = plant.wind_process
    return {
        "physics": physics,
        "qacc": plant.data.qacc.copy(),
        "wind": plant.wind.copy(),
        "wind_block": proc.block.copy(),
        "wind_position": proc.position,
        "ground_gain": plant.ground_gain,
        "bias": env.sensors.bias.copy(),
        "generator": env.np_random.bit_generator.state,
        "true_obs": env.last_true_observation,
        "payload_kg": plant.payload_kg,
    }


def _assert_same(a: object, b: object, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=True), where
    else:
        assert a == b, where


def _flight(env: ResidualQuadEnv, steps: int = 30) -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(rng.uniform(-0.4, 0.4, 4))
        out.append((obs, reward))
        if terminated or truncated:
            break
    return out


def _batched(envs, seeds, options):
    begin_resets(envs, seeds, options)
    return finish_resets(envs)


@pytest.mark.parametrize("again", [False, True], ids=["first reset", "reset after a flight"])
def test_batched_reset_equals_single_resets(again):
    """Two copies of eight different envs: one reset env by env, the other as one batch (and
    a second time after a flight, generators continuing)."""
    alone = [ResidualQuadEnv(**c) for c in CONFIGS]
    batch = [ResidualQuadEnv(**c) for c in CONFIGS]
    seeds = list(range(3, 3 + len(CONFIGS)))
    if again:
        for env, seed, options in zip(alone, seeds, OPTIONS, strict=True):
            env.reset(seed=seed, options=options)
            _flight(env)
        _batched(batch, seeds, OPTIONS)
        for env in batch:
            _flight(env)
        seeds = [None] * len(CONFIGS)
    expected = [
        env.reset(seed=seed, options=options)
        for env, seed, options in zip(alone, seeds, OPTIONS, strict=True)
    ]
    sensed, infos = _batched(batch, seeds, OPTIONS)
    for k, (env_a, env_b) in enumerate(zip(alone, batch, strict=True)):
        obs, info = expected[k]
        base = obs[: sensed.shape[1]]  # the single reset appends a preview
        assert np.array_equal(base, sensed[k]), k
        _assert_same(info, infos[k], f"env {k} info")
        _assert_same(_state(env_a), _state(env_b), f"env {k}")
        if env_b.preview is not None:  # the caller's part: the preview of step 0
            ahead = env_b.preview.single(env_b.trajectory, 0)
            assert np.array_equal(obs, np.concatenate((sensed[k], ahead)))
        flown_a, flown_b = _flight(env_a), _flight(env_b)
        assert len(flown_a) == len(flown_b)
        for (oa, ra), (ob, rb) in zip(flown_a, flown_b, strict=True):
            assert np.array_equal(oa, ob) and ra == rb, k


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(0, len(CONFIGS) - 1), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_any_batch_of_envs_resets_as_its_envs_alone(picks, seed):
    """Any mix of envs (repeated configurations included) and seeds: the batch equals the
    envs' resets one by one."""
    alone = [ResidualQuadEnv(**CONFIGS[p]) for p in picks]
    batch = [ResidualQuadEnv(**CONFIGS[p]) for p in picks]
    seeds = [seed + k for k in range(len(picks))]
    options = [OPTIONS[p] for p in picks]
    for env, s, o in zip(alone, seeds, options, strict=True):
        env.reset(seed=s, options=o)
    _batched(batch, seeds, options)
    for k, (env_a, env_b) in enumerate(zip(alone, batch, strict=True)):
        _assert_same(_state(env_a), _state(env_b), f"env {k}")


@settings(max_examples=30, deadline=None)
@given(
    taus=st.lists(st.sampled_from([0.05, 0.3, 2.0, 1e4]), min_size=1, max_size=5),
    dt=st.sampled_from([0.002, 0.01, 50.0]),
    seed=st.integers(0, 2**32),
)
def test_wind_blocks_drawn_together_equal_blocks_drawn_alone(taus, dt, seed):
    """Processes of mixed decays (a long step makes ``a^n`` underflow: the recursion) refilled
    as one batch hand out the samples each hands out alone, over several refills."""
    models = [WindModel(mean=1.0, sigma=0.7, tau=tau) for tau in taus]
    alone = [WindProcess(m, dt, np.random.default_rng(seed + k)) for k, m in enumerate(models)]
    batch = [WindProcess(m, dt, np.random.default_rng(seed + k)) for k, m in enumerate(models)]
    refill_blocks(batch)
    for a, b in zip(alone, batch, strict=True):
        for _ in range(3 * max(len(b.block), 1)):
            assert np.array_equal(a.sample(), b.sample())


class _BrokenAtStart:
    """A trajectory whose first reference is not finite."""

    def __call__(self, t: float) -> Reference:
        return Reference(np.array([np.nan, 0.0, 1.0]), np.zeros(3), np.zeros(3), 0.0, 0.0)


def test_a_bad_first_reference_in_a_batch_names_its_env():
    """The vector env's batched reset names the env whose trajectory fails, with the single
    env's words for it; the other envs are not reset (their generators untouched)."""
    scenarios = [{"trajectory": "hover"}, {"trajectory": "helix"}, {"trajectory": "hover"}]
    vec = ResidualQuadVectorEnv(3, scenarios=scenarios, nthread=1)
    vec.envs[1].trajectory = _BrokenAtStart()
    states = [env.np_random.bit_generator.state for env in vec.envs]
    with pytest.raises(ValueError, match=r"^env 1: trajectory _BrokenAtStart at t = 0 s"):
        vec.reset(seed=0)
    for env, state in zip(vec.envs, states, strict=True):
        assert env.np_random.bit_generator.state == state
    with pytest.raises(ValueError, match="trajectory _BrokenAtStart at t = 0 s"):
        ResidualQuadEnv(trajectory=_BrokenAtStart()).reset(seed=0)


def test_a_batch_takes_each_env_once():
    env = ResidualQuadEnv()
    with pytest.raises(ValueError, match="distinct envs"):
        begin_resets([env, env], [0, 1], [None, None])
