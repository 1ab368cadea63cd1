"""The vector backend of the sweep: batches of runs on the vector env give the local backend's
rows (every metric to ≤ 1e-9, the residual bias and the saved series included), resume, and
refuse what cannot work."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residual_quad.controllers import make_controller
from residual_quad.controllers.batch import BatchedGroups, BatchedLoop, make_batch_controller
from residual_quad.episode import RunSpec, fly, fly_batch
from residual_quad.evaluation.sweep import (
    SERIES_DIR,
    SweepConfig,
    expand,
    read_rows,
    run_sweep,
    run_sweeps,
)

MIXED = dict(
    controllers=["pid", "geo", "geo_res", "geo_rls", "hnewton", "geo:kp=5000"],  # the last diverges
    payloads=["none", "extra"],
    winds=["calm", "windy"],
    trajectories=["helix"],
    seeds=[0],
    episode_s=5.0,
    series=[{"payload": "extra", "wind": "windy", "trajectory": "helix", "seed": 0}],
)


def assert_rows_close(a: list[dict], b: list[dict], rel: float = 1e-9) -> None:
    """Same run ids in the same order; floats within ``rel`` (relative), everything else equal
    (``wall_time`` aside)."""
    assert [r["run_id"] for r in a] == [r["run_id"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key, u in x.items():
            v = y[key]
            if key == "wall_time":
                continue
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=rel, abs_tol=1e-12), (x["run_id"], key, u, v)
            else:
                assert u == v, (x["run_id"], key, u, v)


def test_vector_backend_rows_and_series_equal_the_local_backend(tmp_path):
    cfg = SweepConfig(**MIXED)
    local = run_sweep(cfg, tmp_path / "local", backend="local", workers=2, progress=False)
    vector = run_sweep(cfg, tmp_path / "vector", backend="vector", workers=2, progress=False)
    assert_rows_close(local, vector)
    on_disk = sorted(read_rows(tmp_path / "vector"), key=lambda r: r["run_id"])
    assert_rows_close(sorted(local, key=lambda r: r["run_id"]), on_disk)
    diverged = [r for r in vector if r["diverged"]]
    assert diverged and {r["controller"] for r in diverged} == {"geo:kp=5000"}
    assert all(r["termination"] for r in diverged)
    assert any(r["residual_bias"] is not None for r in vector)  # geo_res / geo_rls
    names = sorted(p.name for p in (tmp_path / "local" / SERIES_DIR).iterdir())
    assert names == sorted(p.name for p in (tmp_path / "vector" / SERIES_DIR).iterdir())
    assert len(names) == len(cfg.labels)
    for name in names:
        a = np.load(tmp_path / "local" / SERIES_DIR / name)
        b = np.load(tmp_path / "vector" / SERIES_DIR / name)
        assert a.files == b.files
        for key in a.files:
            if a[key].dtype.kind == "f":
                np.testing.assert_allclose(b[key], a[key], rtol=1e-9, atol=1e-12, err_msg=key)
            else:
                assert (a[key] == b[key]).all()


def test_vector_backend_resumes_a_sweep_of_another_backend(tmp_path):
    small = dict(MIXED, controllers=["geo", "geo_rls"], series=[])
    first = SweepConfig(**dict(small, seeds=[0]))
    full = SweepConfig(**dict(small, seeds=[0, 1]))
    run_sweep(first, tmp_path, backend="local", workers=1, progress=False)
    flown: list[str] = []
    rows = run_sweep(
        full,
        tmp_path,
        backend="vector",
        workers=2,
        resume=True,
        progress=False,
        on_row=lambda r: flown.append(r["run_id"]),
    )
    assert sorted(flown) == sorted(r["run_id"] for r in rows if r["seed"] == 1)
    reference = run_sweep(full, tmp_path / "ref", backend="local", workers=2, progress=False)
    assert_rows_close(reference, rows)


def test_fly_batch_equals_run_episode_with_reset_options_and_named_trajectories():
    specs = [
        RunSpec("geo", "heavy", "windy", "helix", 3, trajectory_params=(("period", 6.0),)),
        RunSpec("geo", "none", (1.0, 0.5), "hover", 4, reset_options=(("yaw_offset", 1.0),)),
        RunSpec("geo", "extra", "calm", "figure8", 5),
    ]
    specs = [RunSpec(**{**s.__dict__, "episode_s": 4.0}) for s in specs]
    batch = fly_batch(specs, make_batch_controller("geo", len(specs)))
    for spec, got in zip(specs, batch, strict=True):
        want = fly(spec)
        assert got.steps == want.steps and got.diverged == want.diverged
        for key in ("rmse", "max_error", "control_cost"):
            assert math.isclose(getattr(got, key), getattr(want, key), rel_tol=1e-9)
        np.testing.assert_allclose(got.pos, want.pos, rtol=0, atol=1e-9)


def test_fly_batch_refuses_what_cannot_work():
    specs = [RunSpec("geo", episode_s=1.0), RunSpec("geo", seed=1, episode_s=2.0)]
    with pytest.raises(ValueError, match="episode_s"):
        fly_batch(specs, make_batch_controller("geo", 2))
    with pytest.raises(ValueError, match="flies 3 envs"):
        fly_batch(specs[:1], make_batch_controller("geo", 3))
    assert fly_batch([], make_batch_controller("geo", 1)) == []


def test_batch_groups_equal_their_parts_and_check_the_partition():
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    env = ResidualQuadVectorEnv(3, scenarios=[{"payload": p} for p in ("none", "extra", "heavy")])
    obs, _ = env.reset(seed=0)
    groups = BatchedGroups(
        [(make_batch_controller("geo_rls", 2), [0, 2]), (make_batch_controller("pid", 1), [1])]
    )
    geo_rls, pid = make_batch_controller("geo_rls", 2), make_batch_controller("pid", 1)
    assert groups.n_envs == 3 and groups.action_mode == "rotor"
    for _ in range(50):
        action = groups.policy_batch(obs)
        np.testing.assert_array_equal(action[[0, 2]], geo_rls.policy_batch(obs[[0, 2]]))
        np.testing.assert_array_equal(action[[1]], pid.policy_batch(obs[[1]]))
        residual = groups.last_residual
        np.testing.assert_array_equal(residual[[0, 2]], geo_rls.last_residual)
        obs, *_ = env.step(action)
    env.close()
    loop = BatchedLoop([make_controller("hnewton")])
    assert loop.last_residual.shape == (1, 3)
    with pytest.raises(ValueError, match="partition"):
        BatchedGroups([(make_batch_controller("geo", 2), [0, 1]), (pid, [1])])
    with pytest.raises(ValueError, match="rows"):
        BatchedGroups([(make_batch_controller("geo", 2), [0]), (pid, [1])])


def test_unknown_backend_lists_the_choices(tmp_path):
    with pytest.raises(ValueError, match="local, ray, vector"):
        run_sweep(SweepConfig(**dict(MIXED, series=[])), tmp_path, backend="gpu", progress=False)


def test_ppo_rows_are_exact_on_the_vector_backend(tmp_path):
    """ppo flies per env in a batch (a batched float32 forward would round differently)."""
    pytest.importorskip("stable_baselines3")
    cfg = SweepConfig(**dict(MIXED, controllers=["ppo"], winds=["windy"], series=[]))
    local = run_sweep(cfg, tmp_path / "local", backend="local", workers=1, progress=False)
    vector = run_sweep(cfg, tmp_path / "vector", backend="vector", workers=1, progress=False)
    assert_rows_close(local, vector)


def test_rows_do_not_depend_on_the_batch_size(tmp_path):
    """The same runs flown in batches of 1, 3 and 8 give identical rows, bit for bit (the
    learned-residual controllers included)."""
    cfg = SweepConfig(
        controllers=["geo_res", "geo_rls"],
        payloads=["none", "extra"],
        winds=["windy"],
        trajectories=["helix"],
        seeds=[0, 1],
        episode_s=2.0,
    )
    rows = {}
    for size in (1, 3, 8):
        flown = run_sweep(
            cfg, tmp_path / str(size), backend="vector", workers=1, progress=False, batch_size=size
        )
        rows[size] = sorted(
            ({k: v for k, v in r.items() if k != "wall_time"} for r in flown),
            key=lambda r: r["run_id"],
        )
    assert len(rows[1]) == 8
    assert rows[3] == rows[1]
    assert rows[8] == rows[1]


def test_geo_rls_dob_is_batched_and_its_rows_equal_the_local_backend(tmp_path):
    """``geo_rls_dob`` (guard, EFRA, observer) flies vectorized on the vector backend, rows with
    different payloads in one batch (the guard acting in the extra/windy helix), and its rows
    equal the local backend's to 1e-9."""
    from residual_quad.controllers.adaptive import DOBRLSGeoTracker
    from residual_quad.controllers.batch import has_batch_path
    from residual_quad.controllers.driver import LawBatch
    from residual_quad.controllers.specs import parse_spec

    assert has_batch_path(parse_spec("geo_rls_dob"))
    batch = make_batch_controller("geo_rls_dob", 3)
    assert isinstance(batch, LawBatch) and type(batch.law) is DOBRLSGeoTracker
    cfg = SweepConfig(
        controllers=["geo_rls_dob", "geo_rls:enabled=true,covariance=efra"],
        payloads=["none", "extra"],
        winds=["windy"],
        trajectories=["helix"],
        seeds=[0],
        episode_s=3.0,
        series=[],
    )
    local = run_sweep(cfg, tmp_path / "local", backend="local", workers=1, progress=False)
    vector = run_sweep(cfg, tmp_path / "vector", backend="vector", workers=1, progress=False)
    assert_rows_close(local, vector)


def _without_wall_time(rows: list[dict]) -> list[dict]:
    return sorted(
        ({k: v for k, v in r.items() if k != "wall_time"} for r in rows),
        key=lambda r: r["run_id"],
    )


def test_sweeps_on_one_pool_give_each_folder_the_rows_of_its_own_sweep(tmp_path):
    """:func:`run_sweeps` (each sweep whole in one worker) writes into each folder the rows
    :func:`run_sweep` writes there, bit for bit; a resumed folder flies only its missing runs."""
    base = dict(MIXED, controllers=["pid", "geo_rls"], series=[], episode_s=2.0)
    run_sweep(SweepConfig(**dict(base, seeds=[0])), tmp_path / "b", workers=1, progress=False)
    sweeps = [
        (SweepConfig(**dict(base, winds=["calm"], seeds=[0, 1])), tmp_path / "a"),
        (SweepConfig(**dict(base, seeds=[0, 1])), tmp_path / "b"),  # seed 0 flown: resumed
    ]
    done = run_sweeps(sweeps, workers=2, resume=True)
    assert sorted(done) == sorted(str(out) for _, out in sweeps)
    for cfg, out in sweeps:
        want = run_sweep(cfg, tmp_path / f"ref_{out.name}", workers=2, progress=False)
        got = read_rows(out)
        assert len(got) == len(want) == len(expand(cfg))  # each run once, resumed or not
        assert _without_wall_time(got) == _without_wall_time(want)
