"""A controller as a law over explicit state, run by one driver for one vehicle or a batch.

A :class:`Law` holds a controller's parameters (gains, networks, settings: never changed by
flying) and declares its state: ``init_state(n)`` returns a frozen record of named arrays with a
leading env axis — a ``NamedTuple`` (or a frozen dataclass), nested for components, ``None`` for
an absent one. ``NamedTuple`` is the record of the built-in laws because one vehicle replaces its
state every step: building one costs ≈ 1 µs against ≈ 3 µs for a frozen dataclass of the same
21 fields (``dataclasses.replace``: 6 µs). Its step is
``act(state, obs) -> (state, action)`` over a finite batch of observations (n, 36 + 6K). The
driver (:mod:`residual_quad.controllers.driver`) owns everything else, once for every law:
resets (a reset writes ``init_state``'s row), the held action of a bad sample and the restore of
that env's state over every field of the tree, the action check.

``act`` takes ownership of the state it is given: it may update its arrays in place (the
covariance of an RLS is 65 × 65 per env, a copy per step would cost more than the update) and
returns the state to use next. The driver keeps what it must restore before calling it.

One vehicle: a law may add a float kernel ``act_one(state, obs)`` over the state of one vehicle
(:meth:`Law.init_one`: the row of a batch of one, scalars as Python numbers) where a single
flight's speed was measured to need it — numpy's per-call overhead makes a batch of one several
times slower than float code (``geo`` 18 µs vs 116 µs per call). Without one, a single flight is
the batch law on a batch of one (:meth:`Law.act_one`'s default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from residual_quad.controllers.base import ControlContext, hover_action


# ----------------------------------------------------------------------------- state trees
def _is_record(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def tree_map(fn: Callable[..., Any], state: Any, *rest: Any) -> Any:
    """``fn`` over the leaves (arrays and scalars) of a state tree (nested ``NamedTuple``s or
    dataclasses; ``None`` stays ``None``), with the matching leaves of ``rest``; a new tree of
    the same classes."""
    if state is None:
        return None
    if _is_record(state):
        return type(state)._make(
            tree_map(fn, x, *(r[i] for r in rest)) for i, x in enumerate(state)
        )
    if dataclasses.is_dataclass(state):
        return type(state)(
            **{
                f.name: tree_map(fn, getattr(state, f.name), *(getattr(r, f.name) for r in rest))
                for f in dataclasses.fields(state)
            }
        )
    return fn(state, *rest)


def tree_leaves(state: Any) -> list[Any]:
    """The leaves of a state tree in field order."""
    leaves: list[Any] = []
    tree_map(lambda x: leaves.append(x), state)
    return leaves


def take_rows(state: Any, rows: Any) -> Any:
    """A copy of the rows ``rows`` (an index, slice or (n,) bool mask) of every leaf."""
    return tree_map(lambda x: np.array(x[rows]), state)


def put_rows(state: Any, rows: Any, values: Any) -> None:
    """Write ``values`` (a tree of :func:`take_rows`'s shape, or of one row) into the rows
    ``rows`` of every leaf of ``state``, in place."""
    tree_map(lambda x, v: x.__setitem__(rows, v), state, values)


def _one(x: Any) -> Any:
    """Row 0 of a batch-of-one leaf: a Python scalar for a (1,) array, else an own array."""
    row = x[0]
    return row.item() if np.ndim(row) == 0 else np.array(row)


def _batch_of_one(x: Any) -> np.ndarray:
    return np.asarray(x)[None]


def one_vehicle(state: Any) -> Any:
    """The state of one vehicle from a batch-of-one state (row 0 of every leaf)."""
    return tree_map(_one, state)


def as_batch_of_one(state: Any) -> Any:
    """A one-vehicle state as a batch of one (every leaf with a leading axis of 1)."""
    return tree_map(_batch_of_one, state)


def replace(state: Any, **changes: Any) -> Any:
    """``state`` with some fields replaced (a new record; ``state`` itself is unchanged)."""
    if _is_record(state):
        return state._replace(**changes)
    return dataclasses.replace(state, **changes)


# ----------------------------------------------------------------------------- the law
class Law:
    """A controller's law: parameters as attributes, state as an explicit tree.

    Subclasses set ``action_mode`` and ``name``, keep ``context`` (:class:`ControlContext`) and
    implement :meth:`init_state` and :meth:`act`; :meth:`forget` where the law measures from
    successive observations; :meth:`act_one` (and :meth:`forget_one`) where one vehicle needs
    float code. The driver flies it: :class:`~residual_quad.controllers.driver.LawController`
    (one vehicle, ``policy(obs)``) or :class:`~residual_quad.controllers.driver.LawBatch`
    (N envs, ``policy_batch(obs)``).
    """

    action_mode: ClassVar[str] = "rotor"
    name: ClassVar[str] = "law"
    context: ControlContext

    # -- the batch law -------------------------------------------------------------------------
    def init_state(self, n: int) -> Any:
        """The initial state of ``n`` envs (every leaf's first axis is the env)."""
        raise NotImplementedError

    def act(self, state: Any, obs: np.ndarray) -> tuple[Any, np.ndarray]:
        """The next state and the actions (n, 4) for a finite observation batch (n, D)."""
        raise NotImplementedError

    def forget(self, state: Any, rows: np.ndarray) -> Any:
        """The envs ``rows`` ((n,) bool) had a bad sample: their next observation does not
        follow their previous one. Laws that difference successive observations drop their
        memory of the previous one here; nothing to forget by default."""
        return state

    # -- one vehicle ---------------------------------------------------------------------------
    def init_one(self) -> Any:
        """The initial state of one vehicle: row 0 of :meth:`init_state` of a batch of one."""
        return one_vehicle(self.init_state(1))

    def act_one(self, state: Any, obs: np.ndarray) -> tuple[Any, np.ndarray]:
        """The next state and the action (4,) of one vehicle for a finite observation (D,):
        the batch law on a batch of one unless a law has a float kernel."""
        state, action = self.act(as_batch_of_one(state), np.asarray(obs, dtype=float)[None])
        return one_vehicle(state), action[0]

    def forget_one(self, state: Any) -> Any:
        """:meth:`forget` for one vehicle."""
        return one_vehicle(self.forget(as_batch_of_one(state), np.ones(1, dtype=bool)))

    # -- drivers -------------------------------------------------------------------------------
    @property
    def hover(self) -> np.ndarray:
        """The action held by an env that has not acted since its reset."""
        return hover_action(self.action_mode, self.context.airframe)
