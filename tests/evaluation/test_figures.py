"""The tracking-comparison figure's panel (d) draws the residual estimates beside the truth."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from residual_quad.evaluation.report import figures
from residual_quad.evaluation.report.figures import has_estimate, tracking_comparison

T = 50


def _series(est_z: float | None) -> dict[str, np.ndarray]:
    t = np.arange(T) * 0.01
    est = np.full((T, 3), 0.0 if est_z is None else est_z)
    est[0] = np.nan  # what the sweep stores: no estimate before the first step
    zeros = np.zeros((T, 3))
    return dict(t=t, pos=zeros, ref=zeros, residual_true=zeros - 4.0, residual_est=est)


def test_has_estimate_ignores_the_nan_first_row_and_all_zero_series():
    assert has_estimate(_series(-4.0)["residual_est"])  # the row-0 NaN used to hide every line
    assert not has_estimate(_series(None)["residual_est"])  # zeros: a tracker without estimate
    broken = _series(-4.0)["residual_est"]
    broken[10, 2] = np.nan
    assert not has_estimate(broken)


def test_panel_d_draws_truth_and_every_estimate(tmp_path: Path, monkeypatch):
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    rows = []
    for name, est in (("geo", None), ("geo_rls", -3.9), ("geo_rls_dob", -4.1)):
        run_id = f"{name}|heavy|windy|helix|0"
        np.savez(figures._series_path(series_dir, run_id), **_series(est))
        rows.append(
            dict(
                controller=name,
                payload="heavy",
                wind="windy",
                trajectory="helix",
                seed=0,
                diverged=False,
                control_cost=1.0,
                rmse=0.01,
            )
        )
    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    tracking_comparison(rows, series_dir, tmp_path)
    (fig,) = saved
    panel = next(a for a in fig.axes if a.get_title().startswith("(d)"))
    labels = {line.get_label() for line in panel.get_lines()}
    assert labels == {"true", "geo_rls estimate", "geo_rls_dob estimate"}
    est = next(line for line in panel.get_lines() if line.get_label() == "geo_rls estimate")
    np.testing.assert_array_equal(est.get_ydata(), np.full(T - 1, -3.9))


def _sweep_folder(root: Path) -> list[dict]:
    """Hand-made rows of a small matrix and the time series of its showcase runs."""
    series_dir = root / "series"
    series_dir.mkdir(parents=True)
    rows = []
    for k, ctrl in enumerate(("geo", "geo_res", "geo_rls")):
        for payload in ("none", "heavy", "extra"):
            for wind in ("calm", "windy"):
                run_id = f"{ctrl}|{payload}|{wind}|helix|0"
                if wind == "windy" and payload != "none":
                    s = _series(-4.0 + 0.1 * k if ctrl != "geo" else None)
                    s["pos"] = s["pos"] + 0.01 * (k + 1)
                    np.savez(figures._series_path(series_dir, run_id), **s)
                rows.append(
                    dict(
                        run_id=run_id,
                        controller=ctrl,
                        payload=payload,
                        wind=wind,
                        trajectory="helix",
                        seed=0,
                        diverged=False,
                        control_cost=100.0 + k,
                        rmse=0.01 * (k + 1) * (1 + len(payload)),
                        residual_bias=0.1 * (k + 1) if ctrl != "geo" else None,
                    )
                )
    return rows


def test_figures_drawn_by_worker_processes_equal_the_serial_ones(tmp_path: Path):
    """Each figure is drawn from the same data whichever process draws it: the same files,
    byte for byte, listed in the same order."""
    rows = _sweep_folder(tmp_path)
    serial = figures.make_figures(rows, tmp_path, tmp_path / "serial", animation=False, workers=1)
    pooled = figures.make_figures(rows, tmp_path, tmp_path / "pooled", animation=False, workers=2)
    assert (
        list(serial)
        == list(pooled)
        == [
            "disturbance_models",
            "tracking_comparison",
            "payload_sweep",
            "wind_sweep",
            "rls_adaptation",
        ]
    )
    for name, path in serial.items():
        assert path.parent == tmp_path / "serial" and pooled[name].parent == tmp_path / "pooled"
        assert path.read_bytes() == pooled[name].read_bytes(), name


def test_every_figure_has_a_job_and_the_longest_go_first(tmp_path: Path):
    jobs = figures.figure_jobs(_sweep_folder(tmp_path), tmp_path, tmp_path, animation=True)
    names = [name for name, _ in jobs]
    assert names == [
        *figures.FIGURES,
        *(f"flight_animation:{c}" for c in ("geo", "geo_res", "geo_rls")),
    ]
    assert sorted(figures.LONGEST_FIRST) == sorted([*figures.FIGURES, figures.ANIMATION])
    assert figures.LONGEST_FIRST[0] == figures.ANIMATION


def test_the_animation_flies_each_controller_once_and_puts_the_frames_together(
    tmp_path: Path, monkeypatch
):
    """One job per animated controller (in any process), the GIF written from their frames in
    the controllers' order; a machine without rendering skips it with one line."""
    flown = []

    def fake_frames(name, payload, wind, trajectory, seconds, fps):
        flown.append((name, payload, wind, trajectory))
        return [np.full((240, 320, 3), 40 * len(flown), dtype=np.uint8)] * 3

    monkeypatch.setattr(figures, "frames_or_reason", fake_frames)
    rows = _sweep_folder(tmp_path)
    figs = figures.make_figures(rows, tmp_path, tmp_path / "out", animation=True, workers=1)
    assert list(figs)[-1] == "flight_animation" and figs["flight_animation"].name == "flight.gif"
    assert [f[0] for f in flown] == ["geo", "geo_res", "geo_rls"]
    assert {f[1:] for f in flown} == {("heavy", "windy", "helix")}
    from PIL import Image

    with Image.open(figs["flight_animation"]) as gif:
        assert gif.n_frames == 3 and gif.size == (960, 240)
    monkeypatch.setattr(figures, "frames_or_reason", lambda *a: "flight animation skipped: x")
    figs = figures.make_figures(rows, tmp_path, tmp_path / "out2", animation=True, workers=1)
    assert "flight_animation" not in figs


def test_gif_frames_show_the_same_flight_as_the_default_renderer():
    """The lighter render settings of the animation (smaller shadow map, no multisampling) draw
    the same scene: frames within a few levels of the default renderer's, on average."""
    from residual_quad.episode import run_episode
    from residual_quad.evaluation.report import animation

    os.environ.setdefault("MUJOCO_GL", "egl")
    got = animation.frames_or_reason("geo", "heavy", "windy", "helix", 0.3, 10)
    if isinstance(got, str):
        pytest.skip(got)
    default = run_episode(
        "geo",
        payload="heavy",
        wind="windy",
        trajectory="helix",
        episode_s=0.3,
        frame_every=10,
        render_mode="rgb_array",
        width=320,
        height=240,
    ).extras["frames"]
    assert len(got) == len(default) == 3
    for a, b in zip(got, default, strict=True):
        diff = np.abs(a.astype(float) - b.astype(float))
        assert diff.mean() < 1.0  # of 255: edges differ, the scene does not
        assert (diff > 60).mean() < 0.01
