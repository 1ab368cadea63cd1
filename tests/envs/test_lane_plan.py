"""How a period's batch is shared among threads (``vector_physics.lane_plan``)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from residual_quad.envs.vector_physics import MIN_LANE_ENVS, lane_plan


@given(
    sizes=st.lists(st.sampled_from([2, 3, 5]), min_size=1, max_size=6 * MIN_LANE_ENVS),
    nthread=st.integers(1, 8),
)
def test_every_env_flies_once_in_lanes_of_equal_count_and_pieces_of_one_size(sizes, nthread):
    """Each env in exactly one piece, each piece of one model size and in index order, the lanes
    within one env of each other, no more than the threads, none below the minimum but one."""
    nbody = np.array(sizes)
    plan = lane_plan(nbody, nthread)
    assert 1 <= len(plan) <= nthread
    assert len(plan) == 1 or len(nbody) >= len(plan) * MIN_LANE_ENVS
    pieces = [p for lane in plan for p in lane]
    flat = np.concatenate(pieces)
    assert sorted(flat.tolist()) == list(range(len(nbody)))
    for p in pieces:
        assert len(p) and len(set(nbody[p].tolist())) == 1
        assert (np.diff(p) > 0).all()
    counts = [sum(len(p) for p in lane) for lane in plan]
    assert max(counts) - min(counts) <= 1


def test_a_mixed_batch_keeps_every_thread_busy():
    """A third of the envs without a payload body (one size) and the rest with (another): two
    threads take half the envs each, where one lane per small group left a thread idle."""
    nbody = np.array([2, 3, 3] * 86)  # 258 envs: 86 of one size, 172 of the other
    plan = lane_plan(nbody, 2)
    assert [sum(len(p) for p in lane) for lane in plan] == [129, 129]
    assert [len(lane) for lane in plan] == [2, 1]  # the cut falls in the larger group
