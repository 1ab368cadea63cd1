"""Every built-in controller survives bad samples: a non-finite observation is answered with the
last action (hover before the first), no internal state is poisoned, and the next clean
observation flies normally; in a batch, one env's bad sample leaves the other rows untouched.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from functools import cache
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad.controllers import make_controller
from residual_quad.controllers.base import ObservationGuard, available_controllers, hover_action
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.extras import UNSHIPPED_POLICY_CONTROLLERS
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None
needs_sb3 = pytest.mark.skipif(not HAS_SB3, reason="needs the rl extra")

#: every registered name (``sb3`` needs a zip: its own fixture below; ``sac`` and ``tqc`` ship
#: no policy: tests/training/test_offpolicy.py holds their guards) and every hnewton variant
NEEDS_FILE = ("sb3", *UNSHIPPED_POLICY_CONTROLLERS)
SPECS = [n for n in available_controllers() if n not in NEEDS_FILE] + [
    "hnewton:gn",
    "hnewton:lm",
    "hnewton:bfgs",
]
#: controllers whose action depends on nothing but the current observation
STATELESS = ("geo",)
BAD_VALUES = (np.nan, np.inf, -np.inf)


def _param(spec: str) -> Any:
    marks = [needs_sb3] if spec.startswith("ppo") else []
    return pytest.param(spec, marks=marks, id=spec)


PARAMS = [_param(s) for s in SPECS]


def test_every_registered_controller_is_covered():
    assert set(available_controllers()) <= {*SPECS, *NEEDS_FILE}


# ----------------------------------------------------------------------------- helpers
@cache
def observation_kwargs(spec: str) -> tuple[tuple[str, Any], ...]:
    """The env arguments the observation of ``spec`` needs (a shipped policy's preview)."""
    from residual_quad.episode import observation_env

    return tuple((k, tuple(v)) for k, v in sorted(observation_env(make_controller(spec)).items()))


@cache
def clean_stream(
    trajectory: str = "hover",
    seed: int = 0,
    steps: int = 120,
    env_kwargs: tuple[tuple[str, Any], ...] = (),
) -> np.ndarray:
    """Observations (steps, 36 + preview) of a closed-loop ``geo`` flight from an off-nominal
    start, in the env ``env_kwargs`` make (:func:`observation_kwargs` of the controller fed)."""
    env = gym.make(
        "ResidualQuad-v0", trajectory=trajectory, payload="light", episode_s=3, **dict(env_kwargs)
    )
    ctrl = make_controller("geo", env)
    obs, _ = env.reset(seed=seed, options={"position_offset": [0.15, -0.1, 0.1]})
    out = []
    for _ in range(steps):
        out.append(obs)
        obs, *_ = env.step(ctrl.policy(obs))
    env.close()
    return np.array(out)


def nan_leaves(obj: Any, path: str = "ctrl", seen: set[int] | None = None) -> list[str]:
    """Paths of every NaN in the numeric state of a controller (arrays, floats, nested
    residual_quad objects, state records and dataclasses, lists, tuples and dicts of them)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "fc" and np.isnan(obj).any():
            return [path]
        return []
    if isinstance(obj, float):
        return [path] if obj != obj else []
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a law's state record
        return [
            p
            for k, v in zip(obj._fields, obj, strict=True)
            for p in nan_leaves(v, f"{path}.{k}", seen)
        ]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in nan_leaves(v, f"{path}[{i}]", seen)]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in nan_leaves(v, f"{path}[{k!r}]", seen)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # a state dataclass
        return [
            p
            for f in dataclasses.fields(obj)
            for p in nan_leaves(getattr(obj, f.name), f"{path}.{f.name}", seen)
        ]
    if type(obj).__module__.startswith("residual_quad") and hasattr(obj, "__dict__"):
        return [p for k, v in vars(obj).items() for p in nan_leaves(v, f"{path}.{k}", seen)]
    return []


def test_nan_leaves_sees_into_a_laws_state_tree():
    """The poison check reaches the nested state of a law (its records, by field name)."""
    ctrl = make_controller("geo_rls")
    assert not nan_leaves(ctrl)
    ctrl.state.estimator.rls.theta[3, 1] = np.nan
    assert nan_leaves(ctrl) == ["ctrl.state.estimator.rls.theta"]
    batch = make_batch_controller("geo_rls", 2)
    batch.state.estimator.phi_f[1, 0] = np.nan
    assert nan_leaves(batch) == ["ctrl.state.estimator.phi_f"]


def poisoned(obs: np.ndarray, index: int | list[int], value: float) -> np.ndarray:
    bad = obs.copy()
    bad[index] = value
    return bad


@cache
def hover_reference(spec: str) -> float:
    """Largest position error (m) of a clean 1.5 s closed-loop hover of ``spec``, after 0.4 s."""
    return max(fly_hover(spec, {})[1][40:])


def fly_hover(spec: str, bursts: dict[int, list[tuple[int, float]]]) -> tuple[list, list]:
    """Fly 1.5 s of calm hover from an offset start; at step k the controller sees the
    observation with ``bursts[k]`` entries ``(index, value)`` overwritten. Returns the actions
    and the position errors (m); an exception or a crash fails the caller."""
    env = gym.make(
        "ResidualQuad-v0", trajectory="hover", episode_s=1.5, **dict(observation_kwargs(spec))
    )
    try:
        ctrl = make_controller(spec, env)
        obs, _ = env.reset(seed=1, options={"position_offset": [0.1, 0.05, -0.05]})
        ctrl.reset(1)
        actions, errors = [], []
        for k in range(150):
            seen = obs.copy()
            for i, v in bursts.get(k, []):
                seen[i] = v
            a = ctrl.policy(seen)
            actions.append(np.array(a, dtype=float))
            obs, _, terminated, truncated, info = env.step(a)
            assert not info["diverged"], (spec, k, info["termination"])
            errors.append(float(np.linalg.norm(obs[L.pos] - obs[L.ref_pos])))
            if terminated or truncated:
                break
        assert not nan_leaves(ctrl), nan_leaves(ctrl)
        return actions, errors
    finally:
        env.close()


# ----------------------------------------------------------------------------- single controllers
@pytest.mark.parametrize("spec", PARAMS)
def test_one_bad_sample_is_held_and_the_state_is_not_poisoned(spec):
    """One NaN in position, velocity or reference: the held action, then exactly the actions
    of a controller that never saw the bad sample (only told that one was dropped)."""
    stream = clean_stream(env_kwargs=observation_kwargs(spec))
    k = 40
    for where in (L.pos.start, L.vel.start + 2, L.ref_pos.start + 1, L.ref_yaw):
        hit = make_controller(spec)
        ref = make_controller(spec)
        hit.reset(0)
        ref.reset(0)
        last = None
        for t, obs in enumerate(stream):
            if t == k:
                held = hit.policy(poisoned(obs, where, np.nan))
                assert np.array_equal(held, last), (spec, where)
                ref.forget_previous_sample()  # the reference simply never got sample k
                continue
            last = hit.policy(obs)
            expected = ref.policy(obs)
            assert np.isfinite(last).all() and np.all(np.abs(last) <= 1.0)
            assert np.array_equal(last, expected), (spec, where, t)
        assert hit.nonfinite_observations == 1
        assert not nan_leaves(hit), nan_leaves(hit)


def test_a_stateless_controller_acts_after_a_bad_sample_as_if_it_never_came():
    stream = clean_stream()
    for spec in STATELESS:
        hit, clean = make_controller(spec), make_controller(spec)
        for t, obs in enumerate(stream):
            a = hit.policy(poisoned(obs, L.vel.start, np.inf) if t == 30 else obs)
            b = clean.policy(obs)
            assert t == 30 or np.array_equal(a, b)


@pytest.mark.parametrize("spec", PARAMS)
def test_a_bad_first_sample_is_answered_with_hover_then_flies(spec):
    ctrl = make_controller(spec)
    obs = clean_stream(env_kwargs=observation_kwargs(spec))[0]
    a = ctrl.policy(poisoned(obs, L.pos.start, np.nan))
    assert np.array_equal(a, hover_action(ctrl.action_mode, ctrl.context.airframe))
    b = ctrl.policy(obs)
    fresh = make_controller(spec)
    assert np.array_equal(b, fresh.policy(obs))
    ctrl.reset(0)  # the reset forgets the held action and the count
    assert ctrl.nonfinite_observations == 0
    assert np.array_equal(ctrl.policy(poisoned(obs, L.pos.start, np.nan)), a)


@pytest.mark.parametrize("spec", PARAMS)
def test_one_bad_sample_in_a_closed_loop_hover_recovers(spec):
    actions, errors = fly_hover(spec, {30: [(L.pos.start, np.nan)]})
    assert len(errors) == 150
    assert all(np.isfinite(a).all() for a in actions)
    assert errors[-1] <= hover_reference(spec) + 0.02


BURST = st.fixed_dictionaries(
    {
        "start": st.integers(5, 60),
        "length": st.integers(1, 6),
        "hits": st.lists(
            st.tuples(st.integers(0, OBS_DIM - 1), st.sampled_from(BAD_VALUES)),
            min_size=1,
            max_size=6,
        ),
        "shuffle": st.randoms(use_true_random=False),
    }
)


@pytest.mark.parametrize("spec", PARAMS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(burst=BURST)
def test_bursts_of_bad_samples_never_break_a_hover(spec, burst):
    """NaN/±inf bursts in random entries at random steps (hypothesis): every action finite and
    inside the action space, no exception, no crash, no NaN in the controller's state, and the
    hover ends as close to the reference as a clean one."""
    bursts = {}
    for k in range(burst["start"], burst["start"] + burst["length"]):
        hits = list(burst["hits"])
        burst["shuffle"].shuffle(hits)
        bursts[k] = hits[: 1 + k % len(hits)]
    actions, errors = fly_hover(spec, bursts)
    assert len(errors) == 150
    for a in actions:
        assert a.shape == (4,) and np.isfinite(a).all() and np.all(np.abs(a) <= 1.0)
    assert errors[-1] <= hover_reference(spec) + 0.02


# ----------------------------------------------------------------------------- sb3
@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory):
    if not HAS_SB3:
        pytest.skip("needs the rl extra")
    import stable_baselines3 as sb3

    env = gym.make("ResidualQuad-v0")
    path = tmp_path_factory.mktemp("sb3") / "ppo.zip"
    sb3.PPO("MlpPolicy", env, seed=0, device="cpu", n_steps=64, batch_size=64).save(path)
    env.close()
    return path


def test_the_sb3_adapter_holds_its_last_action_too(sb3_zip):
    stream = clean_stream()[:20]
    hit = make_controller(f"sb3:{sb3_zip}")
    ref = make_controller(f"sb3:{sb3_zip}")
    assert isinstance(hit, ObservationGuard)
    last = None
    for t, obs in enumerate(stream):
        if t == 10:
            assert np.array_equal(hit.policy(poisoned(obs, L.pos.start, -np.inf)), last)
            continue
        last = hit.policy(obs)
        assert np.array_equal(last, ref.policy(obs))


# ----------------------------------------------------------------------------- batches
BATCH_PARAMS = [
    _param(s)
    for s in (
        "pid",
        "geo",
        "geo_res",
        "geo_rls",
        "geo_rls_dob",  # guard and EFRA on (configs/adaptive.yaml), the observer's rows
        "hnewton",
        "hnewton_rls",
        "ppo",
        "ppo_res",
        "ppo_adapt",  # its preview in the observations, its estimator's rows
    )
]


@pytest.mark.parametrize("spec", BATCH_PARAMS)
def test_one_envs_bad_sample_does_not_touch_the_other_rows(spec):
    """Env 1 gets NaN/±inf bursts; rows 0 and 2 equal a batch flown without them bit for bit,
    row 1 holds its action, then flies as a single controller that dropped those samples."""
    n, steps = 3, 80
    kw = observation_kwargs(spec)
    streams = np.stack([clean_stream(seed=s, steps=steps, env_kwargs=kw) for s in range(n)], axis=1)
    bad_steps = {20: np.nan, 21: np.inf, 50: -np.inf}
    hit = make_batch_controller(spec, n)
    clean = make_batch_controller(spec, n)
    single = make_controller(spec)
    prev_1 = expected_1 = None
    for t in range(steps):
        obs = streams[t]
        if t in bad_steps:
            obs = obs.copy()
            obs[1, [L.pos.start, L.omega_b.start]] = bad_steps[t]
            single.forget_previous_sample()
        else:
            expected_1 = single.policy(streams[t, 1])
        a, b = hit.policy_batch(obs), clean.policy_batch(streams[t])
        assert np.array_equal(a[[0, 2]], b[[0, 2]]), (spec, t)
        assert np.isfinite(a).all() and np.all(np.abs(a) <= 1.0)
        if t in bad_steps:
            assert np.array_equal(a[1], prev_1), (spec, t)
        else:
            np.testing.assert_allclose(a[1], expected_1, rtol=0, atol=1e-9)
        prev_1 = a[1]
    assert not nan_leaves(hit), nan_leaves(hit)


@pytest.mark.parametrize("spec", ["geo", "geo_rls", "geo_rls_dob", "hnewton", "hnewton_rls"])
def test_a_batch_answers_a_bad_first_sample_with_hover(spec):
    hit = make_batch_controller(spec, 2)
    obs = clean_stream()[:1].repeat(2, axis=0)
    obs[0, L.vel.start] = np.nan
    a = hit.policy_batch(obs)
    assert np.array_equal(a[0], hover_action("rotor", make_controller("geo").context.airframe))
    np.testing.assert_allclose(a[1], make_controller(spec).policy(obs[1]), rtol=0, atol=1e-9)
    hit.reset_env(0)
    assert hit.nonfinite_observations.tolist() == [0, 0]
