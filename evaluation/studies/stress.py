"""Stress scenarios: what happens outside the nominal envelope (``rquad stress``).

Three groups (``configs/stress.yaml``): (a) take-off with a large heading error (the
90°-yaw-start flip of [RES §9]), (b) references beyond the thrust/tilt envelope (fast
figure-8 with the ``extra`` payload, large position steps) and (c) strong gusts. A stress study is
a sweep variant: every scenario × controller × seed is a :class:`~residual_quad.episode.RunSpec`
flown by the sweep engine (atomic, fsynced, resumable rows in ``rows.jsonl``, written and read
through :mod:`residual_quad.evaluation.sweep.rows`); the summary table (crash rate, flips, max
tilt, RMSE) goes to ``stress.md``, with a figure of the max tilt and the tilt time series of the
first seed.

Outcomes: a *crash* is a physical end of the flight (tilt beyond 90°, floor contact faster than the
crash speed, non-finite state); *lost* is the env's other termination, a position error beyond
5 m (blown away by the wind, or left behind by a reference it cannot follow); a *flip* is a run
whose tilt exceeded 90° (upside down), whatever ended it. A run *survives* when it completes the
episode. RMSE is computed after 3 s over the runs that survived.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad import configs
from residual_quad.controllers.batch import batch_from_spec, has_batch_path
from residual_quad.controllers.specs import ControllerEntry, ControllerSpec
from residual_quad.envs.disturbances import WindModel, resolve_payload
from residual_quad.envs.trajectories import TRAJECTORIES, check_reference
from residual_quad.episode import RunSpec, build_controller, fly, fly_batch
from residual_quad.evaluation.sweep.config import (
    ControllerLabels,
    SweepConfig,
    check_episode_s,
    check_seeds,
    check_unique,
    expand,
)
from residual_quad.evaluation.sweep.engine import run_one, run_rows, sweep_batches
from residual_quad.evaluation.sweep.rows import (
    SERIES_DIR,
    failure_row,
    finite,
    flown_rows,
    is_failed,
    series_stem,
)
from residual_quad.parallel import Job
from residual_quad.training.blas import blas_threads

GROUPS = ("yaw", "envelope", "gust")
CONFIG_FILE = "stress_config.yaml"
#: the keys ``--resume`` may change (each run's id names its seed): ``engine.check_resume_config``
RESUME_FREE_KEYS = ("seeds",)
LOST = ("position_error",)  # terminations that are not a physical crash
FLIP_TILT = math.pi / 2  # rad, a run whose tilt exceeded this was upside down


def _finite_numbers(values: Any, n: int) -> bool:
    """Whether ``values`` is a sequence of ``n`` finite real numbers (bools excluded)."""
    return (
        isinstance(values, list | tuple)
        and len(values) == n
        and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
    )


@dataclass
class TrajectorySpec:
    """A shipped trajectory by name with constructor parameters (e.g. ``period`` in s)."""

    name: str = "hover"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in TRAJECTORIES:
            raise ValueError(f"unknown trajectory {self.name!r}; valid: {', '.join(TRAJECTORIES)}")
        if not isinstance(self.params, dict):
            raise ValueError(
                f"trajectory {self.name}: params must be a mapping, got {self.params!r}"
            )
        traj = self.build()  # unknown parameters and wrong types fail at load time
        for t in (0.0, 0.37, 1.0, 3.3, 10.0):  # s; a reference that is not finite cannot be flown
            try:
                check_reference(traj, traj(t), t)
            except (ArithmeticError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"trajectory {self.name}: params {self.params} give no finite reference ({exc})"
                ) from None

    def build(self) -> Any:
        """The trajectory object (parameters type-checked against the trajectory's fields)."""
        return configs.from_dict(TRAJECTORIES[self.name], self.params, f"trajectory {self.name}")


@dataclass
class StressScenario:
    """One stress case; every field but ``name`` and ``group`` has a nominal default."""

    name: str
    group: str  # one of GROUPS
    description: str = ""
    trajectory: str | TrajectorySpec = "hover"
    payload: str | float = "none"
    wind: str | list[float] = "calm"  # level name or [mean, sigma] in m/s
    yaw_offset_deg: float = 0.0  # deg, heading error at take-off
    position_offset: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # m
    episode_s: float | None = None  # s, default: the config's

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"scenario name must be a non-empty string, got {self.name!r}")
        if self.group not in GROUPS:
            raise ValueError(f"scenario {self.name}: group must be one of {GROUPS}")
        if isinstance(self.trajectory, str):
            self.trajectory = TrajectorySpec(self.trajectory)
        if not isinstance(self.trajectory, TrajectorySpec):
            raise ValueError(f"scenario {self.name}: trajectory is a name or {{name, params}}")
        resolve_payload(self.payload)  # a level name or a finite mass >= 0 kg
        if not _finite_numbers(self.position_offset, 3):
            raise ValueError(f"scenario {self.name}: position_offset needs 3 finite values (m)")
        if isinstance(self.wind, str):
            WindModel.from_spec(self.wind)  # a known level name
        elif not _finite_numbers(self.wind, 2) or min(self.wind) < 0:
            raise ValueError(
                f"scenario {self.name}: wind is a level name or [mean, sigma] >= 0 m/s, "
                f"got {self.wind!r}"
            )
        if not _finite_numbers([self.yaw_offset_deg], 1):
            raise ValueError(f"scenario {self.name}: yaw_offset_deg must be finite (deg)")
        if self.episode_s is not None:  # the stress study flies the env's default settings
            check_episode_s(self.episode_s, where=f"scenario {self.name}: ")

    def spec(self, controller: str, seed: int, episode_s: float) -> RunSpec:
        """The run of ``controller`` (a label) in this scenario."""
        assert isinstance(self.trajectory, TrajectorySpec)
        return RunSpec(
            controller,
            payload=self.payload,
            wind=self.wind if isinstance(self.wind, str) else tuple(float(v) for v in self.wind),
            trajectory=self.trajectory.name,
            seed=int(seed),
            trajectory_params=tuple(self.trajectory.params.items()),
            reset_options=(
                ("yaw_offset", math.radians(self.yaw_offset_deg)),
                ("position_offset", [float(v) for v in self.position_offset]),
            ),
            episode_s=self.episode_s or episode_s,
            scenario=self.name,
            group=self.group,
        )


@dataclass
class StressConfig(ControllerLabels):
    """The stress set: controllers × scenarios × seeds."""

    #: compact specs or ``{spec, options, label}`` mappings, as in a sweep config
    controllers: list[str | ControllerEntry] = field(
        default_factory=lambda: [
            "geo",
            "geo_rls",
            "hnewton",
            "hnewton:gn",
            "hnewton:lm",
            "hnewton:bfgs",
            "hnewton_rls",
        ]
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    episode_s: float = 12.0  # s
    controller_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per label
    scenarios: list[StressScenario] = field(default_factory=list)  # the study's data: YAML only

    def __post_init__(self) -> None:
        """Unknown labels, duplicates (a controller, seed or scenario name listed twice would fly
        the same ``run_id`` twice), seeds and episode lengths the env refuses and bad controller
        options are errors at load naming the culprit."""
        self._resolve_controllers()
        check_seeds(self.seeds)
        check_episode_s(self.episode_s)  # the default env: a stress study sets no env arguments
        check_unique("scenario names", [s.name for s in self.scenarios])
        self._check_controller_builds({})  # a user factory that raises fails its runs instead


def stress_row(
    spec: RunSpec,
    options: dict[str, Any] | None = None,
    series_dir: str | None = None,
    controller: ControllerSpec | None = None,
) -> dict[str, Any]:
    """Fly one stress run and return its row; the tilt series goes to ``series_dir`` if given.
    ``controller`` is the resolved spec of the run's label (default: the label parsed). A
    controller that fails (cannot be built, raises, acts non-finite) gives a failure row
    (:func:`~residual_quad.evaluation.sweep.rows.failure_row`) instead of an exception."""
    steps = [0]

    def count(step: int, *_: Any) -> None:
        steps[0] = step

    try:
        built = build_controller(controller or spec.controller, None, options)
    except Exception as exc:
        return failure_row(spec, exc, None)
    try:
        res = fly(spec, callback=count, controller=built)
    except Exception as exc:  # failed at the action after ``steps[0]`` steps
        return failure_row(spec, exc, steps[0])

    return _result_row(spec, res, series_dir)


def _result_row(spec: RunSpec, res: Any, series_dir: str | None) -> dict[str, Any]:
    """The stress row of a flown run (an :class:`~residual_quad.episode.EpisodeResult`); its tilt
    series goes to ``series_dir`` if given."""
    if series_dir is not None:
        np.save(
            Path(series_dir) / f"{series_stem(spec.run_id)}.npy", np.column_stack([res.t, res.tilt])
        )
    return {
        "run_id": spec.run_id,
        "controller": spec.controller,
        "scenario": spec.scenario,
        "group": spec.group,
        "seed": spec.seed,
        "crashed": bool(res.diverged) and res.termination not in LOST,
        "lost": bool(res.diverged) and res.termination in LOST,
        "survived": not res.diverged,
        "termination": res.termination,
        "flipped": bool(float(res.tilt.max()) > FLIP_TILT),
        "max_tilt_deg": math.degrees(float(res.tilt.max())),
        "rmse": finite(res.rmse),
        "max_error": finite(res.max_error),
        "duration": res.duration,
        "wall_time": res.wall_time,
    }


def stress_batch(
    specs: list[RunSpec], cfg: StressConfig, series_dirs: list[str | None]
) -> list[dict[str, Any]]:
    """Stress rows of ``specs`` (controllers with a vectorized path) flown together on the vector
    env, one batch per label and episode length (:func:`~residual_quad.episode.fly_batch`): equal
    to :func:`stress_row`'s to ≤ 1e-9 (``wall_time``: the batch's, shared). A batch that fails
    is flown again run by run with :func:`stress_row`, which isolates the failing runs."""
    out: list[dict[str, Any] | None] = [None] * len(specs)
    groups: dict[tuple[str, float], list[int]] = {}
    for i, s in enumerate(specs):
        groups.setdefault((s.controller, s.episode_s), []).append(i)
    for (label, _), idx in groups.items():
        ctrl, opts = cfg.controller_spec(label), cfg.controller_options.get(label, {})
        try:
            batch = batch_from_spec(ctrl, len(idx), None, **opts)
            with blas_threads(1):  # one process per core: a second BLAS thread only contends
                results = fly_batch([specs[i] for i in idx], batch)
        except Exception:
            for i in idx:
                out[i] = stress_row(specs[i], opts, series_dirs[i], ctrl)
            continue
        for i, res in zip(idx, results, strict=True):
            out[i] = _result_row(specs[i], res, series_dirs[i])
    return out  # type: ignore[return-value]


def _stress_batches(
    cfg: StressConfig, specs: dict[str, RunSpec], jobs: dict[str, Job], keep: dict[str, str | None]
) -> Callable[[list[str], int], list[Job]]:
    """The vector backend's ``batches(run_ids, workers)``: the runs of vectorized controllers in
    ``workers`` equal batches of every controller and scenario, the others one job each."""

    def batches(run_ids: list[str], n: int) -> list[Job]:
        vectorized = {
            label: has_batch_path(
                cfg.controller_spec(label), **cfg.controller_options.get(label, {})
            )
            for label in cfg.labels
        }
        flat = [i for i in run_ids if vectorized[specs[i].controller]]
        parts = max(1, min(len(flat), n))
        out: list[Job] = []
        for j in range(parts if flat else 0):
            part = flat[j::parts]
            out.append((stress_batch, ([specs[i] for i in part], cfg, [keep[i] for i in part])))
        return out + [jobs[i] for i in run_ids if not vectorized[specs[i].controller]]

    return batches


def run_stress(
    cfg: StressConfig,
    out_dir: str | Path | None = None,
    *,
    resume: bool = False,
    workers: int | None = None,
    progress: bool = False,
    retry_failed: bool = False,
    backend: str = "vector",
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], np.ndarray]]:
    """Fly every (scenario, controller, seed) with the sweep engine.

    ``backend="vector"`` flies the controllers with a vectorized path in batches on the vector
    env (:func:`stress_batch`; rows equal one flight per run to ≤ 1e-9), ``"local"`` one run per
    job (:func:`stress_row`).

    Rows go to ``out_dir/rows.jsonl`` (atomic, fsynced, ``resume`` skips finished runs and
    recorded failures, ``retry_failed`` flies the failures again) and come back in the config's
    order, failure rows of runs whose controller failed included; the second value holds the
    tilt series (t, rad) of the first seed per (scenario, controller), saved under
    ``out_dir/series`` (empty without ``out_dir``).
    """
    if not cfg.scenarios:
        raise ValueError("the stress config lists no scenarios; see the shipped config 'stress'")
    series_dir = None
    if out_dir is not None:
        series_dir = Path(out_dir) / SERIES_DIR
        try:
            series_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create the series folder {series_dir}: {exc}") from exc
    if backend not in ("local", "vector"):
        raise ValueError(f"unknown backend {backend!r}; valid choices: local, vector")
    jobs: dict[str, Job] = {}
    specs: dict[str, RunSpec] = {}
    keep: dict[str, str | None] = {}
    for scn in cfg.scenarios:
        for label in cfg.labels:
            ctrl = cfg.controller_spec(label)
            opts = cfg.controller_options.get(label)
            for i, seed in enumerate(cfg.seeds):
                spec = scn.spec(label, seed, cfg.episode_s)
                specs[spec.run_id] = spec
                keep[spec.run_id] = str(series_dir) if series_dir is not None and i == 0 else None
                jobs[spec.run_id] = (stress_row, (spec, opts, keep[spec.run_id], ctrl))
    rows = run_rows(
        jobs,
        out_dir,
        config=cfg,
        config_file=CONFIG_FILE,
        resume=resume,
        backend=backend,
        batches=_stress_batches(cfg, specs, jobs, keep),
        workers=workers,
        progress=progress,
        desc="stress",
        retry_failed=retry_failed,
        free_keys=RESUME_FREE_KEYS,
    )
    series: dict[tuple[str, str], np.ndarray] = {}
    if series_dir is not None:
        for scn in cfg.scenarios:
            for label in cfg.labels:
                path = series_dir / f"{series_stem(scn.spec(label, cfg.seeds[0], 0).run_id)}.npy"
                if path.exists():
                    series[(scn.name, label)] = np.load(path)
    return rows, series


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (scenario, controller): crash/flip counts, tilt and RMSE statistics.

    Failed runs (controller errors) are counted in ``failed`` and ``runs`` and left out of every
    statistic; ``max_tilt_deg`` and ``mean_max_tilt_deg`` are None when every run failed."""
    out: list[dict[str, Any]] = []
    keys: list[tuple[str, str]] = []
    for r in rows:
        k = (r["scenario"], r["controller"])
        if k not in keys:
            keys.append(k)
    for scn, ctl in keys:
        every = [r for r in rows if r["scenario"] == scn and r["controller"] == ctl]
        rs = flown_rows(every)
        ok = [r["rmse"] for r in rs if r["survived"] and r["rmse"] is not None]
        terms = sorted({r["termination"] for r in rs if not r["survived"]})
        tilts = [r["max_tilt_deg"] for r in rs]
        entry = {
            "scenario": scn,
            "group": every[0]["group"],
            "controller": ctl,
            "runs": len(every),
            "crashes": sum(r["crashed"] for r in rs),
            "lost": sum(r["lost"] for r in rs),
            "survived": sum(r["survived"] for r in rs),
            "flips": sum(r["flipped"] for r in rs),
            "terminations": terms,
            "max_tilt_deg": max(tilts) if tilts else None,
            "mean_max_tilt_deg": float(np.mean(tilts)) if tilts else None,
            "rmse": float(np.mean(ok)) if ok else None,
        }
        failed = len(every) - len(rs)
        if failed:  # the key only where runs failed: summaries of clean studies are unchanged
            entry["failed"] = failed
        out.append(entry)
    return out


def format_table(summary: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`summarize`; a ``failed`` column (controller errors) only when a
    run failed."""
    any_failed = any(s.get("failed") for s in summary)
    fail_head, fail_rule = (" failed |", "---|") if any_failed else ("", "")
    lines = [
        "| scenario | controller | survived | crashed | lost (>5 m) | flipped |"
        + fail_head
        + " max tilt (°) | mean max tilt (°) | RMSE of survivors (m) | how it ended |",
        "|---|---|---|---|---|---|" + fail_rule + "---|---|---|---|",
    ]

    def deg(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"

    for s in summary:
        rmse = f"{s['rmse']:.3f}" if s["rmse"] is not None else "–"
        ended = ", ".join(s["terminations"]) if s["terminations"] else "all survived"
        if s.get("failed"):
            ended = (ended + ", " if s["terminations"] else "") + "controller failed"
        failed = f" {s.get('failed', 0)} |" if any_failed else ""
        lines.append(
            f"| {s['scenario']} | {s['controller']} | {s['survived']}/{s['runs']} "
            f"| {s['crashes']} | {s['lost']} | {s['flips']} |{failed} {deg(s['max_tilt_deg'])} "
            f"| {deg(s['mean_max_tilt_deg'])} | {rmse} | {ended} |"
        )
    return "\n".join(lines)


def survival_check(
    summary: list[dict[str, Any]], reference: str = "geo", candidate: str = "hnewton"
) -> dict[str, list[str]]:
    """Survival target for ``candidate``: in every scenario where ``reference`` crashed or
    flipped in some run, did ``candidate`` survive every run? Returns the scenarios where it
    ``crashed_or_flipped`` and where it only got ``lost`` (both empty = target met)."""
    out: dict[str, list[str]] = {"crashed_or_flipped": [], "lost": []}
    for s in summary:
        if s["controller"] != reference or not (s["crashes"] or s["flips"]):
            continue
        for h in summary:
            if h["scenario"] != s["scenario"] or h["controller"] != candidate:
                continue
            if h["crashes"] or h["flips"]:
                out["crashed_or_flipped"].append(f"{h['scenario']} ({h['crashes']} crashes)")
            elif h["lost"]:
                out["lost"].append(f"{h['scenario']} ({h['lost']}/{h['runs']} lost)")
    return out


def plot_stress(
    summary: list[dict[str, Any]],
    series: dict[tuple[str, str], np.ndarray],
    out_dir: str | Path,
) -> list[Path]:
    """Bar chart of the max tilt (crashes hatched) and tilt time series of the first seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    scenarios = list(dict.fromkeys(s["scenario"] for s in summary))
    ctls = list(dict.fromkeys(s["controller"] for s in summary))
    width = 0.8 / max(len(ctls), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.3 * len(scenarios)), 4.2))
    for j, c in enumerate(ctls):
        xs, hs, crashed = [], [], []
        for i, sc in enumerate(scenarios):
            e = next((s for s in summary if s["scenario"] == sc and s["controller"] == c), None)
            if e is None or e["max_tilt_deg"] is None:  # none, or every run failed
                continue
            xs.append(i + (j - (len(ctls) - 1) / 2) * width)
            hs.append(min(e["max_tilt_deg"], 180.0))
            crashed.append(e["survived"] < e["runs"])
        bars = ax.bar(xs, hs, width, label=c)
        for b, cr in zip(bars, crashed, strict=True):  # hatched: at least one run ended early
            if cr:
                b.set_hatch("///")
                b.set_edgecolor("black")
    ax.axhline(90.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels(scenarios, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("max tilt over seeds (°)")
    ax.set_title("max tilt per scenario; hatched: at least one run ended early", fontsize=9)
    tilts = [s["max_tilt_deg"] for s in summary if s["max_tilt_deg"] is not None]
    ax.set_ylim(0.0, max([100.0] + [min(t, 180.0) + 5.0 for t in tilts]))
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    p1 = out / "max_tilt.png"
    fig.savefig(p1, dpi=120)
    plt.close(fig)

    n = len(scenarios)
    cols = 3
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(12, 2.8 * rows_n), squeeze=False)
    for k, sc in enumerate(scenarios):
        ax = axes[k // cols][k % cols]
        for c in ctls:
            s = series.get((sc, c))
            if s is not None:
                ax.plot(s[:, 0], np.degrees(s[:, 1]), lw=0.9, label=c)
        ax.set_title(sc, fontsize=9)
        ax.set_ylim(0, 185)
        ax.axhline(90.0, color="k", lw=0.6, ls="--")
        ax.set_xlabel("t (s)", fontsize=8)
        ax.set_ylabel("tilt (°)", fontsize=8)
    for k in range(n, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    p2 = out / "tilt_series.png"
    fig.savefig(p2, dpi=110)
    plt.close(fig)
    return [p1, p2]


# ------------------------------------------------------------------------------ nominal matrix
def nominal_comparison(
    controllers: tuple[str, str] = ("geo_rls", "hnewton_rls"),
    *,
    payloads: tuple[str, ...] = ("none", "light", "heavy", "extra"),
    winds: tuple[str, ...] = ("calm", "breezy", "windy"),
    trajectories: tuple[str, ...] = ("helix", "figure8"),
    seeds: tuple[int, ...] = (0, 1, 2),
    options: dict[str, dict[str, Any]] | None = None,
    episode_s: float = 20.0,
    workers: int | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Main-table cells (payload × wind, mean RMSE over trajectories × seeds) of two controllers
    and their ratio (the nominal target: ``hnewton_rls`` within 10 % of ``geo_rls``), flown by
    the sweep engine's vector backend (both controllers batched; the rows equal one flight per
    run to ≤ 1e-9)."""
    cfg = SweepConfig(
        controllers=list(controllers),
        payloads=list(payloads),
        winds=list(winds),
        trajectories=list(trajectories),
        seeds=list(seeds),
        episode_s=episode_s,
        controller_options=options or {},
    )
    specs = {s.run_id: s for s in expand(cfg)}
    jobs: dict[str, Job] = {i: (run_one, (s, cfg, None)) for i, s in specs.items()}
    rows = run_rows(
        jobs,
        None,
        backend="vector",
        workers=workers,
        progress=progress,
        desc="nominal",
        batches=sweep_batches(cfg, specs, jobs, None),
    )
    cells = []
    for payload in payloads:
        for wind in winds:
            cell: dict[str, Any] = {"payload": payload, "wind": wind}
            for label in controllers:
                every = [
                    r
                    for r in rows
                    if (r["controller"], r["payload"], r["wind"]) == (label, payload, wind)
                ]
                runs = flown_rows(every)
                crashed = sum(r["diverged"] for r in runs)
                vals = [r["rmse"] for r in runs]
                mean = float(np.mean(vals)) if vals else float("nan")  # nan: every run failed
                cell[label] = mean if not crashed else float("inf")
                cell[f"{label}_crashed"] = crashed
                if len(every) > len(runs):
                    cell[f"{label}_failed"] = sum(is_failed(r) for r in every)
            a, b = controllers
            cell["ratio"] = cell[b] / cell[a] if cell[a] > 0 else float("nan")
            cells.append(cell)
    return cells


def format_nominal(cells: list[dict[str, Any]], controllers: tuple[str, str]) -> str:
    """Markdown table of :func:`nominal_comparison`."""
    a, b = controllers
    lines = [
        f"| payload | wind | {a} RMSE (m) | {b} RMSE (m) | ratio {b}/{a} | within 10 % |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        ok = "yes" if c["ratio"] <= 1.10 else "**no**"
        lines.append(
            f"| {c['payload']} | {c['wind']} | {c[a]:.4f} | {c[b]:.4f} | {c['ratio']:.3f} | {ok} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ CLI
