"""The report's figures: what each panel draws, one series per controller (an RL policy's
training seeds as one, a tuned variant in its default's colour family), legends and labels clear
of the data, and the same files from any number of worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
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
        np.savez(figures.series_path(series_dir, run_id), **_series(est))
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
    assert labels == {"true", "geo_rls", "geo_rls_dob"}
    est = next(line for line in panel.get_lines() if line.get_label() == "geo_rls")
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
                    np.savez(figures.series_path(series_dir, run_id), **s)
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


# --- one series per controller, legends and labels clear of the data -------------------------

#: a matrix like one with tuned rows (``rquad tune``) and an RL policy over three training
#: seeds: label → the position error (m) of its showcase flight, also its rows' RMSE
MIXED = {
    "pid": 0.06,
    "pid_tuned": 0.04,
    "geo_rls": 0.025,
    "geo_rls_tuned": 0.01,
    "geo_rls_dob": 0.017,
    "geo_rls_dob_tuned": 0.003,
    "ppo": 0.3,
    "ppo:training_seed=1": 0.1,
    "ppo:training_seed=2": 0.2,
}


def _mixed_folder(root: Path, diverged: tuple[str, ...] = ()) -> list[dict]:
    """Rows of :data:`MIXED` over payloads, winds and two env seeds, and the series of the
    showcase flights (each flies the reference shifted by its error along x and z); the runs of the
    labels in ``diverged`` crash with the extra payload."""
    series_dir = root / "series"
    series_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, err in MIXED.items():
        for payload in ("none", "heavy", "extra"):
            for wind in ("calm", "windy"):
                for seed in (0, 1):
                    run_id = f"{label}|{payload}|{wind}|helix|{seed}"
                    if seed == 0 and wind == "windy" and payload != "none":
                        s = _series(-4.0 - err if "geo_rls" in label else None)
                        s["pos"] = s["ref"] + err * np.array([0.6, 0.0, 0.8])  # |e| = err
                        np.savez(figures.series_path(series_dir, run_id), **s)
                    crash = label in diverged and payload == "extra"
                    rows.append(
                        dict(
                            run_id=run_id,
                            controller=label,
                            payload=payload,
                            wind=wind,
                            trajectory="helix",
                            seed=seed,
                            diverged=crash,
                            control_cost=1000.0 + 10 * err,
                            rmse=None if crash else err * (1 + seed),
                            residual_bias=0.1 if "geo_rls" in label else None,
                        )
                    )
    return rows


def _drawn(monkeypatch, draw) -> Figure:
    """The one figure ``draw()`` saves, laid out as in its file."""
    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    draw()
    (fig,) = saved
    FigureCanvasAgg(fig)  # closed by the function: a canvas of its own again
    fig.canvas.draw()
    return fig


def _overlaps(fig: Figure) -> list[str]:
    """Every legend that overlaps a panel (its data area, tick labels, axis labels or title)
    or the figure's title."""
    r = fig.canvas.get_renderer()
    legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
    assert legends, "no legend"
    found = []
    for leg in legends:
        box = leg.get_window_extent(r)
        for a in fig.axes:
            if box.overlaps(a.get_window_extent(r)):
                found.append(f"legend over the data of {a.get_title()!r}")
            if box.overlaps(a.get_tightbbox(r)):
                found.append(f"legend over the labels or title of {a.get_title()!r}")
        title = getattr(fig, "_suptitle", None)
        if title is not None and box.overlaps(title.get_window_extent(r)):
            found.append("legend over the figure's title")
    return found


def _legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def _panel(fig: Figure, prefix: str):
    return next(a for a in fig.axes if a.get_title().startswith(prefix))


def _figures_of(tmp_path: Path, monkeypatch, diverged: tuple[str, ...] = ()) -> dict:
    rows = _mixed_folder(tmp_path, diverged)
    series_dir = tmp_path / "series"
    draws = {
        "tracking_comparison": lambda: tracking_comparison(rows, series_dir, tmp_path),
        "payload_sweep": lambda: figures.payload_sweep(rows, tmp_path),
        "wind_sweep": lambda: figures.wind_sweep(rows, tmp_path),
        "rls_adaptation": lambda: figures.rls_adaptation(series_dir, tmp_path),
    }
    return {name: _drawn(monkeypatch, draw) for name, draw in draws.items()}


def test_legends_sit_outside_every_panel_and_title(tmp_path: Path, monkeypatch):
    """The legends used to cover panel (a)'s title and panel (c)'s data; now one legend per
    figure, beside the panels."""
    for name, fig in _figures_of(tmp_path, monkeypatch, diverged=("ppo",)).items():
        assert _overlaps(fig) == [], name
        assert len(fig.legends) == 1 and not any(a.get_legend() for a in fig.axes), name


def test_an_rl_policy_with_several_training_seeds_is_one_series(tmp_path: Path, monkeypatch):
    """``ppo`` and ``ppo:training_seed=1``/``=2`` are one legend entry, one line (the flight of
    the seed with the median RMSE: seed 2, 0.2 m) with the min–max band of the three behind it,
    and one bar (the mean over all their runs, whiskers over the per-seed means)."""
    drawn = _figures_of(tmp_path, monkeypatch)
    for name in ("tracking_comparison", "payload_sweep", "wind_sweep"):
        texts = _legend_texts(drawn[name])
        assert [t for t in texts if t.startswith("ppo")] == ["ppo (3 training seeds)"], name
        assert not any("training_seed=" in t for t in texts), name
    fig = drawn["tracking_comparison"]
    error = _panel(fig, "(c)")
    (line,) = [ln for ln in error.get_lines() if ln.get_label() == "ppo"]
    np.testing.assert_allclose(line.get_ydata(), 0.2)  # the median policy's flight
    bands = [c for c in error.collections if c.get_paths()]
    ys = np.concatenate([p.vertices[:, 1] for c in bands for p in c.get_paths()])
    assert ys.min() == pytest.approx(0.1) and ys.max() == pytest.approx(0.3)
    rmse = _panel(fig, "(f)")
    names = [t.get_text() for t in rmse.get_yticklabels()]
    assert names == ["pid", "pid_tuned", "geo_rls", "geo_rls_tuned", "geo_rls_dob"] + [
        "geo_rls_dob_tuned",
        "ppo",
    ]
    bar = rmse.patches[names.index("ppo")]
    assert bar.get_width() == pytest.approx(np.mean([0.3, 0.6, 0.1, 0.2, 0.2, 0.4]))


def test_tuned_rows_are_dashed_hatched_and_beside_their_default(tmp_path: Path, monkeypatch):
    """pid/pid_tuned, geo_rls/geo_rls_tuned, geo_rls_dob/geo_rls_dob_tuned: three colour
    families, the tuned one darker, dashed and hatched, listed right after its default."""
    from matplotlib.colors import rgb_to_hsv, to_rgb

    from residual_quad.evaluation.report.style import TUNED_SHADE

    drawn = _figures_of(tmp_path, monkeypatch)
    fig = drawn["tracking_comparison"]
    lines = {ln.get_label(): ln for ln in _panel(fig, "(c)").get_lines()}
    bars = _panel(fig, "(e)")
    hatch = {
        t.get_text(): p.get_hatch()
        for t, p in zip(bars.get_yticklabels(), bars.patches, strict=True)
    }
    for default in ("pid", "geo_rls", "geo_rls_dob"):
        tuned = default + "_tuned"
        assert lines[default].get_linestyle() == "-" and lines[tuned].get_linestyle() == "--"
        assert hatch[default] is None and hatch[tuned]
        base, dark = to_rgb(lines[default].get_color()), to_rgb(lines[tuned].get_color())
        np.testing.assert_allclose(dark, np.multiply(base, 1 - TUNED_SHADE), atol=1 / 255)
        assert rgb_to_hsv(base)[0] == pytest.approx(rgb_to_hsv(dark)[0], abs=0.01)
    for name in ("tracking_comparison", "payload_sweep", "wind_sweep"):
        texts = [t for t in _legend_texts(drawn[name]) if t.startswith(("pid", "geo"))]
        assert texts == [
            "pid",
            "pid_tuned",
            "geo_rls",
            "geo_rls_tuned",
            "geo_rls_dob",
            "geo_rls_dob_tuned",
        ]
    sweep = drawn["payload_sweep"].axes[0]
    styles = {ln.get_label(): ln.get_linestyle() for ln in sweep.get_lines() if ln.get_label()}
    assert styles["geo_rls"] == "-" and styles["geo_rls_tuned"] == "--"


def test_bar_and_tick_labels_do_not_overlap(tmp_path: Path, monkeypatch):
    """The bar labels of panels (e) and (f) used to run into each other (rotated, one per
    training seed); now horizontal bars read their labels on the y axis, and the log axis is
    labelled 1, 2, 5 × 10^k."""
    fig = _figures_of(tmp_path, monkeypatch)["tracking_comparison"]
    r = fig.canvas.get_renderer()
    for prefix in ("(e)", "(f)"):
        a = _panel(fig, prefix)
        for ticks in (a.get_yticklabels(), a.get_xticklabels()):
            boxes = [t.get_window_extent(r) for t in ticks if t.get_text() and t.get_visible()]
            assert len(boxes) >= 2, prefix
            for i, b in enumerate(boxes):
                assert not any(b.overlaps(o) for o in boxes[i + 1 :]), (prefix, ticks[i])


def test_diverged_runs_are_marked_in_a_strip_below_the_data(tmp_path: Path, monkeypatch):
    """A sweep figure's mean leaves diverged runs out; they are marked (×, with their count) in
    a strip at the bottom that no line reaches."""
    from residual_quad.evaluation.report.style import CRASH_MARKER, CRASH_STEP

    fig = _figures_of(tmp_path, monkeypatch, diverged=("pid_tuned", "geo_rls_dob_tuned"))
    ax = fig["payload_sweep"].axes[0]
    marks = [ln for ln in ax.get_lines() if ln.get_marker() == CRASH_MARKER]
    assert len(marks) == 2  # two series crashed with the extra payload
    lo, hi = np.log10(ax.get_ylim())
    data = np.concatenate([ln.get_ydata() for ln in ax.get_lines() if ln not in marks])
    lowest = (np.log10(np.nanmin(data)) - lo) / (hi - lo)  # axes fraction
    assert lowest >= CRASH_STEP * 2.5 - 1e-9
    assert "diverged runs (count), left out of the mean" in _legend_texts(fig["payload_sweep"])


def test_recovery_and_profile_legends_sit_outside(tmp_path: Path, monkeypatch):
    """The recovery figure's legend covered its curves; the performance profiles used other
    colours than every other figure. Both: one legend outside, each controller in its colour,
    an RL policy's training seeds one series."""
    from residual_quad.evaluation.report.recovery import recovery_figure
    from residual_quad.evaluation.report.style import color_of

    series_dir = tmp_path / "series"
    series_dir.mkdir()
    rows = []
    t = np.arange(0, 1001) * 0.01
    for k, label in enumerate(("pid", "pid_tuned", "ppo", "ppo:training_seed=1")):
        for seed in range(3):
            run_id = f"{label}|none|breezy|hover|{seed}"
            err = 0.01 * (k + 1) + 0.2 * np.exp(-np.clip(t - 5.0, 0, None)) * (t >= 5.0)
            pos = np.zeros((t.size, 3))
            pos[:, 0] = err
            np.savez(figures.series_path(series_dir, run_id), t=t, pos=pos, ref=np.zeros_like(pos))
            rows.append(
                dict(
                    run_id=run_id,
                    controller=label,
                    payload="none",
                    wind="breezy",
                    trajectory="hover",
                    seed=seed,
                    diverged=False,
                    events="rotor@5s:rotor=0,efficiency=0.7",
                    event_t_s=5.0,
                    recovery_band_m=0.05,
                )
            )
    fig = _drawn(monkeypatch, lambda: recovery_figure(rows, series_dir, tmp_path))
    assert _overlaps(fig) == []
    assert _legend_texts(fig) == ["pid", "pid_tuned", "ppo (2 training seeds)", "recovery band"]
    pytest.importorskip("rliable")
    from residual_quad.evaluation.report import rl_stats

    try:
        rl_stats.import_rliable()
    except ImportError as exc:
        pytest.skip(str(exc))
    tasks = [(p, w, tr) for p in ("none", "heavy") for w in ("calm", "windy") for tr in ("helix",)]
    scored = [
        dict(controller=c, payload=p, wind=w, trajectory=tr, seed=s, diverged=False, rmse=e * s)
        for c, e in (("pid", 0.05), ("geo_rls", 0.01), ("geo_rls_tuned", 0.005), ("ppo", 0.1))
        for p, w, tr in tasks
        for s in (1, 2, 3)
    ]
    st = rl_stats.rl_statistics(scored, ["ppo"], reps=50)
    fig = _drawn(monkeypatch, lambda: rl_stats.profile_figure(st, tmp_path / "p.png"))
    assert _overlaps(fig) == []
    (ax,) = fig.axes
    colors = {ln.get_label(): ln.get_color() for ln in ax.get_lines() if ln.get_label()}
    assert {k: colors[k] for k in st.profiles} == {k: color_of(k) for k in st.profiles}


def test_redraw_draws_the_named_figures_its_rows_and_series_allow(tmp_path: Path):
    """What ``rquad report --rewrite`` redraws: the named figures that rows and saved series
    make (never the training curves or the GIF); one whose series are gone keeps its file."""
    rows = _sweep_folder(tmp_path)
    out = tmp_path / "figures"
    out.mkdir()
    names = ["tracking_comparison", "wind_sweep", "residual_learning", "flight_animation"]
    drawn = figures.redraw_figures(rows, tmp_path, out, names)
    assert list(drawn) == ["tracking_comparison", "wind_sweep"]
    assert sorted(p.name for p in out.iterdir()) == ["tracking_comparison.png", "wind_sweep.png"]
    for p in (tmp_path / "series").iterdir():
        p.unlink()
    kept = (out / "tracking_comparison.png").read_bytes()
    assert list(figures.redraw_figures(rows, tmp_path, out, names)) == ["wind_sweep"]
    assert (out / "tracking_comparison.png").read_bytes() == kept


def test_a_series_hidden_under_another_is_named_in_the_legend(tmp_path: Path, monkeypatch):
    """Two controllers that fly alike (``geo`` and ``hnewton`` without active limits) draw one
    line over the other; the legend says where the first one is: under the second, in every
    panel that draws it (``pid`` has no estimate, so no line in (d))."""
    import shutil

    rows = _mixed_folder(tmp_path)
    series_dir = tmp_path / "series"
    for r in [r for r in rows if r["controller"] == "pid"]:
        twin = r["run_id"].replace("pid", "hnewton", 1)
        rows.append({**r, "controller": "hnewton", "run_id": twin})
        src = figures.series_path(series_dir, r["run_id"])
        if src.exists():
            shutil.copy(src, figures.series_path(series_dir, twin))
    fig = _drawn(monkeypatch, lambda: tracking_comparison(rows, series_dir, tmp_path))
    texts = _legend_texts(fig)
    assert "pid (under hnewton)" in texts and "hnewton" in texts
    assert not any(t.startswith(("geo_rls ", "ppo (3 training seeds) (")) for t in texts)
