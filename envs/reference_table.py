"""The reference part of a batch of observations at each env's own step, without a Python call
per env: the built-in trajectories tabulated on the control-time grid.

A built-in trajectory (:data:`~residual_quad.envs.trajectories.TRAJECTORIES`) is a pure function
of its parameters and of the time, and an env only reads it at control times ``k · control_dt``.
:class:`BatchReferences` evaluates each distinct built-in trajectory once per step ``k`` — a
block of steps at a time with :func:`~residual_quad.envs.trajectories.fields_at`, the
trajectory's own formula evaluated on an array of times by the rules of
:mod:`~residual_quad.envs.xp`, so the rows are the single env's bits on every CPU — and then
serves any batch of ``(env, step)`` pairs with one array index, in
lockstep or not. Rows are filled lazily (512 steps, then doubling up to the episode length), so
an episode that ends early costs little more than the steps it reached.

A user :class:`~residual_quad.envs.trajectories.Trajectory` (a subclass included: it may
override anything) keeps the per-env path: one call per distinct (trajectory object, step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import numpy as np

from residual_quad.envs.trajectories import (
    TRAJECTORIES,
    check_reference,
    fields_at,
    reference_fields,
)

REFERENCE_SIZE = 11
"""Entries of :func:`~residual_quad.envs.trajectories.reference_fields`."""

TABLE_BUDGET_BYTES = 64 * 2**20
"""The most memory the tables may take (bytes): 88 B a step, so ≈ 380 distinct trajectories of
2 000-step episodes. A trajectory that finds no room (every table in use by some env, or a very
long episode) takes the per-env path — the same bits, a Python call per env and step."""

_FIRST_FILL = 512  # steps tabulated at a table's first use (then doubling)
"""A fill's cost is mostly fixed (the trajectory's formulas on an array: ≈ 23 µs, then ≈ 0.06 µs
a step), so a first fill of 512 steps costs twice one of 64 and spares the three refills a
flown episode of many distinct trajectories (training's) would have needed by then."""
_BUILT_IN = frozenset(TRAJECTORIES.values())


def table_key(trajectory: object) -> Hashable | None:
    """What a built-in trajectory's references depend on (its class and the ``repr`` of each
    parameter: ``0.0`` and ``-0.0``, ``2`` and ``2.0`` kept apart, as their bits may differ);
    ``None`` for anything else, which is not tabulated."""
    if type(trajectory) not in _BUILT_IN:
        return None
    fields = dataclasses.fields(trajectory)  # type: ignore[arg-type]
    return type(trajectory), tuple(repr(getattr(trajectory, f.name)) for f in fields)


class BatchReferences:
    """The reference rows of ``num_envs`` envs, each with its own trajectory, at their steps.

    Args:
        num_envs: batch size.
        control_dt: control period (s); step ``k`` is time ``k · control_dt``.
        max_steps: the longest episode (control steps): a table holds steps ``0 … max_steps``.
        budget_bytes: the most memory the tables may take (:data:`TABLE_BUDGET_BYTES`).
    """

    def __init__(
        self,
        num_envs: int,
        control_dt: float,  # s
        max_steps: int,  # control steps
        budget_bytes: int = TABLE_BUDGET_BYTES,
    ):
        self.control_dt = control_dt
        self.length = max_steps + 1  # rows of a table: steps 0 … max_steps
        self.max_tables = budget_bytes // (self.length * REFERENCE_SIZE * 8)
        self.trajectories: list[Any] = [None] * num_envs
        self.slot = np.full(num_envs, -1, dtype=np.int64)  # each env's table, -1: per-env path
        self._rows = np.empty((0, self.length, REFERENCE_SIZE))
        self._filled = np.zeros(0, dtype=np.int64)  # valid rows of each table
        self._users = np.zeros(0, dtype=np.int64)  # envs reading each table
        self._keys: list[Hashable] = []  # each table's key
        self._table_of: dict[Hashable, int] = {}
        self._groups: list[tuple[Any, np.ndarray]] | None = None  # the per-env path's envs
        self._known: dict[int, tuple[Any, Hashable | None]] = {}  # id → (object, its key)

    @property
    def tables(self) -> int:
        """Tables held (in use or kept for a trajectory that may come back)."""
        return len(self._table_of)

    def set(self, index: int, trajectory: Any) -> None:
        """Env ``index`` now reads ``trajectory`` (every change of an env's trajectory comes
        through here)."""
        if trajectory is self.trajectories[index]:
            return  # the same (pure) object: the same table
        old = int(self.slot[index])
        was_per_env = old < 0 and self.trajectories[index] is not None
        if old >= 0:
            self._users[old] -= 1
        self.trajectories[index] = trajectory
        self.slot[index] = self._acquire(self._key(trajectory))
        if was_per_env or self.slot[index] < 0:
            self._groups = None  # the per-env path's groups change

    def rows(self, active: np.ndarray, steps: np.ndarray, failed: np.ndarray) -> np.ndarray:
        """The rows of :func:`~residual_quad.envs.trajectories.reference_fields` of the envs
        ``active`` at their ``steps``, shape ``(len(active), 11)``: the single env's bits.

        A reference that cannot be read (a user trajectory returning something else than a
        :class:`~residual_quad.envs.trajectories.Reference`) marks its envs in ``failed``
        (``num_envs`` booleans) and raises the clear error of
        :func:`~residual_quad.envs.trajectories.check_reference`, naming the env."""
        slots = self.slot[active]
        tabulated = slots >= 0
        taken = None
        if tabulated.any():
            short = tabulated & (steps >= self._filled[np.maximum(slots, 0)])
            if short.any():
                for s in np.unique(slots[short]).tolist():
                    self._fill(s, int(steps[slots == s].max()) + 1)
            # a step a table could not reach (its trajectory raised there) takes the other path
            tabulated &= steps < self._filled[np.maximum(slots, 0)]
            # whole rows gathered from the tables seen as one (tables × steps, 11) array: a
            # flat index takes a quarter of the time of a two-array index
            flat = self._rows.reshape(-1, REFERENCE_SIZE)
            index = slots * self.length + steps
            if tabulated.all():
                return np.take(flat, index, axis=0)
            taken = np.take(flat, index[tabulated], axis=0)
        block = np.empty((len(active), REFERENCE_SIZE))
        if taken is not None:
            block[tabulated] = taken
        self._per_env(active, steps, ~tabulated, block, failed)
        return block

    # ------------------------------------------------------------------ tables
    def _key(self, trajectory: Any) -> Hashable | None:
        """:func:`table_key`, remembered per object (the object is kept, so its id is not
        reused): an autoreset swaps among a few shared trajectory objects."""
        known = self._known.get(id(trajectory))
        if known is None:
            if len(self._known) >= 4 * len(self.slot) + 64:
                self._known.clear()
            known = self._known[id(trajectory)] = (trajectory, table_key(trajectory))
        return known[1]

    def _acquire(self, key: Hashable | None) -> int:
        """The table of ``key`` with one more user: its own, a free one reused, a new one, or
        -1 (not tabulated, or no room)."""
        if key is None:
            return -1
        slot = self._table_of.get(key)
        if slot is None:
            slot = self._new_table(key)
            if slot < 0:
                return -1
        self._users[slot] += 1
        return slot

    def _new_table(self, key: Hashable) -> int:
        """A table for ``key``, empty: a new one within the budget, else one no env reads (its
        old trajectory forgotten), else -1."""
        n = len(self._keys)
        if n < self.max_tables:
            if n == len(self._rows):  # grow the capacity, copying only the filled rows
                capacity = min(self.max_tables, max(4, 2 * n))  # never past the budget
                rows = np.empty((capacity, self.length, REFERENCE_SIZE))
                for s in range(n):
                    rows[s, : self._filled[s]] = self._rows[s, : self._filled[s]]
                self._rows = rows
                grow = len(rows) - n
                self._filled = np.concatenate([self._filled, np.zeros(grow, dtype=np.int64)])
                self._users = np.concatenate([self._users, np.zeros(grow, dtype=np.int64)])
            self._keys.append(key)
            slot = n
        else:
            unused = np.flatnonzero(self._users[:n] == 0)
            if len(unused) == 0:
                return -1
            slot = int(unused[0])
            del self._table_of[self._keys[slot]]
            self._keys[slot] = key
            self._filled[slot] = 0
        self._table_of[key] = slot
        return slot

    def _fill(self, slot: int, need: int) -> None:
        """Tabulate table ``slot`` up to at least ``need`` steps (doubling, at most the episode
        length); a step whose reference raises ends the table there."""
        start = int(self._filled[slot])
        stop = min(self.length, max(need, 2 * start, _FIRST_FILL))
        trajectory = self._trajectory_of(slot)
        rows = self._rows[slot]
        dt = self.control_dt
        block = fields_at(trajectory, np.arange(start, stop) * dt)
        finite = np.isfinite(block).all(axis=1)
        exact = stop if finite.all() else start + int(np.argmin(finite))
        rows[start:exact] = block[: exact - start]
        # from the first non-finite row on, the float path decides where the table ends (it
        # may raise there, or carry an overflow to inf as the single env does)
        for k in range(exact, stop):
            try:
                rows[k] = reference_fields(trajectory, k * dt)
            except (ArithmeticError, TypeError, ValueError):
                stop = k
                break
        self._filled[slot] = stop

    def _trajectory_of(self, slot: int) -> Any:
        return self.trajectories[int(np.flatnonzero(self.slot == slot)[0])]

    # ------------------------------------------------------------------ per env
    def _per_env(
        self,
        active: np.ndarray,
        steps: np.ndarray,
        todo: np.ndarray,
        block: np.ndarray,
        failed: np.ndarray,
    ) -> None:
        """Fill the rows ``todo`` of ``block`` with one trajectory call per distinct
        (trajectory object, step); the envs in lockstep share one."""
        if self._groups is None:
            by_object: dict[int, list[int]] = {}
            for i in np.flatnonzero(self.slot < 0).tolist():
                by_object.setdefault(id(self.trajectories[i]), []).append(i)
            self._groups = [(self.trajectories[g[0]], np.array(g)) for g in by_object.values()]
        position = np.full(len(self.slot), -1)
        position[active[todo]] = np.flatnonzero(todo)
        calls: list[tuple[Any, int, np.ndarray]] = []  # (trajectory, step, rows of active)
        for trajectory, members in self._groups:
            rows = position[members]
            rows = rows[rows >= 0]
            if len(rows) == 0:
                continue
            group_steps = steps[rows]
            first = int(group_steps[0])
            if (group_steps == first).all():  # the usual case: the group steps in lockstep
                calls.append((trajectory, first, rows))
            else:
                for step in np.unique(group_steps).tolist():
                    calls.append((trajectory, int(step), rows[group_steps == step]))
        # a table whose trajectory raised at a step: its envs there, each on its own
        for k in np.flatnonzero(todo & (self.slot[active] >= 0)).tolist():
            calls.append((self.trajectories[int(active[k])], int(steps[k]), np.array([k])))
        for trajectory, step, ks in calls:
            tk = step * self.control_dt
            try:
                block[ks if len(ks) > 1 else int(ks[0])] = reference_fields(trajectory, tk)
            except (AttributeError, TypeError, ValueError):
                failed[active[ks]] = True
                try:
                    check_reference(trajectory, trajectory(tk), tk)
                except (TypeError, ValueError) as err:
                    raise type(err)(f"env {int(active[ks[0]])}: {err}") from None
                raise
