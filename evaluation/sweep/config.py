"""The sweep's matrix: :class:`SweepConfig` (payloads × winds × trajectories × seeds ×
controllers, checked when loaded), the controller labels it shares with the stress study, and its
expansion into the :class:`~residual_quad.episode.RunSpec` of every run.

A config is checked up front so that a sweep never trips over a bad value mid-flight: unknown
names, duplicate entries, env arguments that do not build an env and controller options that do
not build their controller are all errors at load time (a user factory that raises anything but a
``ValueError`` is a failing controller instead, which fails its runs: :func:`check_builds`).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from residual_quad.controllers.base import BUILTIN_CONTROLLERS, resolve_factory
from residual_quad.controllers.specs import (
    ControllerEntry,
    ControllerSpec,
    keyword_options,
    normalized_entries,
    parse_spec,
    resolve_entries,
)
from residual_quad.envs.disturbances import WIND_LEVELS, WindModel, resolve_payload
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.trajectories import TRAJECTORIES
from residual_quad.episode import RunSpec, build_controller
from residual_quad.evaluation.sweep.recovery import recovery_spec

#: the file a sweep's resolved config is saved as in its output folder
CONFIG_FILE = "sweep_config.yaml"
SERIES_KEYS = ("payload", "wind", "trajectory", "seed", "controller")
#: the keys ``--resume`` may change (:func:`~residual_quad.evaluation.sweep.engine.
#: check_resume_config`): the processes, which time series are kept, and the matrix axes, whose
#: entries each run's id names (a resume with another seed adds or drops runs, and changes none)
RESUME_FREE_KEYS = ("payloads", "winds", "trajectories", "seeds", "series", "workers")
#: env arguments set per run (by the matrix, or by the controller: ``action_mode``), so ``env:``
#: cannot set them
MATRIX_ENV_KEYS = (
    "payload",
    "wind",
    "trajectory",
    "episode_s",
    "seed",
    "action_mode",
    "disable_env_checker",
)


class ControllerLabels:
    """The run labels of a config's ``controllers`` entries and their resolved specs (a config
    sets ``self._specs``, label → spec, when it validates its entries)."""

    @property
    def labels(self) -> list[str]:
        """The run label of every controller entry, in config order."""
        return list(self._specs)

    def _resolve_controllers(self) -> list[ControllerSpec]:
        """Check the ``controllers`` entries (a non-empty list, unique labels, importable user
        modules), normalize them and keep label → spec; returns the specs."""
        if not isinstance(self.controllers, list) or not self.controllers:
            raise ValueError(
                f"controllers: expected a non-empty list of specs, got {self.controllers!r}"
            )
        specs = resolve_entries(self.controllers)
        self.controllers = normalized_entries(self.controllers, specs)
        self._specs = {s.label: s for s in specs}
        return specs

    def _check_controller_builds(self, env: dict[str, Any]) -> None:
        """Build every optioned or user controller once at ``env``'s control rate
        (:func:`check_builds`): a bad option is named at load, not in the middle of a sweep."""
        _check_controller_options(self.controller_options, env, self._specs)
        _check_user_controllers(list(self._specs.values()), self.controller_options, env)

    def controller_spec(self, label: str) -> ControllerSpec:
        """The resolved spec of a run label (a compact spec that is not an entry parses itself)."""
        spec = self.__dict__.get("_specs", {}).get(label)
        return spec if spec is not None else parse_spec(label)


@dataclass
class SweepConfig(ControllerLabels):
    """The matrix and how to fly it; the defaults are ``configs/sweep.yaml``: the 432 runs of the
    four source trackers [RES §8] plus ``geo_rls_dob``, the tuned ``pid``, ``geo_rls`` and
    ``geo_rls_dob`` (``controllers/tuned.py``), ``hnewton_rls`` and the RL controllers ``ppo``,
    ``ppo_res``, ``ppo_acc`` and ``ppo_adapt`` in their five shipped training seeds (3 132
    runs)."""

    #: compact specs (``geo``, ``hnewton:lm``, ``my_pkg.ctrl:Make``) or mappings
    #: ``{spec, options, label}``; each run's ``controller`` column is the entry's label
    controllers: list[str | ControllerEntry] = field(
        default_factory=lambda: [
            "pid",
            "geo",
            "geo_res",
            "geo_rls",
            "geo_rls_dob",
            "pid_tuned",
            "geo_rls_tuned",
            "geo_rls_dob_tuned",
            "hnewton_rls",
            "ppo",
            "ppo:training_seed=1",
            "ppo:training_seed=2",
            "ppo:training_seed=3",
            "ppo:training_seed=4",
            "ppo_res",
            "ppo_res:training_seed=1",
            "ppo_res:training_seed=2",
            "ppo_res:training_seed=3",
            "ppo_res:training_seed=4",
            "ppo_acc",
            "ppo_acc:training_seed=1",
            "ppo_acc:training_seed=2",
            "ppo_acc:training_seed=3",
            "ppo_acc:training_seed=4",
            "ppo_adapt",
            "ppo_adapt:training_seed=1",
            "ppo_adapt:training_seed=2",
            "ppo_adapt:training_seed=3",
            "ppo_adapt:training_seed=4",
        ]
    )
    payloads: list[Any] = field(default_factory=lambda: ["none", "light", "heavy", "extra"])
    winds: list[Any] = field(default_factory=lambda: ["calm", "breezy", "windy"])
    trajectories: list[str] = field(default_factory=lambda: ["hover", "helix", "figure8"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    episode_s: float = 20.0  # s
    env: dict[str, Any] = field(default_factory=dict)  # extra ResidualQuad-v0 kwargs
    controller_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per name
    #: options every controller of the matrix gets where it declares them (a built-in's
    #: ``OPTIONS``, a user factory's keywords); its own spec options and ``controller_options``
    #: win, so one lag-tuned set is written once for every tracker
    controller_defaults: dict[str, Any] = field(default_factory=dict)
    series: list[dict[str, Any]] = field(  # filters of the runs whose time series are kept
        default_factory=lambda: [
            {"payload": "heavy", "wind": "windy", "trajectory": "helix", "seed": 0},
            {"payload": "extra", "wind": "windy", "trajectory": "helix", "seed": 0},
            {"payload": "extra", "wind": "calm", "trajectory": "hover", "seed": 0},
        ]
    )
    workers: int = 0  # 0: one per CPU core
    recovery_band_m: float = 0.05  # m, band of the recovery time of runs with env events

    def __post_init__(self) -> None:
        """Check everything a sweep would otherwise only trip over mid-flight.

        Duplicate entries in a matrix list are errors (naming the duplicate) rather than silently
        de-duplicated: they would fly the same ``run_id`` twice, and a config that lists a seed
        twice is more likely a typo than a wish. ``env`` is checked by building the env once,
        ``controller_options`` by building each optioned controller once.
        """
        for p in self.payloads:
            resolve_payload(p)
        self._resolve_controllers()
        self.controller_options = with_defaults(
            self.controller_defaults, self.controller_options, self._specs
        )
        for w in self.winds:
            _check_wind(w)
        for t in self.trajectories:
            if t not in TRAJECTORIES:
                raise ValueError(
                    f"unknown trajectory {t!r}; valid choices: {', '.join(TRAJECTORIES)}"
                )
        for name in ("payloads", "winds", "trajectories"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: the list is empty; a sweep needs at least one entry")
            check_unique(name, values)
        check_seeds(self.seeds)
        check_episode_s(self.episode_s, self.env)
        if not isinstance(self.workers, int) or self.workers < 0:
            raise ValueError(f"workers must be an integer >= 0 (0: every core), got {self.workers}")
        _check_env(self.env, self.episode_s)
        recovery_spec(self.env, self.episode_s, self.recovery_band_m)
        self._check_controller_builds(self.env)
        _check_series(self.series)
        ids = [s.run_id for s in expand(self)]
        check_unique("runs", ids)  # e.g. a wind given as a name and as the same numbers


def with_defaults(
    defaults: Any, options: Any, specs: dict[str, ControllerSpec]
) -> dict[str, dict[str, Any]]:
    """``options`` (label → options) with ``defaults`` filled in for every label whose
    controller declares the option and does not set it itself (in its spec or in ``options``);
    a ``ValueError`` for a default that neither a controller of the matrix nor a built-in
    declares (a typo); one only left-out controllers take is left alone."""
    if not isinstance(defaults, dict):
        raise ValueError(f"controller_defaults: expected a mapping of options, got {defaults!r}")
    if not defaults:
        return options
    if not isinstance(options, dict):
        raise ValueError(f"controller_options: expected a mapping label → options, got {options!r}")
    out = {label: dict(opts) if isinstance(opts, dict) else opts for label, opts in options.items()}
    used: set[str] = set()
    for label, spec in specs.items():
        declared = declared_options(spec)
        own = out.get(label, {})
        if not isinstance(own, dict):
            continue  # named by _check_controller_options
        take = {
            k: v
            for k, v in defaults.items()
            if k in declared and k not in spec.options and k not in own
        }
        used |= {k for k in defaults if k in declared}
        if take:
            out[label] = {**take, **own}
    unused = set(defaults) - used
    if unused:  # fine for a narrowed matrix (--controllers), a typo if no built-in takes it
        known = set().union(*(declared_options(parse_spec(n)) for n in BUILTIN_CONTROLLERS))
        unknown = sorted(unused - known)
        if unknown:
            raise ValueError(
                f"controller_defaults: no controller takes {', '.join(unknown)} (neither one of "
                f"the matrix nor a built-in)"
            )
    return out


def declared_options(spec: ControllerSpec) -> set[str]:
    """The options the controller of ``spec`` declares: a built-in's ``OPTIONS`` table, a user
    factory's keyword arguments (none where it takes ``**kwargs`` only)."""
    factory = resolve_factory(spec.target)
    table = getattr(factory, "OPTIONS", None)
    if isinstance(table, dict):
        return set(table)
    return set(keyword_options(factory) or ())


def check_seeds(seeds: Any) -> None:
    """``seeds`` is a non-empty list of distinct integers >= 0 (the env's seeds): a
    ``ValueError`` naming the bad entry, so that no run is flown with a seed the env refuses."""
    if not isinstance(seeds, list) or not seeds:
        raise ValueError(f"seeds: expected a non-empty list of integers >= 0, got {seeds!r}")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seeds: {seed!r} is not an integer >= 0")
    check_unique("seeds", seeds)


def check_episode_s(episode_s: Any, env: Any = None, where: str = "") -> None:
    """``episode_s`` (s) is an episode length the env flies at the control rate of the env
    settings ``env``: the env's own check (a finite number from one control period to its
    ``MAX_EPISODE_S``), at load rather than as a failure of every run. ``where`` prefixes the
    message (``"scenario x: "``)."""
    if isinstance(episode_s, bool) or not isinstance(episode_s, int | float):
        raise ValueError(f"{where}episode_s must be a number of seconds, got {episode_s!r}")
    rate = (
        {"control_hz": env["control_hz"]} if isinstance(env, dict) and "control_hz" in env else {}
    )
    try:
        ResidualQuadEnv(episode_s=episode_s, **rate).close()
    except ValueError as exc:
        raise ValueError(f"{where}{exc}") from None


def check_builds(
    spec: ControllerSpec, env: dict[str, Any] | None = None, options: dict[str, Any] | None = None
) -> None:
    """Build ``spec`` (with ``options``) once at load, so that a bad spec or option is named now:
    a ``ValueError`` (a missing module or attribute, an unknown option, something that is not a
    Controller, a factory refusing a value). Anything else a user factory (an import path, a
    plugin) raises when called — a missing device, a bug — is its controller failing, not the
    config: it is not raised here, and every run of that controller becomes a failure row, as a
    controller failing in flight does."""
    try:
        build_controller(spec, env, options)
    except ValueError:
        raise
    except Exception:
        if spec.target in BUILTIN_CONTROLLERS:
            raise


def _check_wind(wind: Any) -> None:
    """A wind level name or a ``[mean, sigma]`` pair of finite speeds >= 0 (m/s)."""
    if isinstance(wind, str):
        WindModel.from_spec(wind)  # unknown names list the valid ones
        return
    ok = isinstance(wind, list | tuple) and len(wind) == 2
    ok = ok and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf for v in wind
    )
    if not ok:
        raise ValueError(
            f"winds: {wind!r} is neither a level name ({', '.join(WIND_LEVELS)}) nor a "
            "[mean, sigma] pair of finite speeds >= 0 in m/s"
        )


def check_unique(name: str, values: list[Any]) -> None:
    """A ``ValueError`` naming the first entry of ``values`` listed twice."""
    seen: set[Any] = set()
    for v in values:
        key = tuple(v) if isinstance(v, list) else v
        if key in seen:
            raise ValueError(
                f"{name}: {v!r} is listed twice; every entry must be unique (it would fly the "
                "same run twice)"
            )
        seen.add(key)


def _check_env(env: Any, episode_s: float) -> None:
    """``env`` must be ``ResidualQuad-v0`` keyword arguments that build an env."""
    if not isinstance(env, dict):
        raise ValueError(f"env: expected a mapping of ResidualQuad-v0 arguments, got {env!r}")
    params = [
        p
        for p in inspect.signature(ResidualQuadEnv.__init__).parameters
        if p != "self" and p not in MATRIX_ENV_KEYS
    ]
    unknown = sorted(set(env) - set(params), key=str)
    if unknown:
        set_by_matrix = [k for k in unknown if k in MATRIX_ENV_KEYS]
        why = f" ({', '.join(set_by_matrix)}: set per run)" if set_by_matrix else ""
        raise ValueError(f"env: unknown key(s) {unknown}{why}; valid keys: {params}")
    try:
        ResidualQuadEnv(**env, episode_s=episode_s).close()
    except Exception as exc:  # any failure here is a bad value in the config
        raise ValueError(f"env: invalid settings {env!r}: {type(exc).__name__}: {exc}") from None


def _check_user_controllers(
    specs: list[ControllerSpec], options: dict[str, dict[str, Any]], env: dict[str, Any]
) -> None:
    """Build every spec that is not a plain built-in name once (:func:`check_builds`): an object
    that is not a Controller or a bad option is named now, not in the middle of the sweep."""
    for spec in specs:
        if (spec.is_import_path or spec.options) and spec.label not in options:
            check_builds(spec, env)


def _check_controller_options(
    options: Any, env: dict[str, Any], specs: dict[str, ControllerSpec]
) -> None:
    """Every ``controller_options`` entry names a controller label and builds it
    (:func:`check_builds`)."""
    if not isinstance(options, dict):
        raise ValueError(f"controller_options: expected a mapping label → options, got {options!r}")
    for label, opts in options.items():
        if not isinstance(opts, dict):
            raise ValueError(f"controller_options[{label}]: expected a mapping, got {opts!r}")
        spec = specs.get(str(label)) or parse_spec(str(label))
        try:
            check_builds(spec, env, opts)
        except Exception as exc:  # unknown option, wrong type, missing weights file, ...
            raise ValueError(
                f"controller_options[{label}]: invalid options {opts!r}: {exc}"
            ) from None


def _check_series(series: Any) -> None:
    if not isinstance(series, list):
        raise ValueError(f"series: expected a list of filters, got {series!r}")
    for i, flt in enumerate(series):
        if not isinstance(flt, dict):
            raise ValueError(f"series[{i}]: expected a mapping, got {flt!r}")
        unknown = sorted(set(flt) - set(SERIES_KEYS), key=str)
        if unknown:
            raise ValueError(
                f"series[{i}]: unknown key(s) {unknown}; valid keys: {list(SERIES_KEYS)}"
            )


def expand(cfg: SweepConfig) -> list[RunSpec]:
    """Every run of the matrix, in a fixed order."""
    return [
        RunSpec(c, p, w if isinstance(w, str) else tuple(w), t, int(s), episode_s=cfg.episode_s)
        for c, p, w, t, s in product(
            cfg.labels, cfg.payloads, cfg.winds, cfg.trajectories, cfg.seeds
        )
    ]


def wants_series(cfg: SweepConfig, spec: RunSpec) -> bool:
    """Whether the run ``spec`` matches one of the config's ``series`` filters (its time series
    are kept)."""
    for flt in cfg.series:
        if all(getattr(spec, k) == v for k, v in flt.items() if k != "controller") and (
            "controller" not in flt or flt["controller"] == spec.controller
        ):
            return True
    return False
