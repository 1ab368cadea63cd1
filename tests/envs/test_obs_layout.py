"""``ObsLayout``: the fields tile the observation; named single entries agree with the slices."""

from __future__ import annotations

import numpy as np

from residual_quad.envs.observation import FIELDS, OBS_DIM, ObsLayout


def test_fields_tile_the_observation_in_order():
    covered = []
    for name in FIELDS:
        where = ObsLayout.names()[name]
        covered += list(range(OBS_DIM))[where] if isinstance(where, slice) else [where]
    assert covered == list(range(OBS_DIM))
    assert list(ObsLayout.names()) == list(FIELDS)


def test_single_entries_agree_with_the_slices():
    obs = np.arange(OBS_DIM, dtype=float)
    L = ObsLayout
    assert [obs[L.x], obs[L.y], obs[L.z]] == obs[L.pos].tolist()
    assert [obs[L.vx], obs[L.vy], obs[L.vz]] == obs[L.vel].tolist()
    R = L.rotation(obs)
    names = [["R00", "R01", "R02"], ["R10", "R11", "R12"], ["R20", "R21", "R22"]]
    for i in range(3):
        for j in range(3):
            assert obs[getattr(L, names[i][j])] == R[i, j]
    assert obs[L.rot_z].tolist() == R[:, 2].tolist()  # R·e_z
    thrusts = [obs[L.thrust0], obs[L.thrust1], obs[L.thrust2], obs[L.thrust3]]
    assert thrusts == obs[L.thrusts].tolist()


def test_r22_is_the_cosine_of_the_tilt(make_env):
    env = make_env(trajectory="hover")
    obs, _ = env.reset(seed=0)
    assert obs[ObsLayout.R22] == 1.0  # level start
