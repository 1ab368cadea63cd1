"""``rquad tune``: a seeded optuna search of a model-based tracker's gains on the RL objective.

A head-to-head is fair only with the same tuning budget on both sides [LEVELING]: the RL rows went
through documented tries, so the trackers get a recorded search too. Each trial flies the
controller, with the trial's gains, over the tuning scenarios as one batch on the vector env and
scores it with the objective the RL policies are trained for (:mod:`~residual_quad.training.
precision`): the mean over scenarios of the per-step precision reward

    J = mean_runs (1/K) Σ_{k<K} r_pos(‖e_p,k‖) · exp(−w_smooth·‖u_k − u_{k−1}‖²),

with K the episode's control steps, so a crash earns nothing for the steps it did not fly.
``aggregate: cvar`` scores a trial by the mean J of its worst ``cvar_fraction`` of flights
instead: a robust search, in which gains that fail a few flights score low.

**The scenarios are never the evaluation's.** Each is drawn from ``seed``: a payload mass uniform
in ``payload_kg`` (below the matrix's held-out ``extra`` 0.75 kg), a wind level, a trajectory —
helix, figure-8, Lissajous and random splines with a random size and period, or a hover from a
random start offset (:func:`~residual_quad.training.scenarios.draw_trajectory`, the draw training
off the matrix uses too) — and an env seed from :data:`FIRST_TUNING_SEED` up, far above the
matrix's seeds (0–19).

**What is kept** (``out``): ``tune_config.yaml`` (the resolved config), ``study.db`` (optuna's own
storage: every trial, resumable), ``trials.jsonl`` (one fsynced row per trial: its gains, score,
crashes, wall time), ``best.yaml`` (the best gains as a controller entry that sweep and stress
configs take as written, and :func:`~residual_quad.controllers.specs.resolve_entry` loads),
``default.json`` (the controller's own gains scored on the same scenarios: the reference).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from residual_quad import configs
from residual_quad.controllers.base import resolve_factory
from residual_quad.controllers.options import Range, nested_options, tunable_of
from residual_quad.controllers.specs import check_spec_options, parse_spec
from residual_quad.envs.checks import real
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, WIND_LEVELS
from residual_quad.envs.presets import plant_of
from residual_quad.training.precision import PrecisionReward
from residual_quad.training.scenarios import (
    FIRST_OFF_MATRIX_SEED,
    TRAJECTORY_RANGES,
    draw_trajectory,
)

#: the install hint when optuna is missing
OPTUNA_HINT = "rquad tune needs optuna: pip install 'residual-quad[tune]'"

#: trajectories the tuning draws from, with the ranges of their random parameters (the shared
#: draw of :mod:`~residual_quad.training.scenarios`)
TRAJECTORIES = TRAJECTORY_RANGES
#: the first env seed of the tuning scenarios: far above the matrix's (0–19)
FIRST_TUNING_SEED = FIRST_OFF_MATRIX_SEED


@dataclass(frozen=True)
class TuneConfig:
    """A tuning study (``rquad tune CONTROLLER``); YAML loads strictly into it."""

    controller: str = "pid"  # a registered controller with a TUNABLE table
    trials: int = 40  # trials of the study (a resumed study runs up to this many in all)
    timeout_s: float = 0.0  # s of wall time for this call's trials (0: no limit)
    seed: int = 0  # the sampler's and the scenarios' seed
    scenarios: int = 12  # tuning scenarios flown by every trial (one vector-env batch)
    episode_s: float = 10.0  # s per scenario
    payload_kg: tuple[float, float] = (0.0, 0.5)  # kg, the payload mass drawn per scenario
    winds: tuple[str, ...] = ("calm", "breezy", "windy")
    trajectories: tuple[str, ...] = ("hover", "helix", "figure8", "lissajous", "spline")
    # option path → [low, high] or {low, high, log}: replaces the controller's range (a subset
    # of its TUNABLE table, or an option of its OPTIONS table with a range in its domain)
    space: dict[str, Any] = field(default_factory=dict)
    # the plant the flights fly: ResidualQuad-v0 plant keywords ({preset: realistic}, or
    # rotor_tau_s, action_delay_steps, obs_delay_steps, imu_bias); {}: the ideal plant. The
    # controllers are told it, as a sweep tells them (their behind-lag defaults included)
    env: dict[str, Any] = field(default_factory=dict)
    objective: PrecisionReward = field(default_factory=PrecisionReward)
    # how a trial's flights make its score: "mean" of their J, or "cvar": the mean of the worst
    # cvar_fraction of them (a robust search: gains that fail a few flights score low)
    aggregate: str = "mean"
    cvar_fraction: float = 0.25

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ValueError(
                f"aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}"
            )
        real("cvar_fraction", self.cvar_fraction, low=0.0, high=1.0, low_open=True)
        for name in ("trials", "scenarios"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        real("timeout_s", self.timeout_s, low=0.0, unit="s")
        real("episode_s", self.episode_s, low=3.0, high=3600.0, low_open=True, unit="s")
        low, high = (real("payload_kg", x, low=0.0, unit="kg") for x in self.payload_kg)
        if not low <= high < PAYLOAD_LEVELS["extra"]:
            raise ValueError(
                f"payload_kg must be [low, high] with low <= high < {PAYLOAD_LEVELS['extra']} kg "
                f"(the held-out extra payload), got {list(self.payload_kg)}"
            )
        for name, values, valid in (
            ("winds", self.winds, WIND_LEVELS),
            ("trajectories", self.trajectories, TRAJECTORIES),
        ):
            if not values:
                raise ValueError(f"{name} must list at least one of {', '.join(valid)}")
            unknown = [v for v in values if v not in valid]
            if unknown:
                raise ValueError(f"{name}: unknown {unknown}; valid choices: {', '.join(valid)}")
        search_space(self.controller, self.space)  # the controller and the ranges, now
        plant_of(self.env)  # the plant, now


def _range(path: str, value: Any) -> Range:
    """A ``space`` entry as a :class:`Range`: ``[low, high]`` or ``{low, high, log}``."""
    try:
        if isinstance(value, Range):
            return value
        if isinstance(value, list | tuple) and len(value) == 2:
            return Range(*value)
        if isinstance(value, dict):
            return Range(**value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"space.{path}: {exc}") from None
    raise ValueError(f"space.{path} must be [low, high] or {{low, high, log}}, got {value!r}")


def search_space(controller: str, space: dict[str, Any] | None = None) -> dict[str, Range]:
    """The ranges a study searches: the controller's ``TUNABLE`` table, or ``space`` (option path
    → range) in its place. Every range's ends must be values the option accepts; an unknown
    controller, one without a table, or a bad range is a ``ValueError`` naming it."""
    spec = parse_spec(controller)
    if spec.is_import_path or spec.options:
        raise ValueError(
            f"controller must be a registered name without options, got {controller!r} "
            "(its options are what the study chooses)"
        )
    table = dict(tunable_of(resolve_factory(spec.target)))
    if not table:
        raise ValueError(f"{controller}: no tunable options (it declares no TUNABLE table)")
    ranges = {path: _range(path, value) for path, value in (space or {}).items()} or table
    for path, rng in ranges.items():
        for end in (rng.low, rng.high):
            try:
                check_spec_options(spec.target, nested_options({path: end}))
            except ValueError as exc:
                raise ValueError(f"space.{path}: [{rng.low}, {rng.high}] — {exc}") from None
    return ranges


@dataclass(frozen=True)
class TuningScenario:
    """One tuning flight: payload (kg), wind level, trajectory with parameters, env seed and the
    start offset (m) of a hover."""

    payload_kg: float
    wind: str
    trajectory: str
    params: tuple[tuple[str, Any], ...]
    seed: int
    offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)


def tuning_scenarios(cfg: TuneConfig) -> list[TuningScenario]:
    """The ``cfg.scenarios`` scenarios every trial flies, drawn from ``cfg.seed`` (module
    docstring): the same for every trial, so trials differ only in their gains."""
    rng = np.random.default_rng([cfg.seed, 0x7E])
    out = []
    for i in range(cfg.scenarios):
        drawn = draw_trajectory(rng, cfg.trajectories)  # the shared draw, then the conditions
        out.append(
            TuningScenario(
                payload_kg=round(float(rng.uniform(*cfg.payload_kg)), 6),
                wind=cfg.winds[int(rng.integers(len(cfg.winds)))],
                trajectory=drawn.name,
                params=drawn.params,
                seed=FIRST_TUNING_SEED + cfg.seed * cfg.scenarios + i,
                offset_m=drawn.offset_m,
            )
        )
    return out


#: how a trial's per-flight scores J make its score (:class:`TuneConfig` ``aggregate``)
AGGREGATES = ("mean", "cvar")


def aggregate_scores(scores: list[float], cfg: TuneConfig) -> float:
    """A trial's score from its flights' J: their mean, or (``cvar``) the mean of the worst
    ``ceil(cvar_fraction · n)`` of them."""
    if cfg.aggregate == "mean":
        return float(np.mean(scores))
    worst = max(1, math.ceil(cfg.cvar_fraction * len(scores)))
    return float(np.mean(np.sort(scores)[:worst]))


def score_flights(
    options: dict[str, Any], cfg: TuneConfig, scenarios: list[TuningScenario]
) -> dict[str, Any]:
    """Fly ``cfg.controller`` with ``options`` over ``scenarios`` (one vector-env batch) and
    score it: ``score`` (the flights' J aggregated as ``cfg.aggregate`` says, module docstring),
    ``flight_scores`` (each flight's J), ``crashes``, ``rmse`` (mean over the flights that did not
    crash, m; NaN if all did), ``wall_s``."""
    from residual_quad.controllers.batch import make_batch_controller
    from residual_quad.episode import RunSpec, control_context, control_dt, fly_batch

    t0 = time.perf_counter()
    specs = [
        RunSpec(
            cfg.controller,
            payload=s.payload_kg,
            wind=s.wind,
            trajectory=s.trajectory,
            seed=s.seed,
            trajectory_params=s.params,
            reset_options=(("position_offset", s.offset_m),) if s.trajectory == "hover" else None,
            episode_s=cfg.episode_s,
        )
        for s in scenarios
    ]
    env = dict(cfg.env)
    batch = make_batch_controller(cfg.controller, len(specs), control_context(env), **options)
    results = fly_batch(specs, batch, env or None, keep_actions=True)
    steps = round(cfg.episode_s / control_dt({}))  # control steps of a full episode
    scores, rmses, crashes = [], [], 0
    for result in results:
        actions = result.extras["actions"]  # (K, 4), the actions issued
        change = np.diff(actions, axis=0, prepend=actions[:1])
        errors = result.error[1 : len(actions) + 1]  # after each action
        rewards = cfg.objective(errors, np.einsum("ki,ki->k", change, change))
        scores.append(float(np.sum(rewards)) / steps)
        crashes += bool(result.diverged)
        if not result.diverged:
            rmses.append(result.rmse)
    return {
        "score": aggregate_scores(scores, cfg),
        "flight_scores": scores,
        "crashes": crashes,
        "rmse": float(np.mean(rmses)) if rmses else math.nan,
        "wall_s": time.perf_counter() - t0,
    }


def _append_row(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, allow_nan=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def best_entry(controller: str, params: dict[str, float]) -> dict[str, Any]:
    """The best gains as a controller entry of a sweep or stress config (``spec``, ``options``,
    ``label``: ``<controller>_tuned``)."""
    return {
        "spec": controller,
        "options": nested_options({k: float(v) for k, v in params.items()}),
        "label": f"{controller}_tuned",
    }


def tune(
    cfg: TuneConfig,
    out: Path,
    *,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run (or with ``resume``, continue up to ``cfg.trials``) the study into ``out``; returns
    the summary: best score and gains, trials done, crashes of the best trial."""
    try:
        import optuna
    except ImportError:
        raise ImportError(OPTUNA_HINT) from None
    out = Path(out)
    ranges = search_space(cfg.controller, cfg.space)
    saved = out / "tune_config.yaml"
    data = configs.to_dict(cfg)
    if saved.exists() and not resume:
        raise ValueError(
            f"{out} holds a study already; continue it with --resume or choose another --out"
        )
    if resume and saved.exists():
        difference = configs.first_difference(
            configs.read_yaml(saved), data, ignore=("trials", "timeout_s")
        )
        if difference is not None:
            key, theirs, ours = difference
            raise ValueError(
                f"{out} holds a study of another config ({key}: {theirs!r} in its "
                f"tune_config.yaml, {ours!r} now); resume it only with that config, or tune this "
                "one into another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    configs.dump(cfg, saved)
    scenarios = tuning_scenarios(cfg)
    rows = out / "trials.jsonl"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=f"tune-{cfg.controller}",
        storage=f"sqlite:///{(out / 'study.db').resolve()}",
        sampler=optuna.samplers.TPESampler(seed=cfg.seed),
        direction="maximize",
        load_if_exists=resume,
    )
    done = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])

    def objective(trial: Any) -> float:
        params = {
            path: trial.suggest_float(path, rng.low, rng.high, log=rng.log)
            for path, rng in ranges.items()
        }
        scored = score_flights(nested_options(params), cfg, scenarios)
        trial.set_user_attr("crashes", scored["crashes"])
        trial.set_user_attr("rmse", scored["rmse"])
        _append_row(rows, {"trial": trial.number, "params": params, **scored})
        if progress is not None:
            progress(trial.number + 1, cfg.trials)
        return scored["score"]

    reference = out / "default.json"  # the controller's own gains on the same scenarios
    if not reference.exists():
        default = score_flights({}, cfg, scenarios)
        reference.write_text(json.dumps(default, allow_nan=True) + "\n")
    default = json.loads(reference.read_text())
    remaining = cfg.trials - done
    if remaining > 0:
        study.optimize(
            objective, n_trials=remaining, timeout=cfg.timeout_s or None, catch=(ValueError,)
        )
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise ValueError(f"no trial of {cfg.controller} completed; see {rows}")
    best = study.best_trial
    entry = best_entry(cfg.controller, best.params)
    (out / "best.yaml").write_text(
        f"# the best of {len(complete)} trials (score {best.value:.6f}); "
        f"a controller entry of a sweep or stress config\n" + yaml.safe_dump(entry, sort_keys=False)
    )
    return {
        "controller": cfg.controller,
        "trials": len(complete),
        "best_score": best.value,
        "best_params": best.params,
        "best_crashes": best.user_attrs.get("crashes"),
        "best_rmse": best.user_attrs.get("rmse"),
        "entry": entry,
        "default_score": default["score"],
        "default_crashes": default["crashes"],
        "default_rmse": default["rmse"],
        "scenarios": [asdict(s) for s in scenarios],
    }
