"""How the vector backend cuts a matrix into batches: every run once, at most ``batch_size`` per
batch, each controller's runs together (its batched step shared by as many envs as possible)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.evaluation.sweep.config import SweepConfig, expand
from residual_quad.evaluation.sweep.engine import vector_batches

LABELS = ["pid", "geo", "geo_rls", "geo_rls_dob", "hnewton_rls"]


@settings(max_examples=30, deadline=None)
@given(
    n_labels=st.integers(1, len(LABELS)),
    seeds=st.integers(1, 3),
    workers=st.integers(1, 16),
    batch_size=st.integers(1, 300),
    shuffle=st.randoms(use_true_random=False),
)
def test_batches_keep_each_controller_together(n_labels, seeds, workers, batch_size, shuffle):
    cfg = configs.load(
        SweepConfig, "sweep", controllers=LABELS[:n_labels], seeds=list(range(seeds))
    )
    specs = expand(cfg)
    shuffle.shuffle(specs)  # any order in: the batches still group by controller
    jobs = vector_batches(specs, cfg, None, workers, batch_size)
    batches = [args[0] for _, args in jobs]
    n = len(specs)
    balance = 2 * workers if workers > 1 else 1  # one worker: nothing to balance
    assert len(batches) == min(n, max(balance, math.ceil(n / batch_size)))
    assert all(0 < len(b) <= batch_size for b in batches)
    sizes = [len(b) for b in batches]
    assert max(sizes) - min(sizes) <= 1  # equal shares
    flown = [s.run_id for b in batches for s in b]
    assert sorted(flown) == sorted(s.run_id for s in specs)  # every run once
    labels = [s.controller for b in batches for s in b]
    runs_of = {lab: [i for i, x in enumerate(labels) if x == lab] for lab in set(labels)}
    for idx in runs_of.values():  # one controller's runs are consecutive across the batches
        assert idx == list(range(idx[0], idx[0] + len(idx)))
