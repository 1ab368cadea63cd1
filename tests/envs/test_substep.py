"""The compiled substep wrench: the formulas it replaces, bit for bit; the vector env's compiled
and numpy paths and the single env, bit for bit with every disturbance on; the GIL released."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from residual_quad.compiled import compiled as numba_kernel
from residual_quad.envs import substep
from residual_quad.envs.disturbances import (
    DragModel,
    GroundEffect,
    WindModel,
    WindProcess,
    drag_world_force,
)
from residual_quad.envs.events import rotor_gains
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.rotations import quat_to_rot
from residual_quad.envs.vector_env import ResidualQuadVectorEnv
from residual_quad.envs.xp import ARRAYS

DRAG = DragModel()
GE = GroundEffect()
NQ, NV = 7, 6  # the free joint's qpos and qvel
IQ, IV = 1, 1 + NQ  # their columns in a full-physics state row (time first)


def _same_bits(a, b) -> bool:
    """Equal bit for bit (NaN payloads and the sign of zero included)."""
    a, b = np.ascontiguousarray(a, dtype=float), np.ascontiguousarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def _inputs(n: int, seed: int) -> dict[str, np.ndarray]:
    """States across the magnitudes a flight (and a diverging one) reaches: heights from under
    the floor through the ground-effect band to far above, unnormalized and tiny quaternions,
    speeds from 1e-300 to 1e6 m/s, exact zeros and the clip boundary of the ground effect."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-300, 6, (n, 1))
    q = rng.normal(size=(n, 4)) * 10.0 ** rng.uniform(-3, 1, (n, 1))
    v = rng.normal(size=(n, 3)) * scale
    z = np.concatenate(
        [
            rng.uniform(-0.1, 0.3, n // 2),
            10.0 ** rng.uniform(-320, 3, n - n // 2),
        ]
    )
    z[:6] = [0.0, -0.0, GE.rotor_radius / 4.0, 1e-310, np.inf, 0.05]
    v[6:9] = 0.0
    wind = rng.normal(size=(n, 3)) * 3.0
    eff = rng.uniform(0.2, 1.0, (n, 4))
    eff[: n // 3] = 1.0
    return {"q": q, "v": v, "z": z, "wind": wind, "eff": eff}


@pytest.mark.parametrize("ground_effect", [GE, None, GroundEffect(0.2, 3.0)])
def test_plant_wrench_is_the_float_formulas_bit_for_bit(ground_effect):
    """One vehicle: the force written into ``xfrc_applied``, the gains and the returned ground
    gain are those of ``quat_to_rot``, ``drag_world_force``, ``GroundEffect.gain`` and
    ``rotor_gains`` in Python floats (the plant's arithmetic before it was compiled)."""
    x = _inputs(400, 1)
    p = substep.params(DRAG, ground_effect)
    xfrc, gain = np.zeros(6), np.zeros(4)
    for k in range(len(x["z"])):
        qpos = np.r_[0.3, -0.2, x["z"][k], x["q"][k]]
        qvel = np.r_[x["v"][k], 0.1, 0.2, 0.3]
        w, eff = x["wind"][k], x["eff"][k]
        g = substep.plant_wrench(qpos, qvel, w, p, eff, xfrc, gain)
        rot = quat_to_rot(*qpos[3:7].tolist())
        ax, ay, az = (qvel[0:3] - w).tolist()
        want = drag_world_force(rot, ax, ay, az, DRAG.k_h, DRAG.k_v, DRAG.c_lin)
        want_g = 1.0 if ground_effect is None else ground_effect.gain(float(qpos[2]))
        assert _same_bits(xfrc[0:3], want), k
        assert _same_bits(g, want_g), k
        assert _same_bits(gain, rotor_gains(want_g, eff)), k


@pytest.mark.parametrize("lagged", [False, True])
@pytest.mark.parametrize("ground_effect", [GE, None])
def test_lane_wrench_and_after_are_the_numpy_formulas_bit_for_bit(lagged, ground_effect):
    """A batch: control, force, gain, rotation, the rest flags and the gains of
    :func:`lane_wrench` are the array formulas' (``xp=ARRAYS``), the gains are written where a
    model's address is given and nowhere else, and :func:`lane_after` flags
    exactly the rows that landed on their fallen state from anywhere but rest."""
    n, substeps = 300, 5
    x = _inputs(n, 2)
    nstate = IV + NV + 2
    s = np.zeros((n, nstate))
    s[:, IQ + 2] = x["z"]
    s[:, IQ + 3 : IQ + 7] = x["q"]
    s[:, IV : IV + 3] = x["v"]
    s[:, IV + 3 : IV + 6] = 0.5
    qpos0 = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    s[10, IQ : IQ + NQ], s[10, IV : IV + NV] = qpos0, 0.0  # at rest at the default pose
    s[11, IQ : IQ + NQ], s[11, IV : IV + NV] = qpos0, 0.0
    s[11, IV + 5] = 1e-300  # not quite at rest
    winds = np.random.default_rng(3).normal(size=(n, substeps, 3))
    fk = np.random.default_rng(4).uniform(0, 6, (n, 4))
    p = substep.params(DRAG, ground_effect)
    x0 = 4 + 6 * 1
    control = np.zeros((n, 1, x0 + 6))
    before, gain = np.zeros(n, dtype=bool), np.zeros(n)
    force, rot = np.zeros((n, 3)), np.zeros((n, 9))
    sub = 3
    gainprm = np.zeros((n, 4, 10))  # stand-ins of the lagged envs' own models' actuator_gainprm
    gain_at = np.array([gainprm[j].ctypes.data if j % 2 else 0 for j in range(n)], dtype=np.intp)
    gains = substep.lane_wrench(
        s, IQ, IV, NV, qpos0, winds, sub, p, x["eff"], fk, lagged, gain_at, 10, control, x0,
        before, force, gain, rot,
    )  # fmt: skip
    qpos, qvel = s[:, IQ : IQ + NQ], s[:, IV : IV + NV]
    w = winds[:, sub]
    r = quat_to_rot(*qpos[:, 3:7].T)
    fx, fy, fz = drag_world_force(
        r, qvel[:, 0] - w[:, 0], qvel[:, 1] - w[:, 1], qvel[:, 2] - w[:, 2],
        DRAG.k_h, DRAG.k_v, DRAG.c_lin, xp=ARRAYS,
    )  # fmt: skip
    with np.errstate(invalid="ignore"):
        g = ground_effect.gain(qpos[:, 2]) if ground_effect is not None else np.ones(n)
    want_gains = rotor_gains(g[:, None], x["eff"])
    assert _same_bits(gains, want_gains)
    assert _same_bits(gain, g)
    assert _same_bits(gainprm[1::2, :, 0], want_gains[1::2])  # written where an address is given
    gainprm[1::2, :, 0] = 0.0
    assert not gainprm.any()  # and nowhere else
    assert _same_bits(force, np.stack((fx, fy, fz), axis=1))
    assert _same_bits(rot, np.stack(r, axis=1))
    assert _same_bits(control[:, 0, 0:4], fk if lagged else want_gains * fk)
    assert _same_bits(control[:, 0, x0 : x0 + 3], force)
    rest = (qpos == qpos0).all(axis=1) & (qvel == 0.0).all(axis=1)
    assert before.tolist() == rest.tolist() and rest[10] and not rest[11]

    fallen_tab = np.random.default_rng(6).normal(size=(n + 2, nstate))
    ids = np.random.default_rng(7).permutation(n + 2)[:n]
    result = np.random.default_rng(8).normal(size=(n, 1, nstate))
    result[10:14, 0] = fallen_tab[ids[10:14]]  # rows 10 (at rest before) and 11–13 fell
    unstable = np.zeros(n, dtype=bool)
    unstable[20] = True  # fell in an earlier substep
    substep.lane_after(result, s, fallen_tab, ids, before, unstable, fk)
    assert _same_bits(s, result[:, 0])
    assert np.flatnonzero(unstable).tolist() == [11, 12, 13, 20]
    assert (fk[[11, 12, 13, 20]] == 0.0).all() and (fk[10] != 0.0).all()


def test_the_kernels_release_the_gil():
    """Compiled with ``nogil``, and seen to: while one thread runs :func:`lane_wrench` over a
    large batch, the main thread runs Python and reads the batch half written (with the GIL
    held it could only ever see none or all of it)."""
    for kernel in (substep.plant_wrench, substep.lane_wrench, substep.lane_after):
        assert kernel.targetoptions["nogil"] is True
    n = 300_000
    s = np.zeros((n, IV + NV))
    s[:, IQ + 2], s[:, IQ + 3] = 2.0, 1.0
    winds = np.zeros((n, 1, 3))
    p, eff, fk = substep.params(DRAG, GE), np.ones((n, 4)), np.ones((n, 4))
    control, before = np.zeros((n, 1, 7)), np.zeros(n, dtype=bool)
    force, rot, gain = np.zeros((n, 3)), np.zeros((n, 9)), np.zeros(n)
    qpos0 = np.zeros(NQ)
    no_gains = np.zeros(n, dtype=np.intp)
    args = (s, IQ, IV, NV, qpos0, winds, 0, p, eff, fk, False, no_gains, 10, control, 4)
    args = (*args, before, force)
    seen = False
    for _ in range(20):  # each try: the kernel once; a busy machine may not interleave
        gain[:] = np.nan
        t = threading.Thread(target=substep.lane_wrench, args=(*args, gain, rot))
        t.start()
        while t.is_alive() and not seen:
            seen = gain[0] == gain[0] and gain[-1] != gain[-1]  # begun, not finished
        t.join()
        assert (gain == GE.gain(2.0)).all()
        if seen:
            break
    assert seen


def test_wind_take_at_a_used_up_block_refills_into_a_view():
    """At the end of a block ``take`` refills and hands out a view of the new block (it copied
    ``sample`` by ``sample`` before): the samples ``sample`` gives, in the same order."""
    model = WindModel.from_spec("windy")
    a = WindProcess(model, 0.002, np.random.default_rng(5), block=10, chunk=5)
    b = WindProcess(model, 0.002, np.random.default_rng(5), block=10, chunk=5)
    want = np.array([b.sample() for _ in range(30)])
    for k in range(6):
        got = a.take(5)
        assert np.shares_memory(got, a.block), k
        assert _same_bits(got, want[5 * k : 5 * k + 5]), k


EVERYTHING = {
    "payload": "extra",
    "wind": "windy",
    "trajectory": "helix",
    "events": (
        {"kind": "wind", "t_s": 0.05, "mean_mps": [2.0, -1.0, 0.5], "rise_s": 0.1},
        {"kind": "rotor", "t_s": 0.1, "rotor": 2, "efficiency": 0.6},
        {"kind": "payload", "t_s": 0.15, "mass_kg": 0.5},
    ),
}
SCENARIOS = [
    {},
    {"wind": "breezy", "trajectory": "figure8"},
    # in the ground-effect and contact band, sinking: the plant path and the gain
    {"options": {"position_offset": [0, 0, -1.2], "velocity": [0, 0, -0.3]}},
    {"payload": "light", "options": {"velocity": [1e6, 0.0, 0.0]}},  # MuJoCo's reset
]


@pytest.mark.parametrize("rotor_tau_s", [0.0, 0.05])
def test_vector_env_compiled_numpy_and_single_envs_agree_bit_for_bit(rotor_tau_s):
    """Every disturbance on (payload, gusts, ground effect, wind, rotor and payload events,
    rotor lag, the contact band, a diverging env): the vector env with the compiled wrench, with
    the numpy wrench bit for bit in everything; the single envs the same observations (the
    accelerometer: the vector env's 1e-9), flags, wind, drag force and gains, rewards to 1e-12
    (the batched reward's arithmetic)."""
    scen = [{**EVERYTHING, **s} for s in SCENARIOS]
    n, steps = len(scen), 60
    actions = np.random.default_rng(9).uniform(-0.3, 0.0, (steps, n, 4))
    runs = []
    for compiled in (True, False):
        vec = ResidualQuadVectorEnv(
            n, scenarios=scen, nthread=1, episode_s=0.4, rotor_tau_s=rotor_tau_s
        )
        vec.physics.compiled = compiled
        runs.append([vec.reset(seed=5), *(vec.step(a) for a in actions)])
        vec.close()
    for k, (a, b) in enumerate(zip(*runs, strict=True)):
        for x, y in zip(a[:-1], b[:-1], strict=True):
            assert np.array_equal(x, y), k
        for key, value in a[-1].items():
            if isinstance(value, np.ndarray) and value.dtype != object:
                assert np.array_equal(value, b[-1][key]), (key, k)
    singles = [
        ResidualQuadEnv(
            **{k: v for k, v in s.items() if k != "options"}, episode_s=0.4, rotor_tau_s=rotor_tau_s
        )
        for s in scen
    ]
    exact = np.r_[L.pos, L.vel, L.rot, L.omega_b, L.thrusts]
    done = [False] * n
    for i, env in enumerate(singles):
        o, _ = env.reset(seed=5 + i, options=scen[i].get("options"))
        assert np.array_equal(o, runs[0][0][0][i])
    for t in range(steps):
        obs, rew, term, trunc, info = runs[0][t + 1]
        for i, env in enumerate(singles):
            if done[i]:
                env.reset(options=scen[i].get("options"))
                done[i] = False
                continue
            o, r, te, tr, inf = env.step(actions[t][i])
            done[i] = te or tr
            assert o[exact].tolist() == obs[i, exact].tolist(), (t, i)
            np.testing.assert_allclose(o, obs[i], rtol=0, atol=1e-9)
            assert abs(r - rew[i]) <= 1e-12 and (te, tr) == (term[i], trunc[i]), (t, i)
            for key in ("wind", "drag_force", "ground_gain", "rotor_thrusts"):
                assert np.asarray(inf[key]).tolist() == np.asarray(info[key][i]).tolist(), key
    assert any(r[2].any() for r in runs[0][1:])  # an env terminated (the diverging one)


def test_with_no_writable_cache_folder_the_kernels_compile_in_memory(monkeypatch):
    """A read-only install and home: numba finds no cache folder; the kernels still compile
    (in each process) instead of failing the import."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba ≥ 0.61 / before
    monkeypatch.setattr(impl, "_locator_classes", [])

    def twice(x):
        return 2.0 * x

    kernel = numba_kernel(twice)
    assert kernel(1.5) == 3.0
    assert isinstance(kernel._cache, caching.NullCache)


def test_the_kernels_cache_outside_the_package(tmp_path, monkeypatch):
    """numba's machine code goes to the user's cache folder, never beside the installed source
    (files left in ``site-packages`` after ``pip uninstall`` shadow a later editable install);
    ``NUMBA_CACHE_DIR`` chosen by the user wins, and numba's own setting is left as it was."""
    from pathlib import Path

    from numba.core import config

    package = Path(substep.__file__).resolve().parent
    cached = Path(substep.plant_wrench._cache._cache_path).resolve()
    assert package not in cached.parents
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    before = config.CACHE_DIR

    def thrice(x):
        return 3.0 * x

    kernel = numba_kernel(thrice)
    assert kernel(1.0) == 3.0
    assert Path(kernel._cache._cache_path).is_relative_to(tmp_path / "xdg" / "residual_quad")
    assert config.CACHE_DIR == before
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "mine"))
    mine = numba_kernel(thrice)
    assert Path(mine._cache._cache_path).is_relative_to(tmp_path / "mine")
    assert config.CACHE_DIR == str(tmp_path / "mine")


def test_the_wind_mirror_hands_out_each_process_s_own_samples():
    """Envs at different places in their blocks, some running out within the period (the
    gather along rows for those that fit, their own process for the others): every env gets the
    samples its own process would hand out, period after period."""
    from residual_quad.envs.wind_mirror import WindMirror

    model = WindModel.from_spec("windy")
    procs = [
        WindProcess(model, 0.002, np.random.default_rng(k), block=10 + 5 * k, chunk=5)
        for k in range(4)
    ]
    twins = [
        WindProcess(model, 0.002, np.random.default_rng(k), block=10 + 5 * k, chunk=5)
        for k in range(4)
    ]
    mirror = WindMirror(4, lambda i: procs[i])
    for i in range(4):
        procs[i].take(5 * i)  # out of step
        twins[i].take(5 * i)
        mirror.mirror(i)
    envs = np.array([0, 1, 3])
    for period in range(12):
        got = mirror.take(envs, 5)
        for row, i in enumerate(envs.tolist()):
            assert _same_bits(got[row], twins[i].take(5)), (period, i)


@pytest.mark.parametrize("blocks", [(7, 12, 9, 11), (3, 4, 12, 6)])
def test_the_wind_mirror_crosses_blocks_mid_period_with_each_process_s_samples(blocks):
    """Reads that start off the block grid (a reset draws one sample first) run past the block's
    end within a period, several envs at once, their new blocks drawn together; blocks shorter
    than a period too: every env still gets its own process's samples, bit for bit."""
    from residual_quad.envs.wind_mirror import WindMirror

    model = WindModel.from_spec("windy")

    def made():
        return [
            WindProcess(model, 0.002, np.random.default_rng(k), block=b, chunk=1)
            for k, b in enumerate(blocks)
        ]

    procs, twins = made(), made()
    mirror = WindMirror(len(procs), lambda i: procs[i])
    for i in range(len(procs)):
        procs[i].take(1 + i)  # off the grid, each env at its own place
        twins[i].take(1 + i)
        mirror.mirror(i)
    envs = np.arange(len(procs))
    for period in range(15):
        got = mirror.take(envs, 5)
        for i in envs.tolist():
            assert _same_bits(got[i], twins[i].take(5)), (period, i)


def test_take_rows_copies_and_contiguous_finds_one_run():
    """The vector env's row indexing: one run of envs becomes a slice, anything else stays an
    index array, and the rows taken are a copy either way (the physics updates them in place
    before they are written back)."""
    from residual_quad.envs.vector_physics import contiguous, take_rows

    assert contiguous(np.arange(3, 9)) == slice(3, 9)
    assert contiguous(np.array([0, 2, 3])).tolist() == [0, 2, 3]
    assert contiguous(np.array([], dtype=np.int64)).tolist() == []
    a = np.arange(12.0).reshape(6, 2)
    for rows in (contiguous(np.arange(1, 4)), np.array([0, 5])):
        taken = take_rows(a, rows)
        assert _same_bits(taken, a[rows])
        taken[:] = -1.0
        assert (a >= 0).all()
