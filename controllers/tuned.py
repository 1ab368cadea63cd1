"""Tuned trackers: a tracker flown with the gains of its shipped ``rquad tune`` study.

``pid_tuned``, ``geo_rls_tuned`` and ``geo_rls_dob_tuned`` are ``pid``, ``geo_rls`` and
``geo_rls_dob`` with the options their study found (the matrix's tuned rows, flown beside the
defaults [LEVELING]). Each study's output folder ships as it was written under
``controllers/weights/tuned/<controller>/`` (``best.yaml``, ``tune_config.yaml``,
``trials.jsonl``, ``default.json``; optuna's ``study.db`` is left out, the rows carry every
trial), so its search, its scenarios and its trial count are read from the record, never typed
twice: the audit row of a tuned tracker states the study's objective, trials and scenarios.

Options given to a tuned tracker replace the tuned ones (``pid_tuned:ki=5``), each whole: an
``attitude`` given replaces the tuned attitude gains, its missing fields at their defaults. A
tuned tracker asked to fly a plant other than its study's (rotor lag, latency) is refused.
Rebuild a record with ``rquad tune CONTROLLER --config configs/tune_matrix.yaml --out
controllers/weights/tuned/CONTROLLER`` (docs/tuning.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.controllers.base import ControlContext, InformationUse, resolve_factory

#: the shipped studies' folders: ``<controller>/`` each
TUNED_FOLDER = Path(__file__).resolve().parent / "weights" / "tuned"
#: the trackers with a shipped study, each registered as ``<controller>_tuned``
TUNED_CONTROLLERS: tuple[str, ...] = ("pid", "geo_rls", "geo_rls_dob")
#: the files a study folder must hold
RECORD_FILES = ("best.yaml", "tune_config.yaml", "trials.jsonl", "default.json")


@dataclass(frozen=True)
class TunedRecord:
    """What a study left: the best gains and how they were found."""

    controller: str
    options: dict[str, Any]  # the best trial's options, nested (``attitude: {wn_rp: ...}``)
    config: dict[str, Any]  # the study's resolved TuneConfig
    trials: int  # trials flown (rows of trials.jsonl)
    score: float  # the best trial's score
    default_score: float  # the controller's own gains on the same flights
    wall_s: float  # s, the trials' wall time summed

    def plant_told(self) -> tuple[float, int, int]:
        """What a controller is told of the plant the study's flights flew: the rotors' time
        constant (s) and the sensor / command latency (periods); ideal for no ``env``."""
        env = self.config.get("env") or {}
        if not env:  # the ideal plant, and no import of the env package (mujoco)
            return (0.0, 0, 0)
        from residual_quad.envs.presets import plant_of

        plant = plant_of(env)
        return (plant.rotor_tau_s, plant.obs_delay_steps, plant.action_delay_steps)

    def scenarios(self) -> str:
        """The tuning flights in words (the audit's "training scenarios" cell)."""
        c = self.config
        low, high = c["payload_kg"]
        preset = (c.get("env") or {}).get("preset")
        where = f"the {preset} plant, " if preset else ("a lagged plant, " if c.get("env") else "")
        return (
            f"{where}{c['scenarios']} flights of {c['episode_s']:g} s a trial: "
            f"payload {low:g}–{high:g} "
            f"kg, {'/'.join(c['winds'])}, randomized {'/'.join(c['trajectories'])} "
            "(seeds off the matrix's)"
        )

    def objective(self) -> str:
        """The study's score in words (the audit's "objective" cell)."""
        c = self.config
        if c["aggregate"] == "cvar":
            share = f"{100 * float(c['cvar_fraction']):g} %"
            return f"precision reward, CVaR (mean of the worst {share} of flights)"
        return "precision reward (mean over flights)"


def _corrupt(folder: Path, what: str) -> ValueError:
    return ValueError(
        f"tuned record {folder} is unreadable ({what}); rebuild it with rquad tune "
        f"{folder.name} --config configs/tune_matrix.yaml --out {folder}"
    )


def read_tuned(controller: str, folder: str | Path | None = None) -> TunedRecord:
    """The study record of ``controller`` (default: the shipped one); a missing or damaged
    record is a one-line ``ValueError`` naming the folder and the command that rebuilds it."""
    path = Path(folder) if folder is not None else TUNED_FOLDER / controller
    missing = [name for name in RECORD_FILES if not (path / name).is_file()]
    if missing:
        raise _corrupt(path, f"missing {', '.join(missing)}")
    try:
        best = configs.read_yaml(path / "best.yaml")
        config = configs.read_yaml(path / "tune_config.yaml")
        rows = [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines()]
        default = json.loads((path / "default.json").read_text())
    except (OSError, ValueError) as exc:
        raise _corrupt(path, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(best, dict) or best.get("spec") != controller:
        raise _corrupt(path, f"best.yaml is not an entry of {controller!r}")
    if not isinstance(config, dict) or config.get("controller") != controller:
        raise _corrupt(path, f"tune_config.yaml is not a study of {controller!r}")
    if not rows or not isinstance(best.get("options"), dict):
        raise _corrupt(path, "no trials or no options")
    try:
        return TunedRecord(
            controller=controller,
            options=dict(best["options"]),
            config=config,
            trials=len(rows),
            score=max(float(r["score"]) for r in rows),
            default_score=float(default["score"]),
            wall_s=sum(float(r["wall_s"]) for r in rows),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _corrupt(path, f"{type(exc).__name__}: {exc}") from None


#: phrases of the defaults' declared memory a study's options rewrite: option → (phrase, text)
MEMORY_PHRASES: dict[str, tuple[str, Any]] = {
    "forgetting": (
        "λ 0.99, ≈ 1 s",
        lambda lam: f"λ {lam:.3f}, ≈ {ControlContext().control_dt / (1.0 - lam):.2g} s",
    ),
    "observer_tau": ("τ 0.02 s", lambda tau: f"τ {tau:.2g} s"),
}


def tuned_memory(memory: str, options: dict[str, Any]) -> str:
    """The declared memory of a tracker with its study's settings in place of the defaults'."""
    for option, (phrase, text) in MEMORY_PHRASES.items():
        if option in options and phrase in memory:
            memory = memory.replace(phrase, text(float(options[option])))
    return memory


def tuned_class(controller: str, folder: str | Path | None = None) -> type:
    """The tracker class of ``controller`` flying its study's gains: the same law and option
    table, an audit row (``INFORMATION``) written from the study record."""
    from residual_quad.controllers.specs import check_spec_options

    base = resolve_factory(controller)
    record = read_tuned(controller, folder)
    tuned_options = check_spec_options(controller, record.options)  # the tracker's own domains
    declared = vars(base).get("INFORMATION")
    if not isinstance(base, type) or not isinstance(declared, InformationUse):
        raise ValueError(f"{controller!r} is not a tracker class that declares INFORMATION")
    name = f"{controller}_tuned"
    info = replace(
        declared,
        tuning=(
            f"rquad tune: TPE, {record.trials} trials × {record.scenarios()}, "
            f"{record.wall_s / 60:.1f} min; score {record.score:.3f} (own gains "
            f"{record.default_score:.3f})"
            + (f"; after its design's {n} tries" if (n := declared.tuning_trials) else "")
        ),
        memory=tuned_memory(declared.memory, record.options),
        objective=record.objective(),
        tuning_trials=declared.tuning_trials + record.trials,  # its design's tries, then the study
        training_scenarios=record.scenarios(),
    )

    studied_told = record.plant_told()

    def __init__(self: Any, context: ControlContext | None = None, **overrides: Any) -> None:
        ctx = context or ControlContext()
        told = (ctx.rotor_tau_s, ctx.obs_delay_steps, ctx.action_delay_steps)
        if told != studied_told:
            raise ValueError(
                f"{name}'s gains were searched on a plant with rotor τ {studied_told[0]:g} s and "
                f"{studied_told[1]}/{studied_told[2]} periods of sensor/command latency; this one "
                f"has τ {told[0]:g} s and {told[1]}/{told[2]}: fly {controller}, or tune it for "
                f"this plant (rquad tune {controller} with its env)"
            )
        base.__init__(self, context, **{**tuned_options, **overrides})

    return type(
        f"Tuned{base.__name__}",
        (base,),
        {
            "__doc__": f"``{name}``: ``{controller}`` with its study's gains {record.options}.",
            "__module__": __name__,
            "__init__": __init__,
            "name": name,
            "INFORMATION": info,
            "TUNED": record,
        },
    )


def __getattr__(attr: str) -> type:
    """The tuned class of a controller with a shipped study, built from its record on first use
    (the registry's ``pid_tuned`` is ``residual_quad.controllers.tuned:pid``)."""
    if attr in TUNED_CONTROLLERS:
        cls = tuned_class(attr)
        globals()[attr] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
