"""The vector env against the single env: same seeds and scenarios, same observations."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.vector_env import MAX_NUM_ENVS, SCENARIO_KEYS, ResidualQuadVectorEnv

MIXED = [
    {"payload": "none", "wind": "windy", "trajectory": "helix"},
    {"payload": "extra", "wind": "breezy", "trajectory": "figure8"},
    # starts in the contact band and sinks onto the floor: the per-env plant path, a crash
    {
        "payload": "heavy",
        "trajectory": "hover",
        "options": {"position_offset": [0, 0, -1.1], "velocity": [0, 0, -3.0]},
    },
    {"payload": 0.3, "wind": (2.0, 1.0), "trajectory": "hover"},
    # a start at 1e6 m/s: MuJoCo's instability, flagged as simulation_unstable
    {"payload": "light", "options": {"velocity": [1e6, 0.0, 0.0]}},
]


def _single(scenario, **kwargs):
    return ResidualQuadEnv(**{k: v for k, v in scenario.items() if k != "options"}, **kwargs)


def _fly_both(scenarios, seed, steps, actions, **kwargs):
    """Step the vector env and one single env per scenario with the same actions; yields the
    vector results and the single envs' results per step (NEXT_STEP autoreset mirrored)."""
    n = len(scenarios)
    vec = ResidualQuadVectorEnv(n, scenarios=scenarios, nthread=1, **kwargs)
    singles = [_single(s, **kwargs) for s in scenarios]
    obs, _ = vec.reset(seed=seed)
    ref = [
        e.reset(seed=seed + i, options=scenarios[i].get("options"))[0]
        for i, e in enumerate(singles)
    ]
    yield obs, None, None, None, None, np.array(ref), None
    done = [False] * n
    for t in range(steps):
        out = vec.step(actions[t])
        expect = []
        for i, env in enumerate(singles):
            if done[i]:
                o, _ = env.reset(options=scenarios[i].get("options"))
                expect.append((o, 0.0, False, False, None))
                done[i] = False
            else:
                o, r, te, tr, info = env.step(actions[t][i])
                done[i] = te or tr
                expect.append((o, r, te, tr, info["termination"]))
        yield (*out, expect, None)


def test_vector_env_equals_single_envs_across_autoreset():
    """Mixed payloads, winds, trajectories, a ground crash, a diverging start and truncations:
    observations equal to 1e-9, rewards to 1e-12, flags and reasons exactly."""
    rng = np.random.default_rng(3)
    steps = 90
    actions = rng.uniform(-0.45, -0.15, (steps, len(MIXED), 4))
    actions[:, 2] = -1.0  # rotors off: env 2 drops onto the floor
    reasons = set()
    for k, res in enumerate(_fly_both(MIXED, 11, steps, actions, episode_s=0.4)):
        if k == 0:
            obs, ref = res[0], res[5]
            np.testing.assert_allclose(obs, ref, rtol=0, atol=1e-9)
            continue
        obs, rew, term, trunc, info, expect = res[:6]
        for i, (o, r, te, tr, why) in enumerate(expect):
            np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-9, err_msg=f"step {k} env {i}")
            assert abs(rew[i] - r) <= 1e-12
            assert (term[i], trunc[i]) == (te, tr), (k, i)
            if why is not None or te:
                assert info["termination"][i] == why
                reasons.add(why)
    assert {"ground_contact", "simulation_unstable"} <= reasons


def test_vector_env_is_deterministic_and_seeds_each_env():
    kwargs = {"scenarios": MIXED[:2], "nthread": 1}
    a = ResidualQuadVectorEnv(2, **kwargs)
    b = ResidualQuadVectorEnv(2, **kwargs)
    act = np.full((2, 4), -0.2)
    oa, _ = a.reset(seed=5)
    ob, _ = b.reset(seed=5)
    for _ in range(20):
        oa = a.step(act)[0]
        ob = b.step(act)[0]
    assert np.array_equal(oa, ob)
    oc, _ = b.reset(seed=6)
    od, _ = a.reset(seed=5)
    assert not np.array_equal(oc[:, :3], od[:, :3]) or not np.array_equal(
        a.step(act)[0], b.step(act)[0]
    )


def test_vector_env_info_has_arrays_and_masks():
    env = ResidualQuadVectorEnv(3, payload="heavy", nthread=1)
    _, info = env.reset(seed=0)
    assert info["payload_kg"].tolist() == [0.5] * 3 and info["_payload_kg"].all()
    _, _, _, _, info = env.step(np.zeros((3, 4)))
    assert info["residual_accel"].shape == (3, 3) and info["_residual_accel"].all()
    assert info["reward_terms"]["pos"].shape == (3,) and info["_reward_terms"].all()
    assert env.metadata["autoreset_mode"].value == "NextStep"


def test_vector_env_rejects_bad_actions_naming_the_env():
    env = ResidualQuadVectorEnv(3, nthread=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        env.step(np.zeros((2, 4)))
    for bad in (np.nan, np.inf, -np.inf):
        act = np.zeros((3, 4))
        act[2, 1] = bad
        with pytest.raises(ValueError, match="env 2"):
            env.step(act)
    with pytest.raises(ValueError, match="real numbers"):
        env.step(np.full((3, 4), "a"))


def test_vector_env_rejects_bad_scenarios_listing_choices():
    with pytest.raises(ValueError, match="one per env"):
        ResidualQuadVectorEnv(3, scenarios=[{}, {}])
    with pytest.raises(ValueError, match="env 1.*" + ", ".join(SCENARIO_KEYS)):
        ResidualQuadVectorEnv(2, scenarios=[{}, {"paylod": "none"}])
    with pytest.raises(ValueError, match="env 1: unknown payload 'huge'; valid choices: none"):
        ResidualQuadVectorEnv(2, scenarios=[{}, {"payload": "huge"}])
    with pytest.raises(ValueError, match="env 0: unknown wind"):
        ResidualQuadVectorEnv(2, scenarios={"wind": "storm"})


def test_vector_env_diverging_env_autoresets_alone():
    """A diverging env ends with the flag, resets next step; the others fly on unchanged."""
    scen = [{}, {"options": {"velocity": [1e6, 0.0, 0.0]}}, {"wind": "windy"}]
    env = ResidualQuadVectorEnv(3, scenarios=scen, nthread=1)
    calm = ResidualQuadVectorEnv(3, scenarios=[scen[0], {}, scen[2]], nthread=1)
    env.reset(seed=1)
    calm.reset(seed=1)
    act = np.zeros((3, 4))
    o, _, term, _, info = env.step(act)
    oc = calm.step(act)[0]
    assert term.tolist() == [False, True, False]
    assert info["diverged"][1] and info["termination"][1] == "simulation_unstable"
    o2, r2, term2, _, info2 = env.step(act)
    assert r2[1] == 0.0 and not term2[1] and info2["t"][1] == 0.0  # reset observation
    oc2 = calm.step(act)[0]
    np.testing.assert_array_equal(o[[0, 2]], oc[[0, 2]])
    np.testing.assert_array_equal(o2[[0, 2]], oc2[[0, 2]])


def test_vector_env_sampler_draws_scenarios_at_autoreset():
    def sampler(rng):
        return {"payload": float(rng.choice([0.0, 0.25, 0.5])), "wind": "breezy"}

    def run():
        env = ResidualQuadVectorEnv(2, sampler=sampler, nthread=1, episode_s=0.02)
        env.reset(seed=4)
        masses = []
        for _ in range(6):
            masses.append(env.step(np.zeros((2, 4)))[4]["payload_kg"].tolist())
        return masses

    first = run()
    assert first == run()
    assert len({m for row in first[1:] for m in row}) > 1


# ------------------------------------------------------------------ registration
def test_make_vec_returns_the_vector_env_by_default():
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID

    for mode in (None, "vector_entry_point"):
        env = gym.make_vec(ENV_ID, num_envs=3, vectorization_mode=mode, payload="extra")
        assert isinstance(env.unwrapped, ResidualQuadVectorEnv)
        assert env.num_envs == 3 and env.max_steps == 2000  # the spec's limit arrives
        assert all(e.payload_kg == 0.75 for e in env.unwrapped.envs)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 36)
        env.close()
    sync = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync")
    assert not isinstance(sync.unwrapped, ResidualQuadVectorEnv)
    sync.close()


def test_make_vec_episode_is_the_shorter_of_episode_s_and_the_limit():
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID

    env = gym.make_vec(ENV_ID, num_envs=2, episode_s=25.0, max_episode_steps=2500)
    assert env.max_steps == 2500
    env.close()
    with pytest.warns(UserWarning, match="max_episode_steps=2500"):
        env = gym.make_vec(ENV_ID, num_envs=2, episode_s=25.0)
    assert env.max_steps == 2000
    env.close()
    assert ResidualQuadVectorEnv(2, episode_s=25.0).max_steps == 2500  # built directly: no limit
    with pytest.raises(ValueError, match="max_episode_steps"):
        ResidualQuadVectorEnv(2, max_episode_steps=0)


# ------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("num_envs", [10**9, MAX_NUM_ENVS + 1, 0, -3, 2.0, True, "4", None])
def test_num_envs_out_of_range_is_a_value_error_naming_it(num_envs):
    """Checked before anything is allocated: 10⁹ envs is a clear error, not a MemoryError."""
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID

    with pytest.raises(ValueError, match=rf"num_envs must be an integer in \[1, {MAX_NUM_ENVS}\]"):
        gym.make_vec(ENV_ID, num_envs=num_envs)
    with pytest.raises(ValueError, match="num_envs"):
        ResidualQuadVectorEnv(num_envs)


@pytest.mark.parametrize(
    "seed, match",
    [
        (1.5, r"seed must be an integer >= 0 \(env i gets seed \+ i\), a list of 2"),
        (True, "seed must be an integer >= 0"),
        (np.bool_(False), "seed must be an integer >= 0"),
        (-1, "seed must be an integer >= 0"),
        ("7", "seed must be an integer >= 0"),
        ([0, 1.5], r"seed\[1\] must be an integer >= 0 or None, got 1.5"),
        ([True, 1], r"seed\[0\] must be an integer >= 0 or None"),
        (np.array([0.0, 1.0]), r"seed\[0\] must be an integer >= 0 or None"),
        ([0], "seed list has 1 entries, num_envs is 2"),
    ],
)
def test_a_bad_seed_is_a_value_error_naming_seed(seed, match):
    env = ResidualQuadVectorEnv(2, nthread=1)
    with pytest.raises(ValueError, match=match):
        env.reset(seed=seed)
    env.close()


def test_numpy_integer_seeds_are_accepted_and_equal_python_ints():
    env = ResidualQuadVectorEnv(2, nthread=1, wind="windy")
    a = env.reset(seed=np.int64(3))[0]
    b = env.reset(seed=3)[0]
    c = env.reset(seed=np.array([3, 4]))[0]
    d = env.reset(seed=[np.uint8(3), None])[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(a[0], d[0])
    env.close()


@pytest.mark.parametrize("failure", ["raises", "refused"])
def test_a_sampler_failing_at_an_autoreset_leaves_the_env_as_it_was(failure):
    """The exception (the sampler's own, or the env refusing its scenario) propagates with
    nothing changed; the retried step redoes the same autoresets with the same draws: no env is
    reset twice, no draw is lost, the other envs did not step — the run equals one whose sampler
    never failed."""
    calls = {"n": 0, "fail_at": None}

    def sampler(rng):
        calls["n"] += 1
        draw = float(rng.choice([0.0, 0.25, 0.5, 0.75]))
        if calls["n"] == calls["fail_at"]:
            if failure == "raises":
                raise RuntimeError("sampler outage")
            return {"payload": "huge"}  # a ValueError when the env is built
        return {"payload": draw, "wind": "breezy"}

    # env 1 diverges at once (autoresets alone at step 2); envs 0, 2 end together after 3 steps
    scenarios = [{}, {"options": {"velocity": [1e6, 0.0, 0.0]}}, {"wind": "windy"}]

    def run(fail_at):
        calls.update(n=0, fail_at=fail_at)
        env = ResidualQuadVectorEnv(
            3, scenarios=scenarios, sampler=sampler, nthread=1, episode_s=0.03
        )
        env.reset(seed=7)
        trace, failures = [], 0
        for _ in range(9):
            action = np.full((3, 4), 0.1)
            before = (
                list(env.envs),
                list(env.scenarios),
                env._autoreset.copy(),
                env._sampler_rng.bit_generator.state,
                env._state.copy(),
            )
            try:
                obs, rew, term, trunc, info = env.step(action)
            except (RuntimeError, ValueError):
                failures += 1
                assert env.envs == before[0] and env.scenarios == before[1]
                np.testing.assert_array_equal(env._autoreset, before[2])
                assert env._sampler_rng.bit_generator.state == before[3]
                np.testing.assert_array_equal(env._state, before[4])  # nobody stepped
                obs, rew, term, trunc, info = env.step(action)  # the retry
            trace.append((obs, rew, term, trunc, info["payload_kg"].copy()))
        env.close()
        return trace, failures

    clean, _ = run(None)
    # call 3 is env 2's draw in the autoreset of envs 0 and 2 (call 2, env 0's, succeeded)
    flaky, failures = run(3)
    assert failures == 1
    for (o, r, te, tr, kg), (o2, r2, te2, tr2, kg2) in zip(clean, flaky, strict=True):
        np.testing.assert_array_equal(o2, o)
        np.testing.assert_array_equal(r2, r)
        assert te2.tolist() == te.tolist() and tr2.tolist() == tr.tolist()
        np.testing.assert_array_equal(kg2, kg)
    assert len({kg for *_, row in clean for kg in row.tolist()}) > 1  # the draws matter


def test_step_reset_and_render_after_close_say_the_env_is_closed():
    from gymnasium.error import ClosedEnvironmentError

    env = ResidualQuadVectorEnv(2, nthread=2)
    env.reset(seed=0)
    env.step(np.zeros((2, 4)))
    env.close()
    env.close()  # twice is fine
    for call in (
        lambda: env.step(np.zeros((2, 4))),
        lambda: env.reset(seed=0),
        lambda: env.reset(),
        env.render,
    ):
        with pytest.raises(ClosedEnvironmentError, match=r"the vector env is closed: \w+\(\)"):
            call()
    never_reset = ResidualQuadVectorEnv(1, nthread=1)
    never_reset.close()
    with pytest.raises(ClosedEnvironmentError, match=r"closed: step\(\) after close"):
        never_reset.step(np.zeros((1, 4)))


def test_step_subset_and_reset_subset_equal_the_full_step():
    """``step_subset`` of every env is ``step``; the others stay put while a subset steps; an env
    ended by ``step_subset`` and reset by ``reset_subset`` gives the observations the vector
    env's own NEXT_STEP autoreset gives (same sampler draws)."""
    sampler_calls = []

    def sampler(rng):
        sampler_calls.append(1)
        return {"payload": ["none", "light"][int(rng.integers(2))], "trajectory": "helix"}

    kw = {"scenarios": MIXED[:3], "sampler": sampler, "nthread": 1, "episode_s": 0.3}
    a, b = ResidualQuadVectorEnv(3, **kw), ResidualQuadVectorEnv(3, **kw)
    oa, _ = a.reset(seed=5)
    ob, _ = b.reset(seed=5)
    assert np.array_equal(oa, ob)
    rng = np.random.default_rng(0)
    ids = np.arange(3)
    for _ in range(40):
        actions = rng.uniform(-0.4, 0.0, (3, 4))
        ended = np.flatnonzero(b._autoreset)  # b: the trainer's way, reset the ended envs now
        if len(ended):
            first, info = b.reset_subset(ended)
            assert info["_t"].tolist() == [i in ended for i in range(3)]
        sa = a.step(actions)
        sb = b.step_subset(ids, actions)
        for i in ended.tolist():  # a's autoreset step gives the reset observation
            assert np.array_equal(sa[0][i], first[i]) and sa[1][i] == 0.0
        fresh = np.setdiff1d(ids, ended)  # the envs a stepped (b stepped them all)
        assert np.array_equal(sa[0][fresh], sb[0][fresh])
        assert np.array_equal(sa[1][fresh], sb[1][fresh])
        if len(ended):  # b stepped the reset envs once more: resync b's state from a's step
            break
    assert sampler_calls  # autoresets with draws happened
    # a subset steps alone: the other envs' state does not move
    c = ResidualQuadVectorEnv(3, nthread=1)
    c.reset(seed=1)
    before = c._state.copy()
    obs, reward, term, trunc, info = c.step_subset([0, 2], np.zeros((2, 4)))
    assert np.array_equal(c._state[1], before[1]) and not np.array_equal(c._state[0], before[0])
    assert info["_t"].tolist() == [True, False, True] and np.all(obs[1] == 0.0)


def test_subset_ids_and_pending_envs_are_refused():
    env = ResidualQuadVectorEnv(3, nthread=1, episode_s=0.01)
    with pytest.raises(Exception, match="reset"):
        env.step_subset([0], np.zeros((1, 4)))
    env.reset(seed=0)
    for bad in ([2, 1], [0, 0], [3], [-1], [[0]], [0.5]):
        with pytest.raises(ValueError, match="ids"):
            env.step_subset(bad, np.zeros((len(bad), 4)))
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        env.step_subset([0, 1], np.zeros((3, 4)))
    _, _, _, truncated, _ = env.step_subset([1], np.zeros((1, 4)))  # one step: the episode ends
    assert truncated.tolist() == [False, True, False]
    with pytest.raises(ValueError, match=r"envs \[1\] ended"):
        env.step_subset([0, 1], np.zeros((2, 4)))
    obs, _ = env.reset_subset([1])
    env.step_subset([0, 1], np.zeros((2, 4)))  # reset: it steps again
    assert obs[1].any() and not obs[0].any()


@pytest.mark.parametrize("nthread", [2, 3])
def test_lanes_on_threads_give_the_one_thread_bits(monkeypatch, nthread):
    """A batch split into lanes flown on their own threads (lanes of two envs here, so that a
    small batch has several lanes per payload group) steps every env with the very bits of one
    thread: observations, rewards, flags and info arrays exactly equal, across the contact band,
    an unstable start, autoresets and mixed payload groups."""
    from residual_quad.envs import vector_physics

    monkeypatch.setattr(vector_physics, "MIN_LANE_ENVS", 2)
    used: set[int] = set()
    group = vector_physics.BatchPhysics._rollout_group

    def spy(self, *args):
        used.add(args[-1])
        return group(self, *args)

    monkeypatch.setattr(vector_physics.BatchPhysics, "_rollout_group", spy)
    scenarios = MIXED + MIXED[:2] + [{"payload": "extra", "wind": "windy"}] * 3
    rng = np.random.default_rng(5)
    steps = 60
    actions = rng.uniform(-0.45, -0.15, (steps, len(scenarios), 4))
    runs = []
    for nt in (1, nthread):
        env = ResidualQuadVectorEnv(len(scenarios), scenarios=scenarios, nthread=nt, episode_s=0.3)
        out = [env.reset(seed=4)]
        out += [env.step(a) for a in actions]
        env.close()
        runs.append(out)
    assert used == set(range(nthread)), used  # every lane flew
    for k, (one, many) in enumerate(zip(*runs, strict=True)):
        for a, b in zip(one[:-1], many[:-1], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"step {k}")
        for key, value in one[-1].items():
            if isinstance(value, np.ndarray) and value.dtype != object:
                np.testing.assert_array_equal(value, many[-1][key], err_msg=f"{key} step {k}")
