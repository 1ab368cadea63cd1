"""The one driver of every :class:`~residual_quad.controllers.law.Law`: one vehicle or N envs.

:class:`LawController` flies one vehicle behind ``policy(obs)`` (a
:class:`~residual_quad.controllers.base.Controller`), :class:`LawBatch` flies N envs behind
``policy_batch(obs)`` (a :class:`~residual_quad.controllers.batch.BatchedController`). What no
law writes itself lives here, once:

* **resets**: ``reset`` (one vehicle), ``reset_batch`` and ``reset_env(i)`` (a vector env's
  autoreset) write the law's initial state — all rows, or row ``i`` of every field;
* **bad samples**: an observation (row) with a NaN or ±inf entry is answered with the held
  action (hover before the first action) and leaves the state exactly as it was — one vehicle:
  the law is not called; a batch: the law runs on a finite stand-in row, then that row of every
  field of the state tree is restored; either way the law's :meth:`~residual_quad.controllers.
  law.Law.forget` is told that the next observation does not follow the previous one;
* **numerical failures**: a non-finite action from a finite observation is replaced by the held
  action (:class:`~residual_quad.controllers.base.ObservationGuard`'s rule, row by row).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from residual_quad.controllers.base import ObservationGuard
from residual_quad.controllers.law import Law, put_rows, take_rows, tree_map
from residual_quad.envs.observation import OBS_DIM, is_observation_width
from residual_quad.envs.observation import ObsLayout as L

Seeds = Sequence[int | None] | None


# ----------------------------------------------------------------------------- input checks
def neutral_obs(width: int) -> np.ndarray:
    """A finite stand-in for a bad row while a batch is computed (its result is discarded and
    the row's state restored): at rest at the origin, level, reference (and preview) at the
    origin; ``width`` columns."""
    obs = np.zeros(width)
    obs[L.rot] = np.eye(3).ravel()
    return obs


NEUTRAL_OBS = neutral_obs(OBS_DIM)


def check_n_envs(n_envs: Any) -> int:
    """``n_envs`` as an int ≥ 1, or a ``ValueError`` naming it."""
    if isinstance(n_envs, bool) or not isinstance(n_envs, numbers.Integral) or n_envs < 1:
        raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
    return int(n_envs)


def check_obs_batch(obs: Any, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """``obs`` as a float64 array (n_envs, 36 + 6K) — the base fields, then a reference preview
    of K points when the env has one — and the (n_envs,) mask of its rows with a NaN or ±inf
    entry; a ``ValueError`` for another shape."""
    arr = np.asarray(obs, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != n_envs or not is_observation_width(arr.shape[1]):
        raise ValueError(
            f"observation batch must have shape ({n_envs}, {OBS_DIM} + 6K) (n_envs, obs; K "
            f"preview points, 0 without a preview), got {arr.shape}"
        )
    return arr, ~np.isfinite(arr).all(axis=1)


class RowGuard:
    """Held actions of a batch, one row per env: :class:`~residual_quad.controllers.base.
    ObservationGuard`'s rule row by row.

    Args:
        n_envs: number of envs.
        hover: the action held by an env that has not acted since its reset (4,).
    """

    def __init__(self, n_envs: int, hover: np.ndarray):
        self.hover = np.asarray(hover, dtype=float)
        self.held = np.tile(self.hover, (n_envs, 1))
        #: (N,) bad samples (and numerical failures) answered with the held action since reset
        self.nonfinite_observations = np.zeros(n_envs, dtype=np.int64)

    def reset(self, index: int | slice = slice(None)) -> None:
        """No held action (hover) and no count for the envs ``index``."""
        self.held[index] = self.hover
        self.nonfinite_observations[index] = 0

    def finish(self, action: np.ndarray, bad: np.ndarray) -> np.ndarray:
        """``action`` (N, 4) with the rows ``bad`` (and rows that came out non-finite) replaced
        by their held action; every other row becomes its env's held action."""
        bad = bad | ~np.isfinite(action).all(axis=1)
        if bad.any():
            action = np.where(bad[:, None], self.held, action)
            self.nonfinite_observations += bad
        self.held[...] = action
        return action


def check_seeds(seeds: Seeds, n_envs: int) -> list[int | None]:
    """``seeds`` as a list of n_envs seeds (``None`` → all ``None``); ``ValueError`` otherwise."""
    if seeds is None:
        return [None] * n_envs
    seeds = list(seeds)
    if len(seeds) != n_envs:
        raise ValueError(f"reset_batch needs {n_envs} seeds (one per env), got {len(seeds)}")
    for i, s in enumerate(seeds):
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Integral)):
            raise ValueError(f"seed of env index {i} must be an integer or None, got {s!r}")
    return seeds


def check_index(index: Any, n_envs: int) -> int:
    """``index`` as an env index in ``[0, n_envs)``, or a ``ValueError`` naming it."""
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise ValueError(f"env index must be an integer in [0, {n_envs}), got {index!r}")
    if not 0 <= index < n_envs:
        raise ValueError(f"env index {index} is out of range [0, {n_envs})")
    return int(index)


# ----------------------------------------------------------------------------- the driver
class LawController(ObservationGuard):
    """A law flying one vehicle: ``reset(seed)`` and ``policy(obs)``.

    The law's parameters read through (``controller.kp`` is ``controller.law.kp``); its state
    is :attr:`state` (the law's one-vehicle state, replaced at every step).
    """

    def __init__(self, law: Law):
        self.law = law
        self.context = law.context
        self.action_mode = law.action_mode
        self.name = law.name
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """The law's initial state, no held action (the law is deterministic: ``seed`` unused)."""
        self.reset_guard()
        self.state = self.law.init_one()

    def act(self, obs: np.ndarray) -> np.ndarray:
        self.state, action = self.law.act_one(self.state, obs)
        return action

    def forget_previous_sample(self) -> None:
        self.state = self.law.forget_one(self.state)

    @property
    def last_residual(self) -> np.ndarray:
        """m/s², world: the Δâ the law applied at its last step, read by the sweeps'
        residual-bias columns (an ``AttributeError`` for a law without one)."""
        value = getattr(self.state, "last_residual", None)
        if value is None:
            raise AttributeError(f"{self.law.name} applies no residual estimate")
        return value

    def __getattr__(self, name: str) -> Any:
        # only reached for names the driver does not have: the law's parameters
        if name.startswith("__") or name == "law":
            raise AttributeError(name)
        return getattr(self.law, name)

    def __repr__(self) -> str:
        return f"LawController({self.law!r})"


class LawBatch:
    """A law flying ``n_envs`` envs: ``reset_batch``, ``reset_env(i)``, ``policy_batch(obs)``.

    Args:
        law: the law (shared parameters).
        n_envs: number of envs; the state has one row per env (:attr:`state`).
    """

    def __init__(self, law: Law, n_envs: int):
        self.law = law
        self.n_envs = check_n_envs(n_envs)
        self.action_mode = law.action_mode
        self.name = law.name
        self.context = law.context
        self.guard = RowGuard(self.n_envs, law.hover)
        self.reset_batch()

    def reset_batch(self, seeds: Seeds = None) -> None:
        """Initial state of every env (seeds are checked only: the laws are deterministic)."""
        check_seeds(seeds, self.n_envs)
        self.state = self.law.init_state(self.n_envs)
        self.guard.reset()

    def reset_env(self, index: int, seed: int | None = None) -> None:
        """Initial state of env ``index`` only (autoreset), the others untouched."""
        check_seeds([seed], 1)
        index = check_index(index, self.n_envs)
        put_rows(self.state, index, tree_map(lambda x: x[0], self.law.init_state(1)))
        self.guard.reset(index)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions (N, 4) for observations (N, 36 + 6K); a row with a non-finite entry gets its
        env's last action and leaves its state as it was."""
        obs, bad = check_obs_batch(obs, self.n_envs)
        if not bad.any():
            self.state, action = self.law.act(self.state, obs)
            return self.guard.finish(action, bad)
        saved = take_rows(self.state, bad)
        clean = np.where(bad[:, None], neutral_obs(obs.shape[1]), obs)
        state, action = self.law.act(self.state, clean)
        put_rows(state, bad, saved)
        self.state = self.law.forget(state, bad)
        return self.guard.finish(action, bad)

    @property
    def nonfinite_observations(self) -> np.ndarray:
        """(N,) bad samples answered with the held action since each env's reset."""
        return self.guard.nonfinite_observations

    @property
    def last_residual(self) -> np.ndarray | None:
        """(N, 3) m/s², world: the Δâ each env applied at its last step (``None`` for a law
        without one)."""
        return getattr(self.state, "last_residual", None)

    def __getattr__(self, name: str) -> Any:
        # only reached for names the driver does not have: the law's parameters
        if name.startswith("__") or name == "law":
            raise AttributeError(name)
        return getattr(self.law, name)
