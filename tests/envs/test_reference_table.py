"""Tabulated references: the single env's bits for any batch of (env, step) pairs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from residual_quad.envs.observation import ObsLayout
from residual_quad.envs.reference_table import REFERENCE_SIZE, BatchReferences, table_key
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.trajectories import (
    TRAJECTORIES,
    Figure8,
    Helix,
    Hover,
    Reference,
    make_named_trajectory,
    reference_fields,
)
from residual_quad.envs.vector_env import ResidualQuadVectorEnv

DT = 0.01  # s, the default control period
BUILT_IN = [
    *(cls() for cls in TRAJECTORIES.values()),
    Helix(radius=1.3, period=5.5, turns=0.7, z_low=2.0, z_high=1.0),
    Figure8(a=1.0, b=3.0, period=7.0, heading=-0.0),
    Figure8(a=1.0, b=3.0, period=7.0, heading=0.0),
    Hover(point=(1.0, -2.0, 0.5), heading=3.5),
]
REF = slice(ObsLayout.ref_pos.start, ObsLayout.ref_yaw_rate + 1)


class SlowHelix(Helix):
    """A user subclass of a built-in: it overrides the call, so it must not be tabulated."""

    def __call__(self, t: float) -> Reference:
        return super().__call__(0.5 * t)


def _single_rows(trajectories, envs, steps):
    pairs = zip(envs, steps, strict=True)
    return np.array([reference_fields(trajectories[i], k * DT) for i, k in pairs])


def test_every_built_in_at_desynchronized_steps_is_the_single_envs_bits():
    trajectories = [*BUILT_IN, SlowHelix()]
    refs = BatchReferences(len(trajectories), DT, 2000)
    for i, trajectory in enumerate(trajectories):
        refs.set(i, trajectory)
    assert refs.slot[-1] == -1 and (refs.slot[:-1] >= 0).all()
    rng = np.random.default_rng(0)
    failed = np.zeros(len(trajectories), dtype=bool)
    for _ in range(30):
        active = np.flatnonzero(rng.random(len(trajectories)) < 0.7)
        steps = rng.integers(0, 2001, len(active))
        got = refs.rows(active, steps, failed)
        assert got.shape == (len(active), REFERENCE_SIZE)
        want = _single_rows(trajectories, active, steps)
        assert got.tobytes() == want.tobytes()  # bit for bit, -0.0 included
    assert not failed.any()


def test_equal_parameters_share_a_table_and_signed_zeros_do_not():
    assert table_key(Helix()) == table_key(Helix())
    assert table_key(Figure8(heading=0.0)) != table_key(Figure8(heading=-0.0))
    assert table_key(SlowHelix()) is None
    refs = BatchReferences(3, DT, 100)
    for i, trajectory in enumerate([Helix(), Helix(), Figure8()]):
        refs.set(i, trajectory)
    assert refs.slot.tolist() == [0, 0, 1] and refs.tables == 2


def test_tables_fill_lazily_and_never_past_the_episode():
    from residual_quad.envs.reference_table import _FIRST_FILL

    refs = BatchReferences(1, DT, 8 * _FIRST_FILL)
    refs.set(0, Helix())
    failed = np.zeros(1, dtype=bool)
    refs.rows(np.array([0]), np.array([3]), failed)
    assert refs._filled[0] == _FIRST_FILL  # the first fill
    refs.rows(np.array([0]), np.array([_FIRST_FILL + 5]), failed)
    assert refs._filled[0] == 2 * _FIRST_FILL  # doubling
    refs.rows(np.array([0]), np.array([5 * _FIRST_FILL]), failed)
    assert refs._filled[0] == 5 * _FIRST_FILL + 1  # as far as asked, past a doubling
    refs.rows(np.array([0]), np.array([8 * _FIRST_FILL]), failed)
    assert refs._filled[0] == 8 * _FIRST_FILL + 1  # steps 0 … max_steps


def test_past_the_budget_a_trajectory_takes_the_per_env_path_with_the_same_bits():
    """A budget of two tables: a third trajectory reads per env until a table is unused."""
    budget = 2 * 101 * REFERENCE_SIZE * 8
    refs = BatchReferences(3, DT, 100, budget_bytes=budget)
    trajectories = [Helix(), Figure8(), Helix(period=3.0)]
    for i, trajectory in enumerate(trajectories):
        refs.set(i, trajectory)
    assert refs.slot.tolist() == [0, 1, -1]
    assert refs._rows.nbytes <= budget  # the memory held, not only the tables counted
    failed = np.zeros(3, dtype=bool)
    steps = np.array([7, 50, 99])
    got = refs.rows(np.arange(3), steps, failed)
    assert got.tobytes() == _single_rows(trajectories, range(3), steps).tobytes()
    refs.set(1, Hover())  # table 1 (Figure8) is no longer read: Hover takes its place
    assert refs.slot.tolist() == [0, 1, -1] and refs._filled[1] == 0
    refs.set(2, Helix())  # shares table 0
    assert refs.slot.tolist() == [0, 1, 0]


def _flying(n):
    """Hover thrust for the default airframe, a batch of ``n`` envs (they fly, then drift)."""
    return np.full((n, 4), -0.05)


def test_vector_env_reference_entries_equal_the_single_envs_after_autoresets():
    """Episodes of different lengths desynchronize the envs: each env's reference entries stay
    the single env's bits (a user trajectory's too)."""
    scenarios = [
        {"trajectory": "helix", "options": {"velocity": [0, 0, -40.0]}},  # crashes early
        {"trajectory": "figure8"},
        {"trajectory": "helix"},
        {"trajectory": SlowHelix()},
    ]
    n = len(scenarios)
    vec = ResidualQuadVectorEnv(n, scenarios=scenarios, nthread=1, episode_s=0.3)
    singles = [ResidualQuadEnv(trajectory=s["trajectory"], episode_s=0.3) for s in scenarios]
    obs, _ = vec.reset(seed=1)
    want = [
        env.reset(seed=1 + i, options=scenarios[i].get("options"))[0]
        for i, env in enumerate(singles)
    ]
    done = [False] * n
    desynchronized = False
    for _ in range(70):
        obs, _, term, trunc, _ = vec.step(_flying(n))
        for i, env in enumerate(singles):
            if done[i]:
                want[i], _ = env.reset(options=scenarios[i].get("options"))
                done[i] = False
            else:
                want[i], _, te, tr, _ = env.step(_flying(1)[0])
                done[i] = te or tr
        assert obs[:, REF].tobytes() == np.array(want)[:, REF].tobytes()
        desynchronized |= singles[0].steps != singles[2].steps  # one helix table, two steps
    assert desynchronized


class _GoesBad(Helix):
    """A user subclass: the helix until 0.05 s, then not a Reference."""

    def __call__(self, t: float) -> Reference:
        return super().__call__(t) if t < 0.05 else (1, 2, 3)  # type: ignore[return-value]


def test_a_user_trajectory_going_bad_beside_tables_is_named_and_pending_autoreset():
    scenarios = [{"trajectory": t} for t in ("helix", _GoesBad(), "hover")]
    vec = ResidualQuadVectorEnv(3, scenarios=scenarios, nthread=1)
    vec.reset(seed=0)
    with pytest.raises(TypeError, match="env 1: trajectory _GoesBad"):
        for _ in range(10):
            vec.step(_flying(3))
    assert vec._autoreset.tolist() == [False, True, False]


def test_without_table_memory_every_reference_is_a_call_with_the_same_bits():
    kw = {"scenarios": [{"trajectory": "helix"}, {"trajectory": "figure8"}], "nthread": 1}
    tabled = ResidualQuadVectorEnv(2, **kw)
    called = ResidualQuadVectorEnv(2, reference_table_bytes=0, **kw)
    assert called._references.slot.tolist() == [-1, -1]
    a, b = tabled.reset(seed=4)[0], called.reset(seed=4)[0]
    for _ in range(20):
        assert a.tobytes() == b.tobytes()
        a, b = tabled.step(_flying(2))[0], called.step(_flying(2))[0]
    with pytest.raises(ValueError, match="reference_table_bytes"):
        ResidualQuadVectorEnv(1, reference_table_bytes=-1)


def _parameter(field: dataclasses.Field) -> st.SearchStrategy:
    """Any value a built-in trajectory's parameter may take, extremes included (tiny periods,
    huge amplitudes: references that overflow)."""
    if field.name == "seed":
        return st.integers(0, 2**31)
    if field.name == "waypoints":
        return st.integers(3, 12)
    if field.name == "point":
        return st.tuples(*[st.floats(-1e6, 1e6, allow_nan=False)] * 3)
    return st.one_of(
        st.floats(-50.0, 50.0),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e300]),
    )


@st.composite
def _any_built_in(draw):
    name = draw(st.sampled_from(sorted(TRAJECTORIES)))
    fields = dataclasses.fields(TRAJECTORIES[name])
    params = {f.name: draw(_parameter(f)) for f in fields if draw(st.booleans())}
    try:
        return make_named_trajectory(name, **params)
    except ValueError:
        assume(False)


# extreme parameters make degenerate splines, whose construction scipy warns about: the bits
# must agree all the same
@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::scipy.linalg.LinAlgWarning")
@settings(max_examples=150, deadline=None)
@given(trajectory=_any_built_in(), steps=st.lists(st.integers(0, 300), min_size=1, max_size=8))
def test_a_table_block_is_the_float_paths_bits_or_its_error(trajectory, steps):
    """A table is filled a block of steps at a time (the trajectory's formula on an array of
    times): every step reads the single env's float bits, an overflowing reference included,
    and a step where the float path raises raises there too."""
    refs = BatchReferences(1, DT, 300)
    refs.set(0, trajectory)
    assert refs.slot[0] == 0
    failed = np.zeros(1, dtype=bool)
    for k in steps:
        try:
            want = np.array(reference_fields(trajectory, k * DT))
        except (ArithmeticError, TypeError, ValueError) as err:
            with pytest.raises(type(err)):
                refs.rows(np.array([0]), np.array([k]), failed)
            continue
        got = refs.rows(np.array([0]), np.array([k]), failed)[0]
        assert got.tobytes() == want.tobytes()


def test_an_overflow_ends_the_table_where_the_float_path_raises():
    """A helix whose climb rate overflows: the float path's ``cos(inf)`` raises from step 1
    on, so the table holds step 0 only and later steps raise the clear error."""
    helix = Helix(period=1e-300, turns=1e-10)
    with pytest.raises(ValueError):
        reference_fields(helix, DT)
    refs = BatchReferences(1, DT, 100)
    refs.set(0, helix)
    failed = np.zeros(1, dtype=bool)
    row = refs.rows(np.array([0]), np.array([0]), failed)[0]
    assert refs._filled[0] == 1
    assert row.tobytes() == np.array(reference_fields(helix, 0.0)).tobytes()
    with pytest.raises(ValueError):
        refs.rows(np.array([0]), np.array([5]), failed)
