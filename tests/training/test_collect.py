"""Residual data collection: determinism across workers, the take-off cut, rejection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _tiny_collect_config(**kw):
    from residual_quad import configs
    from residual_quad.training.collect import CollectConfig

    base = dict(
        payloads=["none", "heavy"],
        winds=["breezy"],
        trajectories=["hover", "figure8"],
        seeds=[7],
        episode_s=3.0,
        workers=1,
    )
    base.update(kw)
    return configs.load(CollectConfig, "collect", **base)


def test_collect_dataset_independent_of_workers(tmp_path: Path):
    from residual_quad.training.collect import collect, load_dataset

    cfg = _tiny_collect_config()
    s1 = collect(cfg, tmp_path / "a.npz", progress=False, workers=1)
    collect(cfg, tmp_path / "b.npz", progress=False, workers=2)
    a, b = load_dataset(tmp_path / "a.npz"), load_dataset(tmp_path / "b.npz")
    assert s1["runs"] == 4 and s1["samples"] == 4 * 150  # (3.0 − 1.5) s × 100 Hz per run
    assert s1["max_truth_error"] < 1e-9  # targets are the env's true residual
    np.testing.assert_array_equal(a["X"], b["X"])
    np.testing.assert_array_equal(a["Y"], b["Y"])
    assert a["t"].min() >= 1.5 - 1e-9  # take-off dropped
    assert a["config"]["payloads"] == ["none", "heavy"]
    assert (tmp_path / "a.yaml").is_file()  # resolved config next to the dataset
    # heavy runs have the payload's vertical residual, none runs do not
    heavy = np.isin(a["run"], [r["index"] for r in a["runs"] if r["payload"] == "heavy"])
    assert a["Y"][heavy, 2].mean() < -4.0 < a["Y"][~heavy, 2].mean()


def test_collect_refuses_extra_and_rejects_large_residuals(tmp_path: Path):
    from residual_quad.training.collect import collect, load_dataset

    with pytest.raises(ValueError, match="never collected"):
        _tiny_collect_config(payloads=["none", "extra"])
    cfg = _tiny_collect_config(payloads=["heavy"], trajectories=["hover"], reject_accel=5.0)
    summary = collect(cfg, tmp_path / "r.npz", progress=False)
    data = load_dataset(tmp_path / "r.npz")
    assert summary["rejected"] > 0
    assert np.linalg.norm(data["Y"], axis=1).max() <= 5.0


@pytest.mark.parametrize(
    "where",
    ["under_a_file", "read_only_folder", "a_folder"],
)
def test_an_unwritable_out_is_refused_before_flying(tmp_path: Path, monkeypatch, capsys, where):
    """Root writes into chmod-read-only folders, so the read-only case uses a folder nobody can
    create files in (``/proc/self``); a path under a regular file fails for every user."""
    import residual_quad.training.collect as collect_mod
    from residual_quad.cli import main

    if where == "under_a_file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "dataset.npz"
    elif where == "read_only_folder":
        if not Path("/proc/self").is_dir():
            pytest.skip("needs Linux /proc")
        out = Path("/proc/self/dataset.npz")
    else:
        out = tmp_path
    flown = []
    monkeypatch.setattr(collect_mod, "map_jobs", lambda *a, **k: flown.append(1) or iter(()))
    assert main(["collect", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "--out" in err
    assert not flown  # nothing was flown
