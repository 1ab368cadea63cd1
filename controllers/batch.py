"""Batched controllers: one ``policy_batch(obs (N, 36)) -> (N, 4)`` call for N independent envs.

A vector env steps N vehicles at once; its controller should too. :class:`BatchedController` is
the interface, :func:`make_batch_controller` and :func:`batch_from_spec` (a sweep's entry) the
entry points:

* every built-in controller is a law (:mod:`residual_quad.controllers.law`) and flies as the one
  driver's vectorized batch (:class:`~residual_quad.controllers.driver.LawBatch`: numpy over the
  envs, one row of state per env; ``hnewton``'s small HLSPs on the solvers' batch algorithm);
  so does a plugin's or an import path's factory that returns a law;
* any other controller (a user controller) is wrapped by :class:`BatchedLoop`, N per-env
  instances behind the same interface; :class:`BatchedGroups` flies several batches side by
  side in one vector env.

``reset_batch(seeds)`` resets every env, ``reset_env(i, seed)`` one env (a vector env's
autoreset). A batch of the wrong shape is a ``ValueError``. A row with a non-finite entry (a bad
sample of one env) follows the single controllers' rule
(:class:`~residual_quad.controllers.base.ObservationGuard`) row by row: that env gets its last
action (hover before its first), its state is left exactly as it was, and the other rows are
computed as if the bad row had been clean (:class:`RowGuard`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from residual_quad.controllers.base import (
    ControlContext,
    Controller,
    ObservationGuard,
    available_controllers,
    controller_context,
    hover_action,
    is_registered,
    resolve_factory,
)
from residual_quad.controllers.driver import (
    LawBatch,
    RowGuard,
    Seeds,
    check_index,
    check_n_envs,
    check_obs_batch,
    check_seeds,
)
from residual_quad.controllers.law import Law


@runtime_checkable
class BatchedController(Protocol):
    """What a vector env's harness flies: N controllers behind one call."""

    #: the env ``action_mode`` the actions are meant for
    action_mode: str
    #: number of envs in the batch
    n_envs: int

    def reset_batch(self, seeds: Seeds = None) -> None: ...

    def reset_env(self, index: int, seed: int | None = None) -> None: ...

    def policy_batch(self, obs: np.ndarray) -> np.ndarray: ...


# ----------------------------------------------------------------------------- generic fallback
class BatchedLoop:
    """Any :class:`Controller` as a :class:`BatchedController`: N per-env instances, one
    ``policy`` call each (the fallback for controllers without a vectorized path).

    Args:
        controllers: the N instances (independent objects; all with the same ``action_mode``).
    """

    def __init__(self, controllers: Sequence[Controller]):
        self.controllers = list(controllers)
        if not self.controllers:
            raise ValueError("BatchedLoop needs at least one controller")
        if len({id(c) for c in self.controllers}) != len(self.controllers):
            raise ValueError("BatchedLoop needs one independent controller instance per env")
        modes = {c.action_mode for c in self.controllers}
        if len(modes) != 1:
            raise ValueError(f"the controllers of a batch act in different modes {sorted(modes)}")
        self.action_mode = modes.pop()
        self.n_envs = len(self.controllers)
        # controllers without their own guard (user controllers) are guarded here, per row
        self._guarded = np.array([isinstance(c, ObservationGuard) for c in self.controllers])
        context = getattr(self.controllers[0], "context", None) or ControlContext()
        self.guard = RowGuard(self.n_envs, hover_action(self.action_mode, context.airframe))

    @classmethod
    def from_factory(cls, factory: Callable[[], Controller], n_envs: int) -> BatchedLoop:
        """N instances from a zero-argument factory."""
        return cls([factory() for _ in range(check_n_envs(n_envs))])

    def reset_batch(self, seeds: Seeds = None) -> None:
        for c, s in zip(self.controllers, check_seeds(seeds, self.n_envs), strict=True):
            c.reset(s)
        self.guard.reset()

    def reset_env(self, index: int, seed: int | None = None) -> None:
        index = check_index(index, self.n_envs)
        self.controllers[index].reset(seed)
        self.guard.reset(index)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, bad = check_obs_batch(obs, self.n_envs)
        skip = bad & ~self._guarded  # a guarded controller answers its bad sample itself
        action = np.stack(
            [
                h if s else np.asarray(c.policy(o), dtype=float)
                for c, o, s, h in zip(self.controllers, obs, skip, self.guard.held, strict=True)
            ]
        )
        return self.guard.finish(action, skip)

    @property
    def last_residual(self) -> np.ndarray:
        """(N, 3) m/s², world: each instance's ``last_residual`` (NaN where it has none)."""
        nan = (np.nan, np.nan, np.nan)
        return np.array([getattr(c, "last_residual", nan) for c in self.controllers], dtype=float)


class BatchedGroups:
    """Several batch controllers side by side in one batch: part ``j`` flies the envs
    ``rows[j]`` (e.g. every controller of a sweep in one vector env).

    Args:
        parts: ``(controller, rows)`` pairs; the rows of all parts partition ``range(N)`` and
            each controller's ``n_envs`` is its number of rows; one ``action_mode`` for all.
    """

    def __init__(self, parts: Sequence[tuple[BatchedController, Sequence[int]]]):
        if not parts:
            raise ValueError("BatchedGroups needs at least one part")
        self.parts = [(c, np.asarray(rows, dtype=np.int64)) for c, rows in parts]
        every = np.sort(np.concatenate([rows for _, rows in self.parts]))
        if not np.array_equal(every, np.arange(len(every))):
            raise ValueError("the rows of the parts must partition range(n_envs)")
        for c, rows in self.parts:
            if c.n_envs != len(rows):
                raise ValueError(f"a part flies {c.n_envs} envs but was given {len(rows)} rows")
        modes = {c.action_mode for c, _ in self.parts}
        if len(modes) != 1:
            raise ValueError(f"the parts of a batch act in different modes {sorted(modes)}")
        self.action_mode = modes.pop()
        self.n_envs = len(every)
        self._owner = np.empty(self.n_envs, dtype=np.int64)  # env → (part, row in the part)
        self._local = np.empty(self.n_envs, dtype=np.int64)
        for j, (_, rows) in enumerate(self.parts):
            self._owner[rows] = j
            self._local[rows] = np.arange(len(rows))

    def reset_batch(self, seeds: Seeds = None) -> None:
        seeds = check_seeds(seeds, self.n_envs)
        for c, rows in self.parts:
            c.reset_batch([seeds[i] for i in rows.tolist()])

    def reset_env(self, index: int, seed: int | None = None) -> None:
        index = check_index(index, self.n_envs)
        self.parts[self._owner[index]][0].reset_env(int(self._local[index]), seed)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, _ = check_obs_batch(obs, self.n_envs)  # each part holds its own bad rows
        action = np.empty((self.n_envs, 4))
        for c, rows in self.parts:
            action[rows] = c.policy_batch(obs[rows])
        return action

    @property
    def last_residual(self) -> np.ndarray:
        """(N, 3) m/s², world: each part's ``last_residual`` (NaN where it has none)."""
        out = np.full((self.n_envs, 3), np.nan)
        for c, rows in self.parts:
            value = getattr(c, "last_residual", None)
            if value is not None:
                out[rows] = value
        return out


# ----------------------------------------------------------------------------- factory
def _law_class(target: str) -> bool:
    """Whether the registered ``target``'s factory is a :class:`~residual_quad.controllers.law.
    Law` class (its batch is the driver's, vectorized); imports the registered module only."""
    if not is_registered(target):
        return False
    factory = resolve_factory(target)
    return isinstance(factory, type) and issubclass(factory, Law)


def vectorized_controllers() -> list[str]:
    """Registered names with a vectorized batch path (the others run in :class:`BatchedLoop`)."""
    return [n for n in available_controllers() if _law_class(n)]


def make_batch_controller(
    name: str, n_envs: int, env_or_context: Any = None, **overrides: Any
) -> BatchedController:
    """A :class:`BatchedController` of ``n_envs`` envs for the controller ``name``.

    A law (:class:`~residual_quad.controllers.law.Law`) flies as one vectorized batch
    (:class:`~residual_quad.controllers.driver.LawBatch`); any other controller as a
    :class:`BatchedLoop` of ``n_envs`` instances built by :func:`make_controller` with the same
    arguments. ``env_or_context`` and ``overrides`` as in :func:`make_controller`. The batch
    starts reset (``reset_batch()``).
    """
    if name not in available_controllers():
        raise ValueError(
            f"unknown controller {name!r}; valid choices: {', '.join(available_controllers())}"
        )
    from residual_quad.controllers.specs import ControllerSpec

    return batch_from_spec(
        ControllerSpec(name), n_envs, controller_context(env_or_context), **overrides
    )


def has_batch_path(spec: Any, **overrides: Any) -> bool:
    """Whether :func:`batch_from_spec` gives ``spec`` (with ``overrides``) a numpy-vectorized
    batch rather than a loop of instances: its factory is a :class:`~residual_quad.controllers.
    law.Law` class (registered, a plugin's or an import path's; a factory function that returns
    a law is known only once built, and flies one job per run)."""
    try:
        factory = resolve_factory(spec.target)
    except ValueError:
        return False  # building it names the problem
    return isinstance(factory, type) and issubclass(factory, Law)


def batch_from_spec(
    spec: Any, n_envs: int, context: ControlContext | None = None, **overrides: Any
) -> BatchedController:
    """The :class:`BatchedController` of a resolved :class:`~residual_quad.controllers.specs.
    ControllerSpec` (a sweep's entry): the driver's vectorized batch of a law
    (:class:`~residual_quad.controllers.driver.LawBatch`), else a :class:`BatchedLoop` of
    ``spec.build`` instances (import paths, user controllers). ``overrides`` win over the
    spec's options."""
    n_envs = check_n_envs(n_envs)
    first = spec.make(context, **overrides)
    if isinstance(first, Law):
        return LawBatch(first, n_envs)
    loop = BatchedLoop([first, *(spec.build(context, **overrides) for _ in range(n_envs - 1))])
    loop.reset_batch()
    return loop
