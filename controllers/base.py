"""The controller interface and the registry that builds controllers by name.

Every controller — model-based or learned — implements :class:`Controller`: ``reset(seed)`` restores
its initial state exactly and ``policy(obs)`` maps one ``ResidualQuad-v0`` observation to one env
action. Controllers never read ``info``. Online learners measure what they need from successive
observations inside ``policy`` (act → step → observe is the env loop's ordering).
"""

from __future__ import annotations

import importlib
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
    """What a controller may know about the vehicle: the nominal model and the control period."""

    airframe: Airframe = Airframe()
    control_dt: float = 0.01  # s

    @classmethod
    def from_env(cls, env: Any) -> ControlContext:
        """Nominal airframe and control period of a (possibly wrapped) ``ResidualQuad-v0``."""
        base = getattr(env, "unwrapped", env)
        try:
            return cls(airframe=base.nominal, control_dt=float(base.control_dt))
        except AttributeError:
            raise ValueError(f"{env!r} is not a ResidualQuad environment") from None


Factory = Callable[..., Controller]

#: the four trackers of the residual-learning experiment [RES §7], in the source's order
SOURCE_TRACKERS: tuple[str, ...] = ("pid", "geo", "geo_res", "geo_rls")

#: name → "module:attribute" (imported on first use) or a factory callable
_REGISTRY: dict[str, str | Factory] = {
    "pid": "residual_quad.controllers.trackers:PIDTracker",
    "geo": "residual_quad.controllers.trackers:GeoTracker",
    "geo_res": "residual_quad.controllers.residual.trackers:ResidualGeoTracker",
    "geo_rls": "residual_quad.controllers.residual.trackers:RLSGeoTracker",
    "hnewton": "residual_quad.controllers.prioritized.quad:HNewtonTracker",
    "hnewton_rls": "residual_quad.controllers.prioritized.quad:HNewtonRLSTracker",
    "ppo": "residual_quad.controllers.ppo:PPOController",
    "sb3": "residual_quad.controllers.sb3:SB3Policy",
}


def register_controller(name: str, factory: str | Factory, *, overwrite: bool = False) -> None:
    """Add a controller factory ``factory(context: ControlContext, **overrides)`` under ``name``."""
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"controller {name!r} is already registered")
    _REGISTRY[name] = factory


def available_controllers() -> list[str]:
    """Names accepted by :func:`make_controller`, in registration order (tables use it)."""
    return list(_REGISTRY)


def make_controller(name: str, env_or_context: Any = None, **overrides: Any) -> Controller:
    """Build a registered controller.

    Args:
        name: one of :func:`available_controllers`.
        env_or_context: a ``ResidualQuad-v0`` env (its nominal airframe and control period are
            used), a :class:`ControlContext`, or ``None`` for the defaults.
        **overrides: controller-specific settings (gains, weight files, ...).
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown controller {name!r}; valid choices: {', '.join(available_controllers())}"
        )
    if env_or_context is None:
        context = ControlContext()
    elif isinstance(env_or_context, ControlContext):
        context = env_or_context
    else:
        context = ControlContext.from_env(env_or_context)
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, attr = factory.split(":")
        factory = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = factory
    return factory(context, **overrides)


def to_rotor_action(thrusts: np.ndarray, airframe: Airframe) -> np.ndarray:
    """Rotor thrusts (N) → the env's normalized ``rotor`` action in [-1, 1]."""
    return np.asarray(thrusts) * (2.0 / airframe.max_rotor_thrust) - 1.0
