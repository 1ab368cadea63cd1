"""The lag sweep of the "Beyond the source" section: how each controller degrades with the rotors'
time constant and the latency, not at one point.

One matrix (``configs/lag_sweep.yaml``) is flown once per plant of a grid of rotor time constants
× latencies (command and sensor latency, each that many control periods), each into its own
sweep folder ``lag/<plant>/`` with its resolved config (:func:`lag_sweeps`); the controllers are
told each plant's rotor time constant and latencies, so they fly their defaults for it (the
gains of :func:`~residual_quad.controllers.attitude.default_attitude_gains`, the latency
predictor of :mod:`~residual_quad.controllers.latency`). Nothing here flies: the
table and the figure read the rows, and each folder's plant from the config saved next to them.

- the table: mean RMSE (helix and figure-8, every payload and seed) per plant × controller, the
  95 % bootstrap interval over seeds on every cell and the crashes next to the mean;
- the figure: that mean against the rotor time constant, one panel per latency, the interval
  as a band, a crash marked on its point.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from residual_quad import configs  # noqa: E402
from residual_quad.envs.presets import CONTROL_OPTIONS, PlantOptions, plant_options  # noqa: E402
from residual_quad.evaluation.report.beyond import LAG_DIR, Extras  # noqa: E402
from residual_quad.evaluation.report.style import (  # noqa: E402
    BAND_ALPHA,
    color_of,
    figure_legend,
    linestyle_of,
    series_handle,
)
from residual_quad.evaluation.report.tables import (  # noqa: E402
    TRACKING,
    Table,
    controller_order,
    grid_cells,
    grid_intervals,
)
from residual_quad.evaluation.sweep.config import CONFIG_FILE, SweepConfig  # noqa: E402
from residual_quad.evaluation.sweep.rows import flown_rows, read_rows  # noqa: E402


def plant_folder(rotor_tau_s: float, delay_steps: int) -> str:
    """The sweep folder of one plant of the grid: ``tau060ms_delay1``."""
    return f"tau{round(rotor_tau_s * 1000):03d}ms_delay{delay_steps}"


def plant_label(rotor_tau_s: float, delay_steps: int) -> str:
    """How the table names a plant."""
    return f"τ {rotor_tau_s * 1000:.0f} ms, latency {delay_steps}"


def lag_sweeps(
    matrix: SweepConfig, rotor_tau_s: list[float], delay_steps: list[int]
) -> list[tuple[str, SweepConfig]]:
    """``(folder, config)`` of every plant of the grid, time constants outer: ``matrix`` with its
    env's rotor time constant (s) and its command and sensor latencies (control periods, both the
    same) set; each value checked as the env checks it."""
    out = []
    for tau in rotor_tau_s:
        for delay in delay_steps:
            plant = {"rotor_tau_s": float(tau), "action_delay_steps": int(delay)}
            plant["obs_delay_steps"] = int(delay)
            plant_options(matrix.env.get("preset"), **plant)  # a bad value: the env's error
            env = {**matrix.env, **plant}
            out.append((plant_folder(tau, delay), dataclasses.replace(matrix, env=env)))
    return out


def _plant_of(folder: Path) -> PlantOptions:
    env = configs.read_yaml(folder / CONFIG_FILE).get("env") or {}
    return plant_options(env.get("preset"), **{k: env.get(k) for k in CONTROL_OPTIONS})


def lag_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of every plant folder under ``out_dir/lag/``, each with its plant's
    ``rotor_tau_s`` (s), ``delay_steps`` (periods) and ``plant`` label added (a copy), plants
    in grid order (time constant, then latency); ``[]`` without any."""
    folder = Path(out_dir) / LAG_DIR
    if not folder.is_dir():
        return []
    plants = []
    for d in folder.iterdir():
        if d.is_dir() and (d / CONFIG_FILE).is_file():
            opts = _plant_of(d)
            plants.append((opts.rotor_tau_s, opts.action_delay_steps, d))
    rows = []
    for tau, delay, d in sorted(plants, key=lambda p: p[:2]):
        extra = {"rotor_tau_s": tau, "delay_steps": delay, "plant": plant_label(tau, delay)}
        rows += [{**r, **extra} for r in flown_rows(read_rows(d))]
    return rows


def _tracking(r: dict[str, Any]) -> bool:
    return r["trajectory"] in TRACKING


def lag_table(rows: list[dict[str, Any]]) -> Table | None:
    """Mean RMSE (m) per plant × controller over the tracking runs, with intervals and crashes;
    ``None`` without rows."""
    rows = [r for r in rows if _tracking(r)]
    if not rows:
        return None
    controllers = controller_order(rows)
    keys = ("plant",)
    payloads = ", ".join(dict.fromkeys(str(r["payload"]) for r in rows))
    seeds = len({r["seed"] for r in rows})
    return Table(
        name="lag",
        title=(
            "Lag sweep: mean RMSE (m) per rotor time constant and latency, helix and figure-8, "
            f"payloads {payloads}, {seeds} seeds"
        ),
        headers=["plant", *controllers],
        rows=grid_cells(rows, _tracking, keys, controllers, "rmse"),
        intervals=grid_intervals(rows, _tracking, keys, controllers, "rmse"),
        note=(
            "Latency: command and sensor latency, each that many control periods (10 ms). Each "
            "controller flies its defaults for the plant it is told (behind lag the lag-tuned "
            "set at the bandwidth scheduled on the plant's lag and its rotor model, behind "
            "latency the latency predictor; docs/controllers.md); "
            "a cell with crashes shows them next to the mean of the other runs."
        ),
    )


def lag_figure(table: Table, rows: list[dict[str, Any]], path: Path) -> Path:
    """Mean RMSE against the rotor time constant, one panel per latency, every controller with
    its interval band, from :func:`lag_table`'s ``table`` of ``rows``; a plant where a
    controller crashed gets an ``x`` on its point (at the panel's top when every run crashed).
    Written to ``path``."""
    rows = [r for r in rows if _tracking(r)]
    controllers = table.headers[1:]
    plants = {r["plant"]: (r["rotor_tau_s"], r["delay_steps"]) for r in rows}
    delays = sorted({d for _, d in plants.values()})
    fig = plt.figure(figsize=(3.4 * len(delays) + 2.6, 3.8), layout="constrained")
    axes = fig.subplots(1, len(delays), squeeze=False, sharey=True)[0]
    for ax, delay in zip(axes, delays, strict=True):
        at = [i for i, row in enumerate(table.rows) if plants[row[0]][1] == delay]
        taus_ms = np.array([plants[table.rows[i][0]][0] * 1000 for i in at])
        for c in controllers:
            ivs = [table.intervals[c][i] for i in at]
            mean = np.array([np.nan if iv is None else iv.estimate for iv in ivs])
            low = np.array([np.nan if iv is None else iv.low for iv in ivs])
            high = np.array([np.nan if iv is None else iv.high for iv in ivs])
            color = color_of(c)
            ax.plot(taus_ms, mean, color=color, ls=linestyle_of(c), lw=1.4, marker="o", ms=3)
            ax.fill_between(taus_ms, low, high, color=color, alpha=BAND_ALPHA, lw=0)
            col = 1 + controllers.index(c)
            crashed = [k for k, i in enumerate(at) if isinstance(table.rows[i][col], str)]
            flew = [k for k in crashed if np.isfinite(mean[k])]
            if flew:  # some runs crashed: the mark on the others' mean
                ax.plot(taus_ms[flew], mean[flew], "x", color=color, ms=7, mew=1.6)
            lost = [k for k in crashed if not np.isfinite(mean[k])]
            if lost:  # every run crashed: no mean, the mark at the panel's top
                top = ax.get_xaxis_transform()  # x in data, y in axes fractions
                y = 0.97 - 0.04 * controllers.index(c)  # one row per controller
                ax.plot(
                    taus_ms[lost],
                    [y] * len(lost),
                    "x",
                    color=color,
                    ms=7,
                    mew=1.6,
                    transform=top,
                    clip_on=False,
                )
        ax.set_yscale("log")
        ax.set_title(f"latency {delay} period{'s' if delay != 1 else ''}", fontsize=9)
    axes[0].set_ylabel("mean RMSE (m)")
    fig.supxlabel("rotor time constant (ms)", fontsize=10)
    figure_legend(
        fig,
        [series_handle(c, band=True) for c in controllers],
        controllers,
        title="band: 95 % interval over seeds\nx: crashes (at the top: all runs)",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def lag_extras(out_dir: str | Path) -> Extras:
    """The lag sweep's table and figure (``figures/lag.png``) for the "Beyond the source"
    section of a pipeline output folder; empty without ``lag/`` rows. The pipeline and ``rquad
    report --rewrite`` both call it."""
    out = Path(out_dir)
    rows = lag_rows(out)
    table = lag_table(rows)
    if table is None:
        return Extras()
    fig = lag_figure(table, rows, out / "figures" / "lag.png")
    table = dataclasses.replace(table, note=f"{table.note} Rows: `{LAG_DIR}/<plant>/rows.jsonl`.")
    return Extras(tables=[table], figures={"lag sweep": fig})
