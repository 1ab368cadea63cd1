"""Figures (PNG) from sweep rows and the saved time series; nothing here flies a controller.

The disturbance-model figure plots the models themselves; the flight animation is the one figure
that renders (MuJoCo, headless) and it is skipped with a message where no OpenGL is available.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from tqdm import tqdm  # noqa: E402

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.residual.config import residual_config
from residual_quad.envs.airframe import GRAVITY, Airframe  # noqa: E402
from residual_quad.envs.disturbances import (  # noqa: E402
    PAYLOAD_LEVELS,
    DragModel,
    WindModel,
    WindProcess,
)
from residual_quad.evaluation.report.animation import frames_or_reason, write_animation
from residual_quad.evaluation.report.series import (  # noqa: F401 - has_estimate, series_path: the API
    SEEDS_FLIGHT,
    SEEDS_MEAN,
    figure_series,
    has_estimate,
    load_series,
    median_flight,
    run_stats,
    seed_band,
    series_label,
    series_of,
    series_path,
)
from residual_quad.evaluation.report.style import (  # noqa: F401 - COLORS, color_of: the API
    BAND_ALPHA,
    COLORS,
    CRASH_MARKER,
    color_of,
    crash_marks,
    default_of,
    figure_legend,
    hbars,
    hidden_notes,
    legend_title,
    linestyle_of,
    log_axis,
    save_figure,
    series_handle,
    tuned_note,
)
from residual_quad.evaluation.report.tables import (  # noqa: E402
    PAYLOAD_ORDER,
    WIND_ORDER,
)

#: room above the tallest bar for its value label (a factor on the axis' top)
BAR_HEADROOM = 1.1
#: horizontal offset between neighbouring series at one category of a sweep figure (in
#: category widths), so series with equal values stay side by side instead of hiding each other
DODGE = 0.025
#: the reference trajectory's line: black, dotted (a tuned variant's line is dashed)
REFERENCE_STYLE = {"color": "k", "ls": ":", "lw": 1.4}


def _controllers(rows: list[dict[str, Any]]) -> list[str]:
    return list(figure_series(rows))


def _curve(ax: Any, name: str, main: tuple[np.ndarray, np.ndarray], band: list | None) -> None:
    """One series on a time axis: its line and, given the curves of every training seed, the
    min–max band behind it."""
    col = color_of(name)
    if band is not None and len(band) > 1:
        t, lo, hi = seed_band(band)
        ax.fill_between(t, lo, hi, color=col, alpha=BAND_ALPHA, lw=0)
    ax.plot(*main, color=col, ls=linestyle_of(name), lw=1, label=name)


def disturbance_models(out: Path) -> Path:
    """Drag vs airspeed (with the tilt-limited thrust), a gust series, the payload residuals."""
    fig, ax = plt.subplots(1, 3, figsize=(14, 3.8))
    drag, frame = DragModel(), Airframe()
    v = np.linspace(0, 12, 200)
    fh = [-drag.body_force(np.array([s, 0, 0]))[0] for s in v]
    fv = [-drag.body_force(np.array([0, 0, s]))[2] for s in v]
    ax[0].plot(v, fh, label="horizontal (k_h = 0.055)")
    ax[0].plot(v, fv, label="vertical (k_v = 0.090)")
    ax[0].axhline(
        frame.hover_thrust * np.tan(np.radians(35)),
        ls="--",
        c="k",
        label="horizontal thrust at 35° tilt",
    )
    ax[0].set(xlabel="air-relative speed (m/s)", ylabel="drag (N)", title="(a) body-frame drag")
    ax[0].legend(fontsize=8)
    proc = WindProcess(WindModel.from_spec("windy"), 0.01, np.random.default_rng(0))
    w = proc.take(3000)
    t = np.arange(3000) * 0.01
    for i, lab in enumerate(("x", "y", "z")):
        ax[1].plot(t, w[:, i], lw=0.8, label=lab)
    ax[1].set(xlabel="t (s)", ylabel="wind (m/s)", title="(b) windy: 3.2 m/s + OU gusts σ 1.8")
    ax[1].legend(fontsize=8)
    names = list(PAYLOAD_LEVELS)
    da = [GRAVITY * PAYLOAD_LEVELS[n] / frame.mass for n in names]
    ax[2].bar(names, da, color=["#1f77b4"] * 3 + ["#999999"])
    ax[2].set(
        ylabel="vertical residual in hover (m/s²)",
        title="(c) payload residual g·Δm/m (grey: not in training)",
    )
    for i, d in enumerate(da):
        ax[2].text(i, d + 0.1, f"{d:.2f}", ha="center")
    ax[2].set_ylim(0, max(da) * BAR_HEADROOM)
    fig.tight_layout()
    path = out / "disturbance_models.png"
    return save_figure(fig, path)


def tracking_comparison(
    rows: list[dict[str, Any]],
    series_dir: Path,
    out: Path,
    payload: str = "heavy",
    wind: str = "windy",
    trajectory: str = "helix",
    seed: int = 0,
) -> Path | None:
    """Six-panel comparison of every controller on one showcase scenario: (a)–(d) the flight
    of env seed ``seed``, (e)–(f) the means over the scenario's runs (every env seed).

    One series per controller: an RL policy flown with several training seeds draws the flight
    of its median policy (the training seed whose flight here has the median RMSE) with the
    min–max band over its training seeds behind it, and its bars the mean over all its runs
    with whiskers spanning the per-seed means. A tuned variant is drawn in its default's colour
    family, dashed and hatched (:mod:`~residual_quad.evaluation.report.style`); one legend,
    outside the panels."""
    groups = figure_series(rows)
    showcase = {
        r["controller"]: r
        for r in rows
        if (r["payload"], r["wind"], r["trajectory"], r["seed"])
        == (payload, wind, trajectory, seed)
    }
    flights: dict[str, list[tuple[float, int, dict[str, np.ndarray]]]] = {}
    for name, seeds in groups.items():
        for ts, label in seeds:
            s = load_series(series_dir, f"{label}|{payload}|{wind}|{trajectory}|{seed}")
            if s is None:
                continue
            r = showcase.get(label, {})
            rmse = math.inf if r.get("diverged") or r.get("rmse") is None else float(r["rmse"])
            flights.setdefault(name, []).append((rmse, ts, s))
    if not flights:
        return None
    fig = plt.figure(figsize=(16.5, 9.2), layout="constrained")
    ax = fig.subplots(2, 3)
    ref = median_flight(next(iter(flights.values())))
    ax[0, 0].plot(ref["ref"][:, 0], ref["ref"][:, 1], **REFERENCE_STYLE)
    ax[0, 1].plot(ref["t"], ref["ref"][:, 2], **REFERENCE_STYLE)
    ax[1, 0].plot(ref["t"], ref["residual_true"][:, 2], "k", lw=0.6, alpha=0.6, label="true")
    handles: list[Any] = [Line2D([], [], **REFERENCE_STYLE)]
    labels = ["reference"]
    for name, fl in flights.items():
        s = median_flight(fl)
        ax[0, 0].plot(
            s["pos"][:, 0],
            s["pos"][:, 1],
            color=color_of(name),
            ls=linestyle_of(name),
            lw=1,
            label=name,
        )
        z = [(f["t"], f["pos"][:, 2]) for *_, f in fl]
        _curve(ax[0, 1], name, (s["t"], s["pos"][:, 2]), z)
        err = [(f["t"], np.linalg.norm(f["pos"] - f["ref"], axis=1)) for *_, f in fl]
        _curve(ax[0, 2], name, (s["t"], np.linalg.norm(s["pos"] - s["ref"], axis=1)), err)
        est = [
            (f["t"][1:], f["residual_est"][1:, 2])
            for *_, f in fl
            if has_estimate(f["residual_est"])
        ]
        if has_estimate(s["residual_est"]):
            # row 0 is NaN by construction (no estimate before the first step)
            _curve(ax[1, 0], name, (s["t"][1:], s["residual_est"][1:, 2]), est)
        handles.append(series_handle(name, band=len(fl) > 1))
    handles.append(Line2D([], [], color="k", lw=0.6, alpha=0.6))
    ax[0, 0].set(xlabel="x (m)", ylabel="y (m)", title="(a) horizontal path", aspect="equal")
    ax[0, 1].set(xlabel="t (s)", ylabel="z (m)", title="(b) height")
    ax[0, 2].set(xlabel="t (s)", ylabel="|e_p| (m)", title="(c) position error")
    ax[1, 0].set(xlabel="t (s)", ylabel="Δa_z (m/s²)", title="(d) vertical residual: truth vs Δâ")
    under = hidden_notes((a.get_title()[:3], a) for a in ax.flat[:4])
    labels += [series_label(n, fl) + under.get(n, "") for n, fl in flights.items()]
    labels.append("true Δa_z (d)")
    sel = [
        r for r in rows if (r["payload"], r["wind"], r["trajectory"]) == (payload, wind, trajectory)
    ]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sel:
        by[series_of(r["controller"])[0]].append(r)
    names = [n for n in groups if n in by]
    runs = {n: len(by[n]) for n in names}
    cost = {n: run_stats(by[n], "control_cost") for n in names}
    rmse = {n: run_stats(by[n], "rmse") for n in names}
    hbars(ax[1, 1], names, cost, runs, log=False)
    ax[1, 1].set(xlabel="∫ΣT² dt (N²·s)", title="(e) control cost, mean over runs")
    hbars(ax[1, 2], names, rmse, runs, log=True)
    ax[1, 2].set(xlabel="RMSE after 3 s (m)", title="(f) steady-state accuracy, mean over runs")
    seeded = any(len(fl) > 1 for fl in flights.values())
    notes = [SEEDS_FLIGHT if seeded else None, tuned_note(groups, bars=True)]
    head = (
        f"{payload} payload, {wind}, {trajectory}: (a)–(d) env seed {seed}, (e)–(f) every env "
        "seed (diverged runs counted, not averaged)"
    )
    fig.suptitle(head, fontsize=10)
    figure_legend(fig, handles, labels, title=legend_title(notes))
    path = out / "tracking_comparison.png"
    return save_figure(fig, path)


def _sweep_plot(
    rows: list[dict[str, Any]],
    key: str,
    order: list[str],
    select: Callable[[dict[str, Any]], bool],
    title: str,
    xlabel: str,
    path: Path,
    bias: bool = False,
) -> Path | None:
    """RMSE (and, with ``bias``, the residual-estimate bias) over the values ``order`` of
    ``key``: one line per series, the mean over every run that did not diverge; an RL policy's
    band spans its per-training-seed means; one legend, outside the axes."""
    sel = [r for r in rows if select(r) and r[key] in order]
    if all(r["diverged"] for r in sel):
        return None
    groups = figure_series(sel)
    xs = [v for v in order if any(r[key] == v for r in sel)]
    at = np.arange(len(xs))
    ncol = 2 if bias else 1
    fig = plt.figure(figsize=(6.5 * ncol + 2.2, 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, ncol))
    metrics = [("rmse", axes[0])] + ([("residual_bias", axes[1])] if bias else [])
    handles, labels = [], []
    seeded = False
    crashes: dict[int, list[tuple[float, int, str]]] = defaultdict(list)
    for k, (name, seeds) in enumerate(groups.items()):
        own = [r for r in sel if series_of(r["controller"])[0] == name]
        pos = at + (k - (len(groups) - 1) / 2) * DODGE  # side by side at each category
        band = len(seeds) > 1
        drawn = False
        for metric, ax in metrics:
            if metric == "residual_bias" and default_of(name) == "pid":
                continue  # pid has no estimate: its "bias" is geo's, the residual itself
            stats = np.array([run_stats([r for r in own if r[key] == x], metric) for x in xs])
            if not np.isfinite(stats[:, 0]).any():
                continue
            col = color_of(name)
            if band:
                ax.fill_between(pos, stats[:, 1], stats[:, 2], color=col, alpha=BAND_ALPHA, lw=0)
            ax.plot(pos, stats[:, 0], marker="o", color=col, ls=linestyle_of(name), label=name)
            drawn = True
            for i in np.flatnonzero(stats[:, 3] > 0) if metric == "rmse" else ():
                crashes[int(i)].append((pos[i], int(stats[i, 3]), col))
        if not drawn:
            continue
        seeded |= band
        handles.append(series_handle(name, band=band, marker="o"))
        labels.append(series_label(name, seeds))
    if "extra" in xs:
        i = xs.index("extra")
        for a in axes:
            a.axvspan(i - 0.4, i + 0.4, color="0.85", zorder=0)
    axes[0].set(xlabel=xlabel, ylabel="RMSE after 3 s (m)", title=title, yscale="log")
    if bias:
        axes[1].set(
            xlabel=xlabel,
            ylabel="|mean(Δâ − Δa)| (m/s²)",
            title="residual-estimate bias (shaded: not in training)",
            yscale="log",
        )
    for a in axes:
        a.set_xticks(at, xs)
        log_axis(a.yaxis)
    notes = [SEEDS_MEAN if seeded else None, tuned_note(groups)]
    if crashes:
        crash_marks(axes[0], crashes)
        handles.append(Line2D([], [], color="k", ls="", marker=CRASH_MARKER))
        labels.append("diverged runs (count), left out of the mean")
    figure_legend(fig, handles, labels, title=legend_title(notes))
    return save_figure(fig, path)


def rls_adaptation(
    series_dir: Path,
    out: Path,
    payload: str = "extra",
    wind: str = "windy",
    trajectory: str = "helix",
    seed: int = 0,
) -> Path | None:
    """Residual estimate vs truth on the unseen payload: offline net vs RLS, warm-up marked."""
    s_rls = load_series(series_dir, f"geo_rls|{payload}|{wind}|{trajectory}|{seed}")
    s_res = load_series(series_dir, f"geo_res|{payload}|{wind}|{trajectory}|{seed}")
    if s_rls is None:
        return None
    fig = plt.figure(figsize=(14.5, 4.2), layout="constrained")
    ax = fig.subplots(1, 2)
    t = s_rls["t"]
    ax[0].plot(t, s_rls["residual_true"][:, 2], "k", lw=0.5, alpha=0.5, label="true Δa_z")
    flown = [(name, s) for name, s in (("geo_rls", s_rls), ("geo_res", s_res)) if s is not None]
    for name, s in flown:
        ax[0].plot(t, s["residual_est"][:, 2], color=color_of(name), label=f"{name} Δâ_z")
        err = np.linalg.norm(s["pos"] - s["ref"], axis=1)
        ax[1].plot(s["t"], err, color=color_of(name), label=name)
    warmup_s = residual_config().rls.warmup_steps * ControlContext().control_dt  # shipped config
    for a in ax:
        warmup = a.axvspan(0, warmup_s, color="0.9", zorder=0, label="RLS warm-up")
    ax[0].set(
        xlabel="t (s)",
        ylabel="m/s²",
        title=f"(a) vertical residual, {payload} payload",
        ylim=(
            np.nanpercentile(s_rls["residual_true"][:, 2], 1) - 2,
            np.nanpercentile(s_rls["residual_true"][:, 2], 99) + 2,
        ),
    )
    ax[1].set(xlabel="t (s)", ylabel="|e_p| (m)", title="(b) position error", yscale="log")
    log_axis(ax[1].yaxis)
    handles = [
        Line2D([], [], color="k", lw=0.5, alpha=0.5),
        *(series_handle(name) for name, _ in flown),
        warmup,
    ]
    labels = [
        "true Δa_z (a)",
        *(f"{name}: Δâ_z (a), |e_p| (b)" for name, _ in flown),
        "RLS warm-up (identify only)",
    ]
    figure_legend(fig, handles, labels)
    path = out / "rls_adaptation.png"
    return save_figure(fig, path)


def residual_learning(
    logdir: Path | None, dataset: Path | None, weights: Path | None, out: Path
) -> Path | None:
    """Learning curves (from the TensorBoard run) and prediction scatter/error histogram."""
    if logdir is None or not Path(logdir).exists():
        return None
    from residual_quad.training.tb_logging import read_scalars

    sc = read_scalars(logdir)
    if "loss/train" not in sc:
        return None
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for tag, lab in (("loss/train", "train"), ("loss/val", "validation")):
        steps, vals = zip(*sc[tag], strict=True)
        ax[0].plot(steps, vals, label=lab)
    ax[0].set(xlabel="epoch", ylabel="MSE (standardized)", yscale="log", title="(a) loss")
    ax[0].legend()
    if dataset is not None and weights is not None and Path(dataset).exists():
        from residual_quad.controllers.residual.network import ResidualMLP
        from residual_quad.training.collect import load_dataset

        data = load_dataset(dataset)
        net = ResidualMLP.load(weights)
        rng = np.random.default_rng(0)
        idx = rng.choice(len(data["X"]), size=min(6000, len(data["X"])), replace=False)
        Y, P = data["Y"][idx], net.predict(data["X"][idx])
        for i, axis in enumerate("xyz"):
            ax[1].scatter(Y[:, i], P[:, i], s=2, alpha=0.3, label=axis)
        lim = [float(Y.min()), float(Y.max())]
        ax[1].plot(lim, lim, "k--", lw=0.8)
        ax[1].set(
            xlabel="measured Δa (body, m/s²)",
            ylabel="predicted Δâ (m/s²)",
            title="(b) prediction vs measurement (all axes)",
        )
        ax[1].legend(markerscale=5)
        err = (P - Y).ravel()
        ax[2].hist(err, bins=120, range=(-2, 2), color="#2ca02c")
        ax[2].set(
            xlabel="prediction error (m/s²)",
            ylabel="samples",
            title=f"(c) error, RMSE {np.sqrt(np.mean(err**2)):.3f} m/s²",
        )
    fig.tight_layout()
    path = out / "residual_learning.png"
    return save_figure(fig, path)


def payload_sweep(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """RMSE and residual-estimate bias over the payloads (helix, windy)."""
    return _sweep_plot(
        rows,
        "payload",
        PAYLOAD_ORDER,
        lambda r: r["trajectory"] == "helix" and r["wind"] == "windy",
        "payload sweep (helix, windy)",
        "payload",
        out / "payload_sweep.png",
        bias=True,
    )


def wind_sweep(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """RMSE over the wind levels (heavy payload, helix)."""
    return _sweep_plot(
        rows,
        "wind",
        WIND_ORDER,
        lambda r: r["trajectory"] == "helix" and r["payload"] == "heavy",
        "wind sweep (heavy, helix)",
        "wind",
        out / "wind_sweep.png",
    )


#: every figure drawn by one job, by name, in the order the report lists them (the flight
#: animation, listed last, is one job per controller and is put together here)
FIGURES: dict[str, Callable[..., Path | None]] = {
    "disturbance_models": disturbance_models,
    "residual_learning": residual_learning,
    "tracking_comparison": tracking_comparison,
    "payload_sweep": payload_sweep,
    "wind_sweep": wind_sweep,
    "rls_adaptation": rls_adaptation,
}
ANIMATION = "flight_animation"
#: the animation's scenario and frame rate
ANIMATION_SCENARIO = ("heavy", "windy", "helix")
ANIMATION_SECONDS, ANIMATION_FPS = 8.0, 10
#: the order in which the jobs go to the workers, longest first (measured: a controller's
#: rendered flight, then the figures that read time series or the training data)
LONGEST_FIRST = (
    ANIMATION,
    "tracking_comparison",
    "residual_learning",
    "rls_adaptation",
    "disturbance_models",
    "payload_sweep",
    "wind_sweep",
)


def draw_figure(name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """One job of :func:`make_figures` (module level, so a worker process imports and calls it
    as the parent would): figure ``name`` of :data:`FIGURES`, or ``flight_animation:<label>``,
    that controller's rendered frames (or why nothing renders here)."""
    if name.startswith(ANIMATION + ":"):
        return name, frames_or_reason(*args)
    return name, FIGURES[name](*args)


def figure_jobs(
    rows: list[dict[str, Any]],
    run_dir: str | Path,
    out: Path,
    training: dict[str, Path] | None = None,
    animation: bool = True,
) -> list[tuple[str, tuple[Any, ...]]]:
    """``(name, args)`` of every job :func:`make_figures` runs for flown ``rows``: the figures
    in :data:`FIGURES` order, then one rendered flight per animated controller."""
    series_dir = Path(run_dir) / "series"
    train = training or {}
    jobs: list[tuple[str, tuple[Any, ...]]] = [
        ("disturbance_models", (out,)),
        (
            "residual_learning",
            (train.get("logdir"), train.get("dataset"), train.get("weights"), out),
        ),
        ("tracking_comparison", (rows, series_dir, out)),
        ("payload_sweep", (rows, out)),
        ("wind_sweep", (rows, out)),
        ("rls_adaptation", (series_dir, out)),
    ]
    if animation:
        ctrls = [c for c in ("geo", "geo_res", "geo_rls") if c in _controllers(rows)]
        for c in ctrls or _controllers(rows)[:3]:  # an RL series flies its training seed 0
            args = (c, *ANIMATION_SCENARIO, ANIMATION_SECONDS, ANIMATION_FPS)
            jobs.append((f"{ANIMATION}:{c}", args))
    return jobs


#: the figures drawn from a sweep's rows and saved series alone (no training run, no rendering):
#: those ``rquad report --rewrite`` redraws
FROM_ROWS = (
    "disturbance_models",
    "tracking_comparison",
    "payload_sweep",
    "wind_sweep",
    "rls_adaptation",
)


def redraw_figures(
    rows: list[dict[str, Any]], run_dir: str | Path, out_dir: str | Path, names: Iterable[str]
) -> dict[str, Path]:
    """Redraw those of ``names`` that are :data:`FROM_ROWS` from the rows and the series saved
    in ``run_dir`` into ``out_dir`` (the same files :func:`make_figures` writes); a figure
    whose series are not there is not drawn and its file stays. Returns name → path of the
    drawn ones."""
    from residual_quad.evaluation.sweep.rows import flown_rows

    wanted = set(names) & set(FROM_ROWS)
    out = Path(out_dir)
    drawn = {}
    for name, args in figure_jobs(flown_rows(rows), run_dir, out, animation=False):
        if name in wanted and (path := draw_figure(name, args)[1]) is not None:
            drawn[name] = path
    return drawn


def make_figures(
    rows: list[dict[str, Any]],
    run_dir: str | Path,
    out_dir: str | Path,
    training: dict[str, Path] | None = None,
    animation: bool = True,
    progress: bool = False,
    workers: int | None = 1,
) -> dict[str, Path]:
    """Every figure the rows and series allow; returns name → path in :data:`FIGURES` order,
    the flight animation last (``progress``: a bar).

    ``training`` may name the residual network's ``logdir`` (TensorBoard), ``dataset`` and
    ``weights`` for the learning-curve/scatter figure. Failure rows (controller errors) are
    left out; every training seed of an RL policy is drawn as one series with the others
    (:mod:`~residual_quad.evaluation.report.series`), so pass all the rows. ``workers``:
    processes drawing at once (``None``: every core; 1: one job after the other in this process);
    each figure and each animated flight is drawn by one process from the same data, so the files
    do not depend on it.
    """
    from residual_quad.evaluation.sweep.rows import flown_rows
    from residual_quad.parallel import map_jobs

    rows = flown_rows(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = figure_jobs(rows, run_dir, out, training, animation)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    jobs.sort(key=lambda job: rank[job[0].partition(":")[0]])  # stable: flights keep their order
    n = min(workers or os.cpu_count() or 1, len(jobs))
    drawn: dict[str, Any] = {}
    results = map_jobs([(draw_figure, job) for job in jobs], workers=n)
    with tqdm(total=len(jobs), desc="figures", unit="job", disable=not progress) as bar:
        for name, result in results:
            drawn[name] = result
            bar.set_postfix_str(name)
            bar.update()
    figs = {k: p for k in FIGURES if (p := drawn.get(k)) is not None}
    flights = {n.partition(":")[2]: drawn[n] for n, _ in jobs if n.startswith(ANIMATION + ":")}
    if flights:
        reason = next((f for f in flights.values() if isinstance(f, str)), None)
        if reason is not None:
            print(reason)
        else:
            caption = "{} payload, {}, {}".format(*ANIMATION_SCENARIO)
            figs[ANIMATION] = write_animation(out, flights, caption, ANIMATION_FPS)
    return figs
