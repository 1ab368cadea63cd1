"""The controller interface, the registry of controller factories by name and the guard of
every built-in controller against bad samples (:class:`ObservationGuard`).

Every controller — model-based or learned — implements :class:`Controller`: ``reset(seed)`` restores
its initial state exactly and ``policy(obs)`` maps one ``ResidualQuad-v0`` observation to one env
action. Controllers never read ``info``. Online learners measure what they need from successive
observations inside ``policy`` (act → step → observe is the env loop's ordering).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from residual_quad.envs.airframe import Airframe


@runtime_checkable
class Controller(Protocol):
    """What the evaluation harness flies."""

    #: the env ``action_mode`` this controller's actions are meant for
    action_mode: str

    def reset(self, seed: int | None = None) -> None: ...

    def policy(self, obs: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class ControlContext:
    """What a controller may know about the vehicle: the nominal model, the control period, the
    rotors' nominal time constant and the loop's latencies (spec-sheet figures, as the mass is).
    The trackers' defaults follow them: the gains
    (:func:`~residual_quad.controllers.attitude.default_attitude_gains`) and the latency
    predictor (:mod:`~residual_quad.controllers.latency`)."""

    airframe: Airframe = Airframe()
    control_dt: float = 0.01  # s
    rotor_tau_s: float = 0.0  # s, the rotors' nominal first-order time constant (0: ideal rotors)
    obs_delay_steps: int = 0  # control periods of sensor latency
    action_delay_steps: int = 0  # control periods of command latency

    @property
    def dead_time_s(self) -> float:
        """s, the loop's dead time: the command plus the sensor latency."""
        return (self.obs_delay_steps + self.action_delay_steps) * self.control_dt

    @classmethod
    def from_env(cls, env: Any) -> ControlContext:
        """Nominal airframe, control period, rotor time constant and latencies of a (possibly
        wrapped) ``ResidualQuad-v0`` (a remote env reports no plant options: ideal ones)."""
        base = getattr(env, "unwrapped", env)
        try:
            airframe, control_dt = base.nominal, float(base.control_dt)
        except AttributeError:
            raise ValueError(f"{env!r} is not a ResidualQuad environment") from None
        plant = getattr(base, "plant_options", None)  # a remote env reports none: ideal
        return cls(
            airframe=airframe,
            control_dt=control_dt,
            rotor_tau_s=float(getattr(plant, "rotor_tau_s", 0.0)),
            obs_delay_steps=int(getattr(plant, "obs_delay_steps", 0)),
            action_delay_steps=int(getattr(plant, "action_delay_steps", 0)),
        )

    def on_plant(self, env_kwargs: dict[str, Any]) -> ControlContext:
        """This context with the rotors and latencies of the plant that the env settings
        ``env_kwargs`` name (``preset`` and the plant options; the env's own checks): what a
        learned controller is told about the plant it was trained on, wherever it flies."""
        from residual_quad.envs.presets import CONTROL_OPTIONS, plant_options

        told = {k: env_kwargs.get(k) for k in CONTROL_OPTIONS}
        plant = plant_options(env_kwargs.get("preset"), **told)
        return dataclasses.replace(
            self,
            rotor_tau_s=plant.rotor_tau_s,
            obs_delay_steps=plant.obs_delay_steps,
            action_delay_steps=plant.action_delay_steps,
        )

    def ideal(self) -> ControlContext:
        """This context with ideal rotors and no latency: the plant the source's defaults are
        for (a controller that must fly as it was trained on it)."""
        return dataclasses.replace(self, rotor_tau_s=0.0, obs_delay_steps=0, action_delay_steps=0)


#: what a learned controller's :class:`InformationUse` reads its training record from
LEARNED_FROM = ("", "policy", "residual")


@dataclass(frozen=True)
class InformationUse:
    """What a controller sees when it acts, and how it was tuned: its row of the report's
    information audit [LEVELING]. Declared where the controller is defined (a class attribute
    ``INFORMATION`` in the class's own namespace, never inherited), read by
    :mod:`residual_quad.evaluation.report.information`.

    ``learned`` names the training record that completes the row: ``"policy"`` (a PPO/SB3
    policy file: its ``features`` and ``privileged_critic`` entries and its budget),
    ``"residual"`` (the residual network's weights metadata), ``""`` (none: model-based)."""

    reference: bool = True  # sees the current reference (position, velocity, yaw)
    feedforward_accel: bool = False  # uses the reference acceleration (feed-forward or input)
    preview_k: int = 0  # future reference samples seen (0: none)
    memory: str = ""  # what it keeps from past steps ("": memoryless)
    residual_estimate: str = ""  # where its Δâ comes from ("": none)
    privileged_training: bool = False  # truth (env ``info``) used in training
    tuning: str = ""  # how its gains / hyper-parameters were chosen
    learned: str = ""  # training record read by the audit: "", "policy", "residual"
    #: what it outputs, and through what it reaches the rotors (the action level)
    action: str = "acceleration command → the shared attitude loop"
    decision_hz: float = 100.0  # Hz, decisions per second (a policy row: from its record)
    #: what its tuning or training maximized (a policy row: completed from its record)
    objective: str = "none (gains by hand or from the source)"
    tuning_trials: int = 0  # configuration trials of its design, as documented (0: none)
    training_scenarios: str = "none"  # what it was trained or tuned on (a learned row: completed)

    def __post_init__(self) -> None:
        if isinstance(self.preview_k, bool) or not isinstance(self.preview_k, int):
            raise ValueError(f"preview_k must be an integer >= 0, got {self.preview_k!r}")
        if self.preview_k < 0:
            raise ValueError(f"preview_k must be an integer >= 0, got {self.preview_k}")
        if self.learned not in LEARNED_FROM:
            raise ValueError(
                f"learned must be one of {', '.join(map(repr, LEARNED_FROM))}; got {self.learned!r}"
            )
        if not self.tuning:
            raise ValueError("tuning must say how the controller was tuned (an honest budget)")
        trials = self.tuning_trials
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
            raise ValueError(f"tuning_trials must be an integer >= 0, got {trials!r}")
        rate = self.decision_hz
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < 1e6:
            raise ValueError(f"decision_hz must be a number of Hz > 0, got {rate!r}")


Factory = Callable[..., Controller]

#: the four trackers of the residual-learning experiment [RES §7], in the source's order
SOURCE_TRACKERS: tuple[str, ...] = ("pid", "geo", "geo_res", "geo_rls")

#: name → "module:attribute" (imported on first use) or a factory callable
_REGISTRY: dict[str, str | Factory] = {
    "pid": "residual_quad.controllers.trackers:PIDTracker",
    "geo": "residual_quad.controllers.trackers:GeoTracker",
    "geo_res": "residual_quad.controllers.residual.trackers:ResidualGeoTracker",
    "geo_rls": "residual_quad.controllers.residual.trackers:RLSGeoTracker",
    "geo_rls_dob": "residual_quad.controllers.adaptive:DOBRLSGeoTracker",
    # the trackers with the gains of their shipped ``rquad tune`` study (controllers/tuned.py)
    "pid_tuned": "residual_quad.controllers.tuned:pid",
    "geo_rls_tuned": "residual_quad.controllers.tuned:geo_rls",
    "geo_rls_dob_tuned": "residual_quad.controllers.tuned:geo_rls_dob",
    "hnewton": "residual_quad.controllers.prioritized.quad:HNewtonTracker",
    "hnewton_rls": "residual_quad.controllers.prioritized.quad:HNewtonRLSTracker",
    "ppo": "residual_quad.controllers.ppo:PPOController",
    "ppo_res": "residual_quad.controllers.ppo_res:ResidualPPOController",
    "ppo_acc": "residual_quad.controllers.ppo_acc:AccelerationPPOController",
    "ppo_adapt": "residual_quad.controllers.ppo_adapt:PPOAdaptController",
    "sb3": "residual_quad.controllers.sb3:SB3Policy",
    "sac": "residual_quad.controllers.ppo:SACController",
    "tqc": "residual_quad.controllers.ppo:TQCController",
}


#: the controllers of this package (their options are checked against their ``OPTIONS`` tables
#: when a spec is parsed: :func:`residual_quad.controllers.specs.check_spec_options`)
BUILTIN_CONTROLLERS: tuple[str, ...] = tuple(_REGISTRY)


#: the entry-point group through which an installed package registers controllers (plugins)
ENTRY_POINT_GROUP = "residual_quad.controllers"


def register_controller(name: str, factory: str | Factory, *, overwrite: bool = False) -> None:
    """Add a controller factory ``factory(context: ControlContext, **overrides)`` under ``name``.

    Registration lives in this process only; for ``rquad sweep``/``eval`` (other processes) use an
    import-path spec (``my_pkg.ctrl:Factory``) or a plugin entry point (``docs/controllers.md``).
    """
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"controller {name!r} is already registered")
    _REGISTRY[name] = factory


#: the last discovery of plugin entry points: (the search path it read, its entry points)
_DISCOVERED: list[tuple[tuple[tuple[str, int], ...], tuple[Any, ...]]] = []


def _search_path_state() -> tuple[tuple[str, int], ...]:
    """Each ``sys.path`` entry with its modification time (ns; -1 where it cannot be read):
    installing or removing a distribution adds or removes a ``*.dist-info`` folder in one of
    them, which moves that folder's time."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except (OSError, TypeError, ValueError):
            state.append((str(entry), -1))
    return tuple(state)


def plugin_entry_points() -> dict[str, Any]:
    """Name → entry point of every installed plugin controller (group :data:`ENTRY_POINT_GROUP`)
    whose name is not registered already (the registry wins); nothing is imported here.

    Scanning the installed distributions costs ≈ 10 ms (every ``parse_spec`` asks), so the scan
    is reused while ``sys.path`` and its folders are unchanged (:func:`_search_path_state`)."""
    from importlib.metadata import entry_points

    state = _search_path_state()
    if not _DISCOVERED or _DISCOVERED[0][0] != state:
        _DISCOVERED[:] = [(state, tuple(entry_points(group=ENTRY_POINT_GROUP)))]
    found: dict[str, Any] = {}
    for ep in _DISCOVERED[0][1]:
        if ep.name not in _REGISTRY and ep.name not in found:
            found[ep.name] = ep
    return found


def is_registered(name: str) -> bool:
    """Whether ``name`` is in the registry (a built-in or :func:`register_controller`'s), not a
    plugin or an import path."""
    return name in _REGISTRY


def available_controllers() -> list[str]:
    """Names accepted by :func:`~residual_quad.controllers.specs.make_controller`: the registry
    in registration order (tables use it), then installed plugins in discovery order."""
    return list(_REGISTRY) + list(plugin_entry_points())


def _import_attr(target: str, spec: str) -> Any:
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        if not module.startswith("residual_quad") or exc.name == module:
            raise ValueError(
                f"controller {spec!r}: cannot import module {module!r} ({exc}); the module must "
                "be importable from every worker process (on PYTHONPATH or installed)"
            ) from None
        raise
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(
                f"controller {spec!r}: module {module!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise ValueError(
            f"controller {spec!r}: {target} is a {type(obj).__name__}, not a factory or class"
        )
    return obj


def resolve_factory(target: str) -> Factory:
    """The factory of a registered name, a plugin name or an import path ``module:attr``."""
    if target in _REGISTRY:
        factory = _REGISTRY[target]
        if isinstance(factory, str):
            factory = _import_attr(factory, target)
            _REGISTRY[target] = factory
        return factory
    if ":" in target:
        return _import_attr(target, target)
    ep = plugin_entry_points().get(target)
    if ep is None:
        raise ValueError(
            f"unknown controller {target!r}; valid choices: {', '.join(available_controllers())}"
        )
    dist = getattr(getattr(ep, "dist", None), "name", None) or "an unknown distribution"
    try:
        factory = ep.load()
    except Exception as exc:  # any failure inside a plugin is the plugin's
        raise ValueError(
            f"controller plugin {target!r} of distribution {dist!r} failed to load "
            f"({ep.value}): {type(exc).__name__}: {exc}"
        ) from None
    if not callable(factory):
        raise ValueError(
            f"controller plugin {target!r} of distribution {dist!r}: {ep.value} is not callable"
        )
    return factory


def controller_context(env_or_context: Any) -> ControlContext:
    """The :class:`ControlContext` of an env, a context or ``None`` (the defaults)."""
    if env_or_context is None:
        return ControlContext()
    if isinstance(env_or_context, ControlContext):
        return env_or_context
    return ControlContext.from_env(env_or_context)


def to_rotor_action(thrusts: np.ndarray, airframe: Airframe) -> np.ndarray:
    """Rotor thrusts (N) → the env's normalized ``rotor`` action in [-1, 1]."""
    return np.asarray(thrusts) * (2.0 / airframe.max_rotor_thrust) - 1.0


def hover_action(action_mode: str, airframe: Airframe) -> np.ndarray:
    """The env action of nominal hover: every rotor at a quarter of the hover thrust (N) in
    ``rotor`` mode, the hover collective and zero body rates in ``ctbr`` mode. The action a
    guarded controller holds when a non-finite observation arrives before its first action."""
    if action_mode == "ctbr":
        return np.array([2.0 * airframe.hover_thrust / airframe.max_thrust - 1.0, 0.0, 0.0, 0.0])
    return to_rotor_action(np.full(4, 0.25 * airframe.hover_thrust), airframe)


class ObservationGuard:
    """The one rule of every built-in controller for a non-finite observation (a bad sample).

    :meth:`policy` checks the observation before the controller sees it: if any entry is NaN or
    ±inf, the controller's :meth:`act` is not called — its integrators, Newton state, filters,
    estimators and observers stay exactly as they were — and the action returned is the last
    action (a zero-order hold, what a flight controller does on a sensor dropout), or the hover
    action (:func:`hover_action`) if there was none since :meth:`reset_guard`. Controllers that
    measure from *successive* observations are told by :meth:`forget_previous_sample` that the
    next clean observation does not follow their previous one, so no measurement spans the gap.
    A non-finite action computed from a finite observation (a numerical failure) is replaced by
    the held action too. On clean observations the action is ``act(obs)`` itself, bit for bit.

    Subclasses implement :meth:`act`, call :meth:`reset_guard` from ``reset`` and have a
    ``context`` (:class:`ControlContext`) and an ``action_mode``. Every built-in controller is a
    law flown by :class:`~residual_quad.controllers.driver.LawController`, this guard's one
    subclass in the package; a user controller may use it too.
    """

    context: ControlContext
    action_mode: str
    #: non-finite observations (and numerical failures) answered with the held action since reset
    nonfinite_observations: int = 0
    _guard_action: np.ndarray | None = None

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The action for a finite observation (the controller's own law)."""
        raise NotImplementedError

    def policy(self, obs: np.ndarray) -> np.ndarray:
        """The action for one observation; a non-finite one is answered with the held action."""
        if not np.isfinite(obs).all():
            self.forget_previous_sample()
            return self._held_action()
        action = self.act(obs)
        if not np.isfinite(action).all():
            return self._held_action()
        self._guard_action = action.copy()
        return action

    def forget_previous_sample(self) -> None:
        """Hook: the next observation does not follow the last one the controller saw (a bad
        sample came between); controllers that difference successive observations drop their
        memory of the previous one. Nothing to forget by default."""

    def reset_guard(self) -> None:
        """No held action and no bad samples counted (call from ``reset``)."""
        self._guard_action = None
        self.nonfinite_observations = 0

    def _held_action(self) -> np.ndarray:
        self.nonfinite_observations += 1
        if self._guard_action is None:
            context = getattr(self, "context", None) or ControlContext()
            return hover_action(self.action_mode, context.airframe)
        return self._guard_action.copy()
