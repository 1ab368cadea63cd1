"""``rquad pipeline``: collect → train → evaluate → tables/figures → ``report.md``, one command.

Besides the source's matrix, the evaluation flies "beyond the source" by default: the matrix under
the ``realistic`` plant preset with 20 seeds per cell, the payload-pickup and rotor-fault
recovery sweeps and the lag sweep (rotor time constant × latency), for the report's "Beyond the
source" section (``docs/statistics.md``).

The trained network (not the packaged one) is what ``geo_res``/``geo_rls`` fly in the evaluation,
so the report measures exactly what this run produced. Every stage writes its resolved config next
to its output; the pipeline's own config is ``pipeline_config.yaml`` in the output folder.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.envs.presets import plant_options
from residual_quad.evaluation.report.beyond import (
    BEYOND_DIR,
    LAG_DIR,
    PIPELINE_CONFIG_FILE,
    RECOVERY_DIR,
    beyond_outcome_of,
    sweep_name,
)
from residual_quad.evaluation.sweep.config import SweepConfig
from residual_quad.evaluation.sweep.engine import check_resume_config, run_sweep, run_sweeps
from residual_quad.evaluation.sweep.rows import read_rows

RESIDUAL_CONTROLLERS = ("geo_res", "geo_rls", "hnewton_rls")
#: targets and diverged runs of the committed full run (``docs/results/report.md``): what a default
#: ``rquad pipeline`` should reproduce, and what its closing lines compare with
COMMITTED_OUTCOME = Path(__file__).with_name("committed_outcome.json")
COMMITTED_REPORT = "docs/results/report.md in the repository"
#: the ``what`` line of :data:`COMMITTED_OUTCOME` as :func:`record_outcome` writes it
COMMITTED_WHAT = (
    "targets and diverged runs of the committed matrix (docs/results/sweep/rows.jsonl, "
    "docs/results/report.md); under beyond, the runs, failed and diverged runs of each "
    "beyond-the-source sweep (docs/results/beyond/, docs/results/recovery/, docs/results/lag/)"
)
#: the one command that re-flies the committed results and records their outcome
REGENERATE = "rquad pipeline --out docs/results --record-outcome"
#: each stage's wall seconds (collect, train, evaluate, report) and the env-steps the evaluation
#: flew, next to ``report.md`` (``rquad bench --sections pipeline`` reads it)
TIMINGS_FILE = "pipeline_timings.json"
#: the pipeline-config keys ``--resume`` may change: processes and the rendered GIF, never a row
RESUME_FREE_KEYS = ("workers", "figure_workers", "animation")
#: the stage (a key of the timings) that flies the "Beyond the source" sweeps
BEYOND_STAGE = "evaluate, beyond the source"


@dataclass
class PipelineConfig:
    """Which configs each stage uses, and the overrides of the quick profile."""

    collect: str = "collect"  # shipped name or YAML path (training.collect.CollectConfig)
    train: str = "train_residual"  # (training.residual_train.TrainConfig)
    sweep: str = "sweep"  # (evaluation.sweep.config.SweepConfig)
    collect_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    sweep_overrides: dict[str, Any] = field(default_factory=dict)
    workers: int = 0  # 0: every core
    animation: bool = True  # rendered flight GIF (skipped without OpenGL)
    # the "Beyond the source" section (docs/statistics.md): a second matrix (shipped name or YAML
    # path) flown under another plant (its ``env``) into ``beyond/``; "": no section
    beyond: str = "sweep_realistic_20"
    beyond_overrides: dict[str, Any] = field(default_factory=dict)
    # sweeps with mid-flight events (docs/recovery.md) flown into ``recovery/<name>/``; their
    # recovery table and figures join the section. Needs ``beyond``; []: none
    recovery: list[str] = field(default_factory=lambda: ["recovery_payload", "recovery_rotor"])
    recovery_overrides: dict[str, Any] = field(default_factory=dict)  # applied to each of them
    # the lag sweep (evaluation/report/lag.py): one matrix flown into ``lag/<plant>/`` once per
    # rotor time constant (s) × latency (control periods, command and sensor alike); its table
    # and figure join the section. Needs ``beyond``; "": none
    lag: str = "lag_sweep"
    lag_rotor_tau_s: list[float] = field(default_factory=lambda: [0.02, 0.04, 0.06, 0.08])
    lag_latency_steps: list[int] = field(default_factory=lambda: [0, 1, 2])
    lag_overrides: dict[str, Any] = field(default_factory=dict)
    # processes drawing the figures (0: every core); 1 measured fastest on 2 cores, where the
    # software renderer of the GIF already keeps every core busy (docs/results/benchmarks.md)
    figure_workers: int = 1

    def __post_init__(self) -> None:
        if self.lag and not self.beyond:
            raise ValueError(
                f"lag: {self.lag!r} joins the beyond-the-source section, which needs beyond "
                "(a sweep name or YAML path); set beyond, or lag: ''"
            )
        if self.lag and not (self.lag_rotor_tau_s and self.lag_latency_steps):
            raise ValueError(
                "lag_rotor_tau_s and lag_latency_steps need a value each (lag: '' flies none), "
                f"got {self.lag_rotor_tau_s!r} and {self.lag_latency_steps!r}"
            )
        for tau in self.lag_rotor_tau_s:  # the env's own checks, named after the key
            try:
                plant_options(None, rotor_tau_s=tau)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"lag_rotor_tau_s: {exc}") from None
        for delay in self.lag_latency_steps:
            try:
                plant_options(None, action_delay_steps=delay)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"lag_latency_steps: {exc}") from None
        if self.recovery and not self.beyond:
            raise ValueError(
                f"recovery: {self.recovery!r} joins the beyond-the-source section, which needs "
                "beyond (a sweep name or YAML path); set beyond, or recovery: []"
            )
        names = [sweep_name(n) for n in self.recovery]
        if len(set(names)) != len(names):
            raise ValueError(f"recovery: two sweeps share a name, {self.recovery!r}")


QUICK = PipelineConfig(
    sweep="sweep_quick",
    collect_overrides={"seeds": [1000], "episode_s": 8.0},
    train_overrides={"epochs": 15},
    animation=False,
    beyond="sweep_realistic",  # a few runs of the realistic matrix, an RL policy's crash included
    beyond_overrides={
        "controllers": ["geo", "geo_rls_dob", "ppo"],
        "payloads": ["heavy"],
        "trajectories": ["helix"],
        "seeds": [0, 1],
        "episode_s": 8.0,
        "workers": 1,  # in this process: worker start-up would cost more than the runs
    },
    lag_rotor_tau_s=[0.03, 0.06],
    lag_latency_steps=[1],
    lag_overrides={  # two plants, one run each of two controllers
        "controllers": ["pid", "geo_rls"],
        "payloads": ["extra"],
        "trajectories": ["helix"],
        "seeds": [0],
        "episode_s": 8.0,
        "workers": 1,
    },
    recovery_overrides={  # one seed of two controllers, 5 s after each event
        "controllers": ["geo", "geo_rls_dob"],
        "trajectories": ["hover"],
        "seeds": [0],
        "episode_s": 10.0,
        "workers": 1,
    },
)


def run_pipeline(
    cfg: PipelineConfig, out_dir: str | Path, *, resume: bool = False, retry_failed: bool = False
) -> Path:
    """Run every stage into ``out_dir``; returns the path of ``report.md``. ``retry_failed``
    (with ``resume``) flies the sweep's recorded failed runs again; failed runs never stop the
    pipeline: the report counts and lists them."""
    from residual_quad.evaluation.report.document import OUTCOME_FILE, write_report
    from residual_quad.evaluation.report.figures import make_figures
    from residual_quad.training.collect import CollectConfig, collect
    from residual_quad.training.residual_train import TrainConfig, train_from_dataset

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if resume:  # the reused stages must be this config's (each sweep checks its own too)
        check_resume_config(cfg, out, PIPELINE_CONFIG_FILE, RESUME_FREE_KEYS)
    configs.dump(cfg, out / PIPELINE_CONFIG_FILE)
    timings: dict[str, float] = {}
    workers = cfg.workers or None

    dataset = out / "data" / "dataset.npz"
    t0 = time.perf_counter()
    if resume and dataset.exists():
        print(f"[1/4] collect: reusing {dataset}")
    else:
        print("[1/4] collect: geo + band-limited excitation, payloads none/light/heavy")
        c_cfg = configs.load(CollectConfig, cfg.collect, **cfg.collect_overrides)
        s = collect(c_cfg, dataset, workers=workers)
        print(f"      {s['samples']} samples from {s['runs']} runs in {s['wall_s']:.1f} s")
    timings["collect"] = time.perf_counter() - t0

    weights = out / "model" / "residual.npz"
    logdir = out / "tensorboard" / "residual_train"
    t0 = time.perf_counter()
    if resume and weights.exists():
        print(f"[2/4] train: reusing {weights}")
    else:
        print(f"[2/4] train: numpy MLP 14→64→64→3, Adam, early stopping (TensorBoard: {logdir})")
        t_cfg = configs.load(TrainConfig, cfg.train, **cfg.train_overrides)
        s = train_from_dataset(dataset, t_cfg, weights, logdir=logdir)
        rmse = ", ".join(f"{v:.3f}" for v in s["val_rmse"])
        print(
            f"      best epoch {s['best_epoch']}, validation RMSE x/y/z {rmse} m/s², "
            f"{s['train_time_s']:.1f} s"
        )
    timings["train"] = time.perf_counter() - t0

    print("[3/4] evaluate: the sweep matrix with the network trained above")
    s_cfg, notes = _prepared_sweep(cfg.sweep, cfg.sweep_overrides, weights)
    committed = committed_outcome() if is_committed_run(cfg) else None
    if committed is not None and committed["diverged"]:
        crashes = ", ".join(f"{c} {n}" for c, n in committed["diverged"].items())
        print(
            f"      the committed run has {sum(committed['diverged'].values())} diverged runs "
            f"({crashes}): a 'diverged:' line below is such a crash, flagged, not a fault"
        )
    t0 = time.perf_counter()
    rows = run_sweep(
        s_cfg, out / "sweep", resume=resume, workers=workers, retry_failed=retry_failed
    )
    timings["evaluate"] = time.perf_counter() - t0
    beyond: list[str] = []
    beyond_record: dict[str, Any] | None = None
    if cfg.beyond:
        print(f"[3/4] evaluate, beyond the source: {cfg.beyond}")
        t0 = time.perf_counter()
        beyond.append(
            beyond_stage(
                cfg,
                out,
                weights,
                resume=resume,
                retry_failed=retry_failed,
                notes=notes,
                baseline=rows,
            )
        )
        beyond_record = beyond_outcome_of(out)
        timings[BEYOND_STAGE] = time.perf_counter() - t0

    print("[4/4] tables, figures, report")
    t0 = time.perf_counter()
    training = {"logdir": logdir, "dataset": dataset, "weights": weights}
    figs = make_figures(
        rows,
        out / "sweep",
        out / "figures",
        training,
        animation=cfg.animation,
        progress=True,
        workers=cfg.figure_workers or None,
    )

    def pipeline_section() -> str:  # called by write_report once its tables are computed
        timings["report"] = time.perf_counter() - t0
        section = stages_section(timings)
        if notes:
            section += "\n\n" + "\n".join(f"- {n}" for n in notes)
        return section

    report = write_report(
        rows,
        out,
        figs,
        extra_sections=[pipeline_section],
        beyond_sections=beyond,
        beyond_outcome=beyond_record,
    )
    total = sum(timings.values())
    record = {**timings, "evaluate_env_steps": sum(int(r.get("steps", 0)) for r in rows)}
    if cfg.beyond:
        record["beyond_env_steps"] = sum(
            int(r.get("steps", 0))
            for d in [
                out / BEYOND_DIR,
                *(out / RECOVERY_DIR / sweep_name(n) for n in cfg.recovery),
                *(sorted((out / LAG_DIR).iterdir()) if (out / LAG_DIR).is_dir() else []),
            ]
            for r in read_rows(d)
        )
    (out / TIMINGS_FILE).write_text(json.dumps(record, indent=1) + "\n")
    outcome = json.loads((out / OUTCOME_FILE).read_text())
    for line in closing_lines(outcome, committed):
        print(line)
    print(f"report: {report} ({total:.0f} s)")
    return report


def _prepared_sweep(
    name: str, overrides: dict[str, Any], weights: Path
) -> tuple[SweepConfig, list[str]]:
    """The sweep config ``name`` with ``overrides``, without the controllers whose optional
    extra is missing (named in the returned notes), the residual controllers flying ``weights``."""
    s_cfg = configs.load(SweepConfig, name, **overrides)
    notes: list[str] = []
    usable = []
    for entry, label in zip(s_cfg.controllers, s_cfg.labels, strict=True):
        try:
            s_cfg.controller_spec(label).build()
            usable.append(entry)
        except ImportError as exc:  # an optional extra is missing: say so, fly the rest
            print(f"      {label} left out: {exc}")
            notes.append(f"`{label}` was not evaluated: {exc}")
    s_cfg = dataclasses.replace(s_cfg, controllers=usable)
    options = {k: dict(v) for k, v in s_cfg.controller_options.items()}
    for ctrl in RESIDUAL_CONTROLLERS:
        if ctrl in s_cfg.controllers:
            options.setdefault(ctrl, {})["weights"] = portable_path(weights)
    return dataclasses.replace(s_cfg, controller_options=options), notes


def portable_path(path: Path) -> str:
    """``path`` as the sweep config saved next to the rows names it: relative to the working
    directory when it lies under it (a results folder inside a clone names its network the same
    in every clone, so committed configs do not carry one machine's folders), absolute otherwise.
    The sweep's workers share the working directory, so both forms find the same file."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(resolved)


def beyond_stage(
    cfg: PipelineConfig,
    out: Path,
    weights: Path,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    notes: list[str] | None = None,
    baseline: list[dict[str, Any]] | None = None,
) -> str:
    """Fly ``cfg.beyond`` into ``out/beyond/`` and each of ``cfg.recovery`` into
    ``out/recovery/<name>/``; return the report's "Beyond the source" section (tables also as
    ``tables/beyond_*.csv``; ``baseline``: the main matrix's rows, compared run by run)."""
    from residual_quad.evaluation.report.beyond import (
        beyond_section,
        plant_matched,
        retrained_for_plant,
    )
    from residual_quad.evaluation.report.lag import lag_extras, lag_sweeps
    from residual_quad.evaluation.report.recovery import recovery_extras
    from residual_quad.evaluation.report.rl_seeds import training_seed

    s_cfg, more = _prepared_sweep(cfg.beyond, cfg.beyond_overrides, weights)
    if notes is not None:
        notes += more
    matched = plant_matched(s_cfg.controllers, s_cfg.env, s_cfg.controller_options)
    rl = [c for c in s_cfg.labels if training_seed(c) is not None and c not in matched]
    if matched:
        print(f"      {', '.join(matched)}: the policy retrained on this plant")
    if rl and s_cfg.env:
        print(
            f"      {', '.join(rl)} fly as trained, on the ideal plant: a 'diverged:' line of "
            "theirs below is expected (the report and the closing lines say so)"
        )
    main_episode = configs.load(SweepConfig, cfg.sweep, **cfg.sweep_overrides).episode_s
    if s_cfg.episode_s != main_episode:  # runs of other lengths are not the same runs
        baseline = None
    # a sweep's own nonzero ``workers`` wins (the quick profile flies its few runs in this
    # process: starting worker processes costs more than they fly)
    rows = run_sweep(
        s_cfg,
        out / BEYOND_DIR,
        resume=resume,
        workers=s_cfg.workers or cfg.workers or None,
        retry_failed=retry_failed,
    )
    # the recovery sweeps and the lag sweep's plants: small matrices, one job each on one pool
    small: list[tuple[SweepConfig, Path]] = []
    for name in cfg.recovery:
        r_cfg, more = _prepared_sweep(name, cfg.recovery_overrides, weights)
        if notes is not None:
            notes += more
        small.append((r_cfg, out / RECOVERY_DIR / sweep_name(name)))
    n_recovery = len(small)
    if cfg.lag:
        l_cfg, more = _prepared_sweep(cfg.lag, cfg.lag_overrides, weights)
        if notes is not None:
            notes += more
        plants = lag_sweeps(l_cfg, cfg.lag_rotor_tau_s, cfg.lag_latency_steps)
        small += [(p_cfg, out / LAG_DIR / folder) for folder, p_cfg in plants]
    if small:
        print(
            f"[3/4] evaluate, beyond the source: {n_recovery} recovery sweeps and "
            f"{len(small) - n_recovery} lag-sweep plants, each whole in one worker"
        )
        own = [c.workers for c, _ in small if c.workers]  # a sweep's own workers cap the pool
        run_sweeps(
            small,
            workers=min(own) if own else cfg.workers or None,
            resume=resume,
            retry_failed=retry_failed,
            desc="recovery and lag sweeps",
        )
    section = beyond_section(
        rows,
        out,
        title=sweep_name(cfg.beyond),
        plant=s_cfg.env,
        rows_path=f"{BEYOND_DIR}/rows.jsonl",
        extras=[recovery_extras(out, [sweep_name(n) for n in cfg.recovery]), lag_extras(out)],
        tables_dir=out / "tables",
        baseline=baseline,
        retrained=retrained_for_plant(out / BEYOND_DIR),
    )
    return section


def stages_section(timings: dict[str, float]) -> str:
    """The report's "Pipeline" section: each stage's wall seconds and share of the run."""
    total = sum(timings.values())
    lines = "\n".join(f"| {k} | {v:.1f} | {v / total:.0%} |" for k, v in timings.items())
    return (
        "## Pipeline\n\n"
        f"Stages of this run (wall seconds; total {total:.0f} s):\n\n"
        "| stage | s | share |\n|---|---|---|\n" + lines + "\n\n"
        "Dataset `data/dataset.npz`, network `model/residual.npz`, TensorBoard logs "
        "`tensorboard/`, rows `sweep/rows.jsonl`"
        + (
            f" (beyond the source: `{BEYOND_DIR}/rows.jsonl`, `{RECOVERY_DIR}/<sweep>/rows.jsonl`)"
            if BEYOND_STAGE in timings
            else ""
        )
        + f", tables `tables/`, stage times `{TIMINGS_FILE}`."
    )


def is_committed_run(cfg: PipelineConfig) -> bool:
    """Whether ``cfg`` runs the committed experiment (worker counts and GIF aside)."""
    return dataclasses.replace(cfg, workers=0, animation=True, figure_workers=1) == PipelineConfig()


def committed_outcome() -> dict[str, Any]:
    """The targets and diverged runs of the committed full run."""
    return json.loads(COMMITTED_OUTCOME.read_text(encoding="utf-8"))


def closing_lines(outcome: dict[str, Any], committed: dict[str, Any] | None) -> list[str]:
    """What the pipeline says last: which targets are met or missed, how many runs diverged, and
    whether that is what the committed run gives (``committed``: its outcome, ``None`` when this
    run's settings differ from it)."""
    targets = outcome["targets"]
    missed = [t for t in targets if not t["met"]]
    line = f"targets: {len(targets) - len(missed)} of {len(targets)} met"
    if missed:
        line += "; missed: " + "; ".join(
            f"{t['target']} ({t['measured']}, goal {t['goal']})" for t in missed
        )
    crashes = outcome["diverged"]
    n_div = sum(crashes.values())
    div = f"diverged runs: {n_div} of {outcome['runs']}"
    if n_div:
        div += " (" + ", ".join(f"{c} {n}" for c, n in crashes.items()) + ")"
    lines = [line, div, *beyond_lines(outcome.get("beyond", {}))]
    if committed is None:
        lines.append(
            "this run's settings differ from the committed run's, so its numbers are its own; "
            f"the committed full run: {COMMITTED_REPORT}"
        )
        return lines
    differences = outcome_differences(outcome, committed)
    if not differences:
        lines.append(
            f"as expected: the committed run ({COMMITTED_REPORT}) meets and misses the same "
            "targets and has the same diverged runs; its report and docs/ppo.md explain the misses"
        )
    else:
        lines.append(
            f"differs from the committed run ({COMMITTED_REPORT}): " + "; ".join(differences)
        )
    return lines


def beyond_lines(beyond: dict[str, Any]) -> list[str]:
    """One closing line per beyond-the-source sweep: its diverged runs, the shipped RL policies'
    crashes named as expected (trained on the ideal plant), any other named as not."""
    from residual_quad.evaluation.report.beyond import expected_crashes

    lines = []
    for name, o in _lag_merged(beyond).items():
        crashes = o["diverged"]
        n_div = sum(crashes.values())
        line = f"beyond the source, {name}: diverged runs: {n_div} of {o['runs']}"
        if o.get("failed"):
            line += f", {o['failed']} failed"
        if n_div:
            line += " (" + ", ".join(f"{c} {n}" for c, n in crashes.items()) + ")"
            rl, other = expected_crashes(crashes, o.get("retrained", ()))
            if rl:
                line += (
                    f"; expected for {', '.join(rl)}: RL policies trained on the ideal plant "
                    "(docs/rl_policies.md)"
                )
            if other:
                line += f"; not expected: {', '.join(other)}"
        lines.append(line)
    return lines


def _lag_merged(beyond: dict[str, Any]) -> dict[str, Any]:
    """``beyond`` with the lag sweep's plants (``lag/<plant>``) as one entry, ``lag sweep (N
    plants)``: runs and failures summed, crashes per controller summed and, when there are any,
    the plants they happened on named after the controller."""
    plants = {k: v for k, v in beyond.items() if k.startswith(f"{LAG_DIR}/")}
    out = {k: v for k, v in beyond.items() if k not in plants}
    if plants:
        crashes: dict[str, int] = {}
        where: dict[str, list[str]] = {}
        for name, o in plants.items():
            for c, n in o["diverged"].items():
                crashes[c] = crashes.get(c, 0) + n
                where.setdefault(c, []).append(name.split("/", 1)[1])
        named = {f"{c} at {', '.join(where[c])}": n for c, n in crashes.items()}
        out[f"lag sweep ({len(plants)} plants)"] = {
            "runs": sum(o["runs"] for o in plants.values()),
            "failed": sum(o.get("failed", 0) for o in plants.values()),
            "diverged": named,
        }
    return out


def outcome_differences(outcome: dict[str, Any], committed: dict[str, Any]) -> list[str]:
    """How a run's targets and diverged runs differ from the committed run's (empty: the same)."""
    mine = {t["target"]: t["met"] for t in outcome["targets"]}
    theirs = {t["target"]: t["met"] for t in committed["targets"]}
    out = []
    for name, met in theirs.items():
        if name not in mine:
            out.append(f"target not checked here: {name}")
        elif mine[name] != met:
            out.append(f"{name} now {'met' if mine[name] else 'missed'}")
    out += [f"new target: {name}" for name in mine.keys() - theirs.keys()]
    if outcome["diverged"] != committed["diverged"]:
        out.append(f"diverged runs {outcome['diverged']} (committed: {committed['diverged']})")
    if outcome["runs"] != committed["runs"]:
        out.append(f"{outcome['runs']} runs (committed: {committed['runs']})")
    mine_b, theirs_b = outcome.get("beyond", {}), committed.get("beyond", {})
    for name in theirs_b.keys() - mine_b.keys():
        out.append(f"beyond-the-source sweep not flown here: {name}")
    for name, o in mine_b.items():
        if name not in theirs_b:
            out.append(
                f"beyond-the-source sweep {name} is not in the committed outcome "
                f"(regenerate it: {REGENERATE})"
            )
        elif o != theirs_b[name]:
            out.append(f"beyond the source, {name}: {o} (committed: {theirs_b[name]})")
    return out


def record_outcome(out_dir: str | Path) -> Path:
    """Write the outcome of the committed run just flown into ``out_dir`` (its ``outcome.json``)
    as the committed expectation, :data:`COMMITTED_OUTCOME`; returns its path."""
    from residual_quad.evaluation.report.document import OUTCOME_FILE

    outcome = json.loads((Path(out_dir) / OUTCOME_FILE).read_text(encoding="utf-8"))
    record = {"what": COMMITTED_WHAT, **outcome}
    text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
    COMMITTED_OUTCOME.write_text(text, encoding="utf-8")
    return COMMITTED_OUTCOME
