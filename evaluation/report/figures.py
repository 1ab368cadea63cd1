"""Figures (PNG) from sweep rows and the saved time series; nothing here flies a controller.

The disturbance-model figure plots the models themselves; the flight animation is the one figure
that renders (MuJoCo, headless) and it is skipped with a message where no OpenGL is available.
"""

from __future__ import annotations

import os
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
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
from residual_quad.evaluation.report.tables import (  # noqa: E402
    PAYLOAD_ORDER,
    WIND_ORDER,
    controller_order,
)
from residual_quad.evaluation.sweep.rows import series_stem  # noqa: E402

COLORS = {
    "pid": "#7f7f7f",
    "geo": "#1f77b4",
    "geo_res": "#2ca02c",
    "geo_rls": "#d62728",
    "geo_rls_dob": "#e7298a",
    "hnewton": "#9467bd",
    "hnewton_rls": "#8c564b",
    "ppo": "#ff7f0e",
    "ppo_res": "#ffbb78",
}


#: colours of user labels (not in :data:`COLORS`), picked by a stable hash of the label
USER_COLORS = ("#17becf", "#bcbd22", "#e377c2", "#393b79", "#637939", "#843c39", "#7b4173")


def color_of(label: str) -> str:
    """The colour of a controller label: the built-ins' own, else a stable one from
    :data:`USER_COLORS` (the same label gets the same colour in every figure and run)."""
    if label in COLORS:
        return COLORS[label]
    return USER_COLORS[zlib.crc32(str(label).encode("utf-8")) % len(USER_COLORS)]


def _series_path(series_dir: Path, run_id: str) -> Path:
    return series_dir / (series_stem(run_id) + ".npz")


#: the arrays of a saved series the figures plot (the others are not decompressed)
PLOTTED = ("t", "pos", "ref", "residual_est", "residual_true")


def _load_series(series_dir: Path, run_id: str) -> dict[str, np.ndarray] | None:
    p = _series_path(series_dir, run_id)
    if not p.exists():
        return None
    with np.load(p) as z:
        return {k: z[k] for k in PLOTTED if k in z.files}


def has_estimate(residual_est: np.ndarray) -> bool:
    """Whether a stored ``residual_est`` series (T, 3) holds a residual estimate to draw: finite
    after row 0 (NaN by construction: no estimate before the first step) and not all zero (the
    trackers without a residual estimate store zeros)."""
    est = np.asarray(residual_est, dtype=float)[1:]
    return bool(est.size) and bool(np.isfinite(est).all()) and bool(np.abs(est).max() > 0)


def _controllers(rows: list[dict[str, Any]]) -> list[str]:
    return controller_order(rows)


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
    ax[2].set(ylabel="vertical residual in hover (m/s²)", title="(c) payload residual g·Δm/m")
    for i, d in enumerate(da):
        ax[2].text(i, d + 0.1, f"{d:.2f}", ha="center")
    fig.tight_layout()
    path = out / "disturbance_models.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tracking_comparison(
    rows: list[dict[str, Any]],
    series_dir: Path,
    out: Path,
    payload: str = "heavy",
    wind: str = "windy",
    trajectory: str = "helix",
    seed: int = 0,
) -> Path | None:
    """Four-panel comparison of every controller on one showcase scenario."""
    ctrls = _controllers(rows)
    series = {}
    for c in ctrls:
        s = _load_series(series_dir, f"{c}|{payload}|{wind}|{trajectory}|{seed}")
        if s is not None:
            series[c] = s
    if not series:
        return None
    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    ref = next(iter(series.values()))
    ax[0, 0].plot(ref["ref"][:, 0], ref["ref"][:, 1], "k--", lw=1, label="reference")
    for c, s in series.items():
        col = color_of(c)
        ax[0, 0].plot(s["pos"][:, 0], s["pos"][:, 1], color=col, lw=1, label=c)
        ax[0, 1].plot(s["t"], s["pos"][:, 2], color=col, lw=1, label=c)
        err = np.linalg.norm(s["pos"] - s["ref"], axis=1)
        ax[0, 2].plot(s["t"], err, color=col, lw=1, label=c)
        if has_estimate(s["residual_est"]):
            # row 0 is NaN by construction (no estimate before the first step)
            ax[1, 0].plot(
                s["t"][1:], s["residual_est"][1:, 2], color=col, lw=1, label=f"{c} estimate"
            )
    ax[0, 1].plot(ref["t"], ref["ref"][:, 2], "k--", lw=1, label="reference")
    ax[1, 0].plot(ref["t"], ref["residual_true"][:, 2], "k", lw=0.6, alpha=0.6, label="true")
    ax[0, 0].set(xlabel="x (m)", ylabel="y (m)", title="(a) horizontal path", aspect="equal")
    ax[0, 1].set(xlabel="t (s)", ylabel="z (m)", title="(b) height")
    ax[0, 2].set(xlabel="t (s)", ylabel="|e_p| (m)", title="(c) position error")
    ax[1, 0].set(xlabel="t (s)", ylabel="Δa_z (m/s²)", title="(d) vertical residual: truth vs Δâ")
    sel = [
        r
        for r in rows
        if r["payload"] == payload
        and r["wind"] == wind
        and r["trajectory"] == trajectory
        and not r["diverged"]
    ]
    by = defaultdict(list)
    for r in sel:
        by[r["controller"]].append(r)
    names = [c for c in ctrls if c in by]
    ax[1, 1].bar(
        names,
        [np.mean([r["control_cost"] for r in by[c]]) for c in names],
        color=[color_of(c) for c in names],
    )
    ax[1, 1].set(ylabel="∫ΣT² dt (N²·s)", title="(e) control cost")
    ax[1, 2].bar(
        names,
        [np.mean([r["rmse"] for r in by[c] if r["rmse"] is not None] or [np.nan]) for c in names],
        color=[color_of(c) for c in names],
    )
    ax[1, 2].set(ylabel="RMSE after 3 s (m)", title="(f) steady-state accuracy", yscale="log")
    for a in (ax[1, 1], ax[1, 2]):
        a.tick_params(axis="x", labelrotation=30)
    for a in (ax[0, 0], ax[0, 2], ax[1, 0]):
        a.legend(fontsize=7)
    fig.suptitle(f"{payload} payload, {wind}, {trajectory} (seed {seed})")
    fig.tight_layout()
    path = out / "tracking_comparison.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _sweep_plot(
    rows: list[dict[str, Any]],
    key: str,
    order: list[str],
    select,
    title: str,
    xlabel: str,
    path: Path,
    bias: bool = False,
) -> Path | None:
    sel = [r for r in rows if select(r) and not r["diverged"] and r[key] in order]
    if not sel:
        return None
    ctrls = _controllers(sel)
    xs = [v for v in order if any(r[key] == v for r in sel)]
    ncol = 2 if bias else 1
    fig, axes = plt.subplots(1, ncol, figsize=(6.5 * ncol, 4))
    axes = np.atleast_1d(axes)
    for c in ctrls:
        ys = [
            np.mean(
                [
                    r["rmse"]
                    for r in sel
                    if r["controller"] == c and r[key] == x and r["rmse"] is not None
                ]
                or [np.nan]
            )
            for x in xs
        ]
        axes[0].plot(xs, ys, "o-", color=color_of(c), label=c)
        if bias:
            b = [
                np.mean(
                    [
                        r["residual_bias"]
                        for r in sel
                        if r["controller"] == c
                        and r[key] == x
                        and r.get("residual_bias") is not None
                    ]
                    or [np.nan]
                )
                for x in xs
            ]
            if np.isfinite(b).any() and c not in ("pid",):
                axes[1].plot(xs, b, "o-", color=color_of(c), label=c)
    if "extra" in xs:
        i = xs.index("extra")
        for a in axes:
            a.axvspan(i - 0.4, i + 0.4, color="0.85", zorder=0)
    axes[0].set(xlabel=xlabel, ylabel="RMSE after 3 s (m)", title=title, yscale="log")
    axes[0].legend(fontsize=8)
    if bias:
        axes[1].set(
            xlabel=xlabel,
            ylabel="|mean(Δâ − Δa)| (m/s²)",
            title="residual-estimate bias (shaded: not in training)",
            yscale="log",
        )
        if axes[1].get_legend_handles_labels()[0]:
            axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rls_adaptation(
    series_dir: Path,
    out: Path,
    payload: str = "extra",
    wind: str = "windy",
    trajectory: str = "helix",
    seed: int = 0,
) -> Path | None:
    """Residual estimate vs truth on the unseen payload: offline net vs RLS, warm-up marked."""
    s_rls = _load_series(series_dir, f"geo_rls|{payload}|{wind}|{trajectory}|{seed}")
    s_res = _load_series(series_dir, f"geo_res|{payload}|{wind}|{trajectory}|{seed}")
    if s_rls is None:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(13, 4))
    t = s_rls["t"]
    ax[0].plot(t, s_rls["residual_true"][:, 2], "k", lw=0.5, alpha=0.5, label="true Δa_z")
    ax[0].plot(t, s_rls["residual_est"][:, 2], color=COLORS["geo_rls"], label="geo_rls Δâ_z")
    if s_res is not None:
        ax[0].plot(t, s_res["residual_est"][:, 2], color=COLORS["geo_res"], label="geo_res Δâ_z")
    warmup_s = residual_config().rls.warmup_steps * ControlContext().control_dt  # shipped config
    for a in ax:
        a.axvspan(0, warmup_s, color="0.9", zorder=0, label="RLS warm-up (identify only)")
    ax[0].set(
        xlabel="t (s)",
        ylabel="m/s²",
        title=f"(a) vertical residual, {payload} payload",
        ylim=(
            np.nanpercentile(s_rls["residual_true"][:, 2], 1) - 2,
            np.nanpercentile(s_rls["residual_true"][:, 2], 99) + 2,
        ),
    )
    ax[0].legend(fontsize=8)
    for name, s in (("geo_res", s_res), ("geo_rls", s_rls)):
        if s is not None:
            ax[1].plot(
                s["t"], np.linalg.norm(s["pos"] - s["ref"], axis=1), color=COLORS[name], label=name
            )
    ax[1].set(xlabel="t (s)", ylabel="|e_p| (m)", title="(b) position error", yscale="log")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    path = out / "rls_adaptation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
        for c in ctrls or _controllers(rows)[:3]:
            args = (c, *ANIMATION_SCENARIO, ANIMATION_SECONDS, ANIMATION_FPS)
            jobs.append((f"{ANIMATION}:{c}", args))
    return jobs


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
    left out. ``workers``: processes drawing at once (``None``: every core; 1: one job after
    the other in this process); each figure and each animated flight is drawn by one process
    from the same data, so the files do not depend on it.
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
