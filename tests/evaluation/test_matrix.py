"""geo flies every trajectory × payload × wind of the source's matrix without diverging."""

from __future__ import annotations

import itertools

import pytest

from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.evaluation import run_episode


@pytest.mark.parametrize(
    "trajectory, payload", list(itertools.product(TRAJECTORIES, PAYLOAD_LEVELS))
)
def test_geo_never_diverges(trajectory, payload):
    for wind in WIND_LEVELS:
        r = run_episode("geo", payload=payload, wind=wind, trajectory=trajectory, seed=0)
        assert not r.diverged, (trajectory, payload, wind, r.termination)
        assert r.rmse < 0.5
