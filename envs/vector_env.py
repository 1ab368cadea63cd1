"""``ResidualQuad-v0`` batched: N quadrotors stepped together on MuJoCo's ``rollout`` engine."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.error import ClosedEnvironmentError, ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from residual_quad.envs.actions import rotor_thrusts_batch
from residual_quad.envs.checks import batch_actions, integer
from residual_quad.envs.observation import OBS_DIM, true_observation
from residual_quad.envs.reference_table import TABLE_BUDGET_BYTES, BatchReferences
from residual_quad.envs.registration import time_limit_warning
from residual_quad.envs.resets import begin_resets, finish_resets
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.reward import REWARD_TERMS
from residual_quad.envs.scenarios import (
    SCENARIO_KEYS,
    Sampler,
    Scenario,
    check_scenario,
    env_seeds,
    scenario_list,
)
from residual_quad.envs.sensors import sense_batch
from residual_quad.envs.task import empty_batch_info, fill_batch_info, task_step
from residual_quad.envs.termination import TERMINATION_REASONS
from residual_quad.envs.trajectories import TRAJECTORIES, make_trajectory
from residual_quad.envs.vector_physics import FULL_PHYSICS, BatchPhysics, contiguous, take_rows

__all__ = ["MAX_NUM_ENVS", "SCENARIO_KEYS", "ResidualQuadVectorEnv", "Sampler", "Scenario"]

MAX_NUM_ENVS = 16_384
"""The largest ``num_envs``: each env holds a single env, its MuJoCo model and data (≈ 1.4 MB and
≈ 4 ms to build), so 16 384 envs are ≈ 23 GB and a minute of construction — more is a typo, and
is refused before anything is allocated."""

_REASONS = np.array([None, *TERMINATION_REASONS], dtype=object)  # by code + 1


class ResidualQuadVectorEnv(VectorEnv):
    r"""``ResidualQuad-v0`` for ``num_envs`` quadrotors at once, physics batched on
    ``mujoco.rollout``.

    ## What it is

    The same task as :class:`~residual_quad.envs.residual_quad_env.ResidualQuadEnv` (spaces,
    reward, termination and truncation, ``info`` keys, sensor noise), batched: ``step`` takes
    actions of shape ``(num_envs, 4)`` and returns observations ``(num_envs, 36)`` (``36 + 6K`` with
    ``preview=(K, dt)``), rewards,
    terminations and truncations ``(num_envs,)`` and an ``info`` dict of arrays, each key ``k``
    paired with a boolean mask ``_k`` (Gymnasium's vector convention; ``reward_terms`` is a nested
    dict of the same form, ``termination`` an object array of reasons or ``None``). It is the
    registered vector entry point of ``ResidualQuad-v0``:
    ``gym.make_vec("ResidualQuad-v0", num_envs=N, **kwargs)`` returns it (Gymnasium's default
    mode for this id; it passes the spec's ``max_episode_steps``, 2000, like ``gym.make``).

    ## Physics

    Each env keeps a single env (its scenario, seeded generator, wind process, sensors and
    plant). A step is the single env's in two parts: the physics, batched by
    :class:`~residual_quad.envs.vector_physics.BatchPhysics` (envs above the contact band on
    ``rollout``, ``nthread`` threads; an env in the band on its own plant), then the task:
    :func:`~residual_quad.envs.observation.true_observation` and
    :func:`~residual_quad.envs.task.task_step`, the functions the single env calls, on the whole
    batch. A batched env's accelerometer (last substep's ``Δv/Δt``) equals the single env's to
    ~1e-12.

    ## References

    The reference part of the observations comes from
    :class:`~residual_quad.envs.reference_table.BatchReferences`: each built-in trajectory is
    tabulated on the control-time grid with the single env's own code (its bits on any CPU), so
    envs whose episodes are out of step cost one array index, not a call each. A user
    :class:`~residual_quad.envs.trajectories.Trajectory` is called per distinct (object, step).

    A reference preview (``preview=(K, dt)``, off by default; :mod:`~residual_quad.envs.preview`)
    is ``K`` more lookups when ``dt`` is a whole number of control periods (the tables then run
    to the env's own ``episode_s``, where the preview is clamped), else one trajectory call per
    distinct (object, time); the same bits as the single env's preview.

    ## Scenarios

    ``scenarios``: ``None`` (every env from the keyword arguments), one scenario broadcast to
    every env, or a list of ``num_envs`` scenarios. A scenario is a dict with keys among
    :data:`SCENARIO_KEYS` — ``payload``, ``wind``, ``trajectory``, ``events`` (as the single env
    takes them), ``options`` (its reset options) — that overrides the keyword arguments.
    ``sampler``: a callable ``(rng) -> scenario`` drawn for an env at each of its autoresets
    (domain randomization), from a generator seeded by ``reset(seed=s)`` (``s + num_envs``).

    ## Seeding

    ``reset(seed=s)`` seeds env ``i`` with ``s + i`` — the single env reset with that seed and the
    same scenario gives the same observations (to ≤ 1e-9); a list of ``num_envs`` seeds (each an
    integer ``>= 0`` or ``None``) sets each. numpy integers count as integers; a float, a bool, a
    negative number, a string or a list of another length is a ``ValueError`` naming ``seed``.
    Later resets (and autoresets) continue each env's generator, as the single env's do.

    ## Autoreset

    ``metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP``: the ``step`` after an env's episode
    ended (terminated or truncated) resets that env (its action is ignored) and returns the reset
    observation with reward 0, ``terminated = truncated = False`` and the reset's info; the other
    envs step on untouched. A diverging env (``info["diverged"]``, reason in
    ``info["termination"]``) ends and autoresets like any other.

    Autoresets are all or nothing: the sampler draws the scenarios of every env due, then each is
    replaced and reset. An exception on the way (the sampler raising, a scenario the env refuses)
    propagates from ``step`` with the vector env exactly as before the call — every generator,
    env and scenario restored, no env stepped — so calling ``step`` again redoes the same
    autoresets with the same draws (as if the sampler had never failed).

    ## Subsets (for trainers)

    :meth:`step_subset` steps only some envs (an SB3 action repeat stops an env whose episode
    ended mid-repeat) and :meth:`reset_subset` autoresets given envs now (SB3 resets in the same
    step): the same per-env step and all-or-nothing autoreset :meth:`step` is made of, so every
    env evolves exactly as under :meth:`step`. :meth:`replace_env` is the hook an autoreset with
    a sampler calls to put an env of the drawn scenario in place (a subclass may reuse env
    objects; :meth:`make_env` builds one, :meth:`set_env` installs one).

    ## Bad input

    Actions of another shape than ``(num_envs, 4)``, not real, or with NaN or inf in any row are a
    ``ValueError`` naming the env index; a scenario list of the wrong length, an unknown scenario
    key or name is a ``ValueError`` naming the env index and listing the valid choices.

    After :meth:`close`, ``step``, ``reset`` and ``render`` raise Gymnasium's
    ``ClosedEnvironmentError`` ("the vector env is closed"); ``close`` again does nothing.

    ## Arguments

    | argument | default | meaning |
    |---|---|---|
    | ``num_envs`` | 1 | batch size, an integer in [1, :data:`MAX_NUM_ENVS`] (16 384) |
    | ``scenarios`` | ``None`` | see Scenarios |
    | ``sampler`` | ``None`` | see Scenarios |
    | ``nthread`` | cores | rollout threads (1: on the calling thread) |
    | ``render_env`` | 0 | index of the env ``render()`` draws |
    | ``max_episode_steps`` | ``None`` | Gymnasium's limit: episodes last ``min(episode_s ·
    control_hz, max_episode_steps)`` steps (``make_vec`` passes the spec's 2000) |
    | ``reference_table_bytes`` | 64 MiB | memory for the built-in trajectories' tabulated
    references (see References; 0: a trajectory call per env and step) |
    | ``**kwargs`` | | the single env's settings, the fields of :class:`~residual_quad.envs.config.
    EnvConfig` (``seed`` excepted), checked as there; a scenario overrides some per env |
    """

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": 100,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        scenarios: Scenario | Sequence[Scenario] | None = None,
        sampler: Sampler | None = None,
        nthread: int | None = None,
        render_env: int = 0,
        max_episode_steps: int | None = None,
        reference_table_bytes: int = TABLE_BUDGET_BYTES,  # bytes
        **env_kwargs: Any,
    ):
        if (
            isinstance(num_envs, bool)
            or not isinstance(num_envs, int | np.integer)
            or not 1 <= num_envs <= MAX_NUM_ENVS
        ):
            raise ValueError(
                f"num_envs must be an integer in [1, {MAX_NUM_ENVS}] (MAX_NUM_ENVS), "
                f"got {num_envs!r}"
            )
        num_envs = int(num_envs)
        if "seed" in env_kwargs:
            raise ValueError(
                "give the seed to reset(seed=s) (env i gets s + i), not as an argument"
            )
        if nthread is None:
            nthread = os.cpu_count() or 1
        if isinstance(nthread, bool) or not isinstance(nthread, int | np.integer) or nthread < 1:
            raise ValueError(f"nthread must be an integer >= 1, got {nthread!r}")
        budget = integer("reference_table_bytes", reference_table_bytes, low=0)
        if sampler is not None and not callable(sampler):
            raise ValueError(f"sampler must be a callable (rng) -> scenario, got {sampler!r}")
        scenarios = scenario_list(scenarios, num_envs)
        self.num_envs = num_envs
        self._env_kwargs = dict(env_kwargs)
        self._sampler = sampler
        self._sampler_rng = np.random.default_rng()
        self._trajectories: dict[str, Any] = {}  # one shared instance per built-in name
        # per-env facts derived from self.envs[i], kept by set_env
        self._noisy = np.zeros(num_envs, dtype=bool)  # its sensors add noise
        self._references: BatchReferences | None = None  # each env's reference rows
        self._physics: BatchPhysics | None = None
        self.envs: list[ResidualQuadEnv] = []
        self.scenarios: list[dict[str, Any]] = []
        for i, scenario in enumerate(scenarios):
            self.set_env(i, self.make_env(i, scenario))
            self.scenarios.append(check_scenario(i, scenario))
        first = self.envs[0]
        self.render_mode = first.render_mode
        if (
            isinstance(render_env, bool)
            or not isinstance(render_env, int | np.integer)
            or not 0 <= render_env < num_envs
        ):
            raise ValueError(
                f"render_env must be an env index in [0, {num_envs}), got {render_env!r}"
            )
        self.render_env = int(render_env)
        self.metadata = {**self.metadata, "render_fps": first.metadata["render_fps"]}
        self.max_steps = first.max_steps
        if max_episode_steps is not None:
            max_episode_steps = integer("max_episode_steps", max_episode_steps, low=1)
            message = time_limit_warning(
                self.max_steps, max_episode_steps, self.max_steps * first.control_dt
            )
            if message is not None:
                gym.logger.warn(message)
            self.max_steps = min(self.max_steps, max_episode_steps)
        self.task = dataclasses.replace(first.task, max_steps=self.max_steps)
        self._preview = first.preview  # shared by every env (not a scenario key), or None
        self.obs_dim = first.obs_dim  # OBS_DIM + 6K
        # a preview reads up to the env's own last step (episode_s), past a shorter limit
        table_steps = self.max_steps if self._preview is None else first.max_steps
        self._references = BatchReferences(num_envs, first.control_dt, table_steps, budget)
        for i, env in enumerate(self.envs):
            self._references.set(i, env.trajectory)
        self._latency = first.latency.batch(num_envs)  # command and sensor delay lines
        self.airframe = first.airframe
        self.control_dt = first.control_dt  # s
        self.nthread = int(nthread)
        self._physics = BatchPhysics(
            num_envs, first.plant, lambda i: self.envs[i].plant, self.nthread
        )
        self.substeps = self._physics.substeps
        self.physics_dt = self._physics.physics_dt  # s

        self.single_action_space = first.action_space
        self.single_observation_space = first.observation_space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

        nv = first.plant.model.nv
        self._state = np.zeros((num_envs, self._physics.nstate))  # MuJoCo full-physics states
        self._qacc = np.zeros((num_envs, nv))  # last substep's acceleration (warm start)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._prev_action = np.zeros((num_envs, 4))
        self._true_obs = np.zeros((num_envs, OBS_DIM))
        self._autoreset = np.zeros(num_envs, dtype=bool)
        self._started = False

    @property
    def physics(self) -> BatchPhysics:
        """The batched physics; its ``compiled`` switch selects the substep wrench (the benches
        fly the numpy reference beside the compiled default)."""
        return self._physics

    # ------------------------------------------------------------------ the envs
    def make_env(self, index: int, scenario: Scenario) -> ResidualQuadEnv:
        """A single env of ``scenario`` (over the keyword arguments) for index ``index``; a
        scenario it refuses is a ``ValueError`` naming the index. Envs given the same built-in
        trajectory share one (pure, frozen) instance."""
        scenario = check_scenario(index, scenario)
        kwargs = {**self._env_kwargs, **{k: v for k, v in scenario.items() if k != "options"}}
        name = kwargs.get("trajectory", "hover")
        if isinstance(name, str) and name in TRAJECTORIES:
            if name not in self._trajectories:
                self._trajectories[name] = make_trajectory(name)
            kwargs["trajectory"] = self._trajectories[name]
        try:
            return ResidualQuadEnv(**kwargs)
        except ValueError as err:
            raise ValueError(f"env {index}: {err}") from None

    def set_env(self, index: int, env: ResidualQuadEnv) -> None:
        """Make ``env`` the env at ``index`` and refresh what the batch keeps about it (every
        replacement of an env goes through here; the env is reset by the caller)."""
        if index == len(self.envs):
            self.envs.append(env)
        else:
            self.envs[index] = env
        self._noisy[index] = env.sensors.noisy
        if self._references is not None:
            self._references.set(index, env.trajectory)
        if self._physics is not None:
            self._physics.forget(index)

    def replace_env(self, index: int, scenario: dict[str, Any]) -> None:
        """Hook of the autoreset with a sampler: put an env of ``scenario`` at ``index``, the
        old env's generator continuing in it. This one builds a new env (:meth:`make_env`) and
        closes the old one after the reset; a subclass may reuse env objects instead (it must
        leave the old env usable: a failed autoreset puts it back)."""
        old = self.envs[index]
        new = self.make_env(index, scenario)
        new.np_random = old.np_random
        self.set_env(index, new)
        old.close()

    # ------------------------------------------------------------------ API
    def reset(
        self,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._check_open("reset")
        n = self.num_envs
        seeds = env_seeds(seed, n)
        if seed is not None and not isinstance(seed, Sequence | np.ndarray):
            self._sampler_rng = np.random.default_rng(int(seed) + n)
        obs, infos = self._reset_envs(list(range(n)), seeds, options)
        info = empty_batch_info(n)
        for i, env_info in enumerate(infos):
            fill_batch_info(info, i, env_info)
        self._autoreset[:] = False
        self._started = True
        return obs, info

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self._check_started("step")
        action = self.check_actions(actions)
        obs, reset_info = self._autoreset_envs(np.flatnonzero(self._autoreset).tolist())
        active = np.flatnonzero(~self._autoreset)
        obs, reward, terminated, truncated, info = self._step_envs(active, action[active], obs)
        for i in np.flatnonzero(self._autoreset).tolist():
            fill_batch_info(info, i, reset_info[i])
        self._autoreset = terminated | truncated
        return obs, reward, terminated, truncated, info

    def step_subset(
        self, ids: Sequence[int] | np.ndarray, actions: Any, preview: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step only the envs ``ids`` (distinct indices in increasing order, none pending
        autoreset) with ``actions`` (one row each, checked and clipped as :meth:`step`'s).

        Returns :meth:`step`'s five outputs full size (``num_envs`` rows), the rows of the
        other envs zero and their info masks ``False``; the other envs do not move. An env whose
        episode ends here is pending autoreset: the next :meth:`step` resets it, or
        :meth:`reset_subset` does now. Ids out of range, repeated or unsorted, or of an env
        pending autoreset, are a ``ValueError``. ``preview=False`` (a caller holding an action
        for several periods reads the preview at the last only): the preview's entries are NaN,
        not computed, where the episode goes on; the rest is the same bits."""
        self._check_started("step_subset")
        ids = self._check_ids(ids)
        pending = ids[self._autoreset[ids]]
        if len(pending):
            raise ValueError(
                f"envs {pending.tolist()} ended their episode: reset_subset them (or step all) "
                "before stepping them"
            )
        action = self.check_actions(actions, n=len(ids))
        obs = np.zeros((self.num_envs, self.obs_dim))
        obs, reward, terminated, truncated, info = self._step_envs(ids, action, obs, preview)
        self._autoreset[ids] = terminated[ids] | truncated[ids]
        return obs, reward, terminated, truncated, info

    def reset_subset(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Autoreset the envs ``ids`` now, as :meth:`step` would at its start: a new scenario
        from the sampler (drawn in the order of ``ids``), each env's generator continuing, all
        or nothing (see Autoreset). For a trainer that resets an ended env in the same step.

        Returns the first observations and the reset infos, full size (``num_envs`` rows, the
        rows of ``ids`` filled, info masks set there). The envs are no longer pending autoreset.
        Ids out of range, repeated or unsorted are a ``ValueError``."""
        self._check_started("reset_subset")
        ids = self._check_ids(ids)
        obs, infos = self._autoreset_envs(ids.tolist())
        info = empty_batch_info(self.num_envs)
        for i, env_info in infos.items():
            fill_batch_info(info, i, env_info)
        self._autoreset[ids] = False
        return obs, info

    def check_actions(self, actions: Any, dim: int = 4, n: int | None = None) -> np.ndarray:
        """``actions`` as an ``(n, dim)`` float64 array (``n``: ``num_envs`` by default)
        clipped to [-1, 1]; a ``ValueError`` naming the problem (shape, dtype, the first row
        with NaN/inf) otherwise."""
        return batch_actions(actions, self.num_envs if n is None else n, dim)

    # ------------------------------------------------------------------ checks
    def _check_open(self, method: str) -> None:
        """Gymnasium's ``ClosedEnvironmentError`` naming ``method`` once :meth:`close` ran (its
        thread pool and renderers are gone; ``close`` itself may be called again)."""
        if self.closed:
            raise ClosedEnvironmentError(
                f"the vector env is closed: {method}() after close(); build a new one"
            )

    def _check_started(self, method: str) -> None:
        self._check_open(method)
        if not self._started:
            raise ResetNeeded(f"call reset() before {method}()")

    def _check_ids(self, ids: Any) -> np.ndarray:
        """Env indices as an int array: distinct, increasing, in range; else a ``ValueError``."""
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(f"ids must be a 1-d sequence of env indices, got {ids!r}")
        arr = arr.astype(np.int64)
        if arr.size and (
            arr[0] < 0 or arr[-1] >= self.num_envs or (len(arr) > 1 and (np.diff(arr) <= 0).any())
        ):
            raise ValueError(
                f"ids must be distinct env indices in [0, {self.num_envs}) in increasing order, "
                f"got {arr.tolist()}"
            )
        return arr

    # ------------------------------------------------------------------ resets
    def _reset_envs(
        self,
        ids: list[int],
        seeds: Sequence[int | None],
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Reset the envs ``ids`` as one batch (bit for bit their single resets in turn): each
        env's checks and draws, then the rest as array computations
        (:func:`~residual_quad.envs.residual_quad_env.finish_resets`, one latency and preview
        write). ``options`` (``None``: each env's scenario options) are the reset options.
        Returns the observations ``(len(ids), obs_dim)`` and the infos."""
        envs = [self.envs[i] for i in ids]
        if options is None:
            per_env = [self.scenarios[i].get("options") for i in ids]
        else:
            per_env = [options] * len(ids)
        begin_resets(envs, seeds, per_env, where=[f"env {i}" for i in ids])
        sensed, infos = finish_resets(envs)
        rows = np.asarray(ids, dtype=np.intp)
        for i, env in zip(ids, envs, strict=True):
            plant = env.plant
            mujoco.mj_getState(plant.model, plant.data, self._state[i], FULL_PHYSICS)
            self._qacc[i] = plant.data.qacc
            self._physics.wind.mirror(i)
            self._physics.forget(i)  # a reset may change the model (payload events restore it)
        self._true_obs[rows] = [env._last_true_obs for env in envs]
        self._latency.reset(rows, sensed)
        self._steps[rows] = 0
        self._prev_action[rows] = 0.0
        if self._preview is None:
            return sensed, infos
        failed = np.zeros(self.num_envs, dtype=bool)
        ahead = self._preview.batch(self._references, rows, self._steps[rows], failed)
        return np.concatenate((sensed, ahead), axis=1), infos

    def _autoreset_envs(self, ids: list[int]) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
        """Autoreset the envs ``ids`` (in order), all or nothing: the observations (full size,
        their rows filled) and their infos by index.

        The sampler draws every scenario first, then each env is replaced and reset. If anything
        raises (the sampler, a scenario the env refuses, a reset), the exception propagates with
        the vector env as it was before the call: the sampler's generator, every env's generator,
        env object and scenario restored and the envs still pending autoreset, so a retry of
        ``step`` redoes the same autoresets with the same draws (no env is reset twice, no draw
        is lost)."""
        obs = np.zeros((self.num_envs, self.obs_dim))
        infos: dict[int, dict[str, Any]] = {}
        if not ids:
            return obs, infos
        rng_state = self._sampler_rng.bit_generator.state
        saved = [
            (i, self.envs[i], self.envs[i].np_random.bit_generator.state, self.scenarios[i])
            for i in ids
        ]
        try:
            if self._sampler is not None:
                drawn = [check_scenario(i, self._sampler(self._sampler_rng)) for i in ids]
                for i, scenario in zip(ids, drawn, strict=True):
                    self.replace_env(i, scenario)
                    self.scenarios[i] = scenario
            obs[ids], reset_infos = self._reset_envs(ids, [None] * len(ids))
            infos = dict(zip(ids, reset_infos, strict=True))
        except BaseException:
            self._sampler_rng.bit_generator.state = rng_state
            for i, env, state, scenario in saved:
                if self.envs[i] is not env:
                    self.set_env(i, env)
                env.np_random.bit_generator.state = state
                self.scenarios[i] = scenario
            raise
        return obs, infos

    # ------------------------------------------------------------------ the step
    def _step_envs(
        self, active: np.ndarray, action: np.ndarray, obs_out: np.ndarray, preview: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the envs ``active`` (clipped ``action`` rows): the batched physics, then the task
        functions the single env calls. Full-size outputs; ``obs_out`` filled at ``active``
        (``preview=False``: :meth:`step_subset`'s)."""
        n = self.num_envs
        reward_out = np.zeros(n)
        terminated_out = np.zeros(n, dtype=bool)
        truncated_out = np.zeros(n, dtype=bool)
        info = empty_batch_info(n)
        if len(active) == 0:
            return obs_out, reward_out, terminated_out, truncated_out, info
        physics = self._physics
        rows = contiguous(active)  # a slice at almost every step: block copies, no gathers
        f = np.minimum(
            np.maximum(
                rotor_thrusts_batch(
                    self.envs[0].action_mapping,
                    self._latency.action(active, action),  # the actions the plants fly now
                    self._state[rows, physics.qvel],
                ),
                0.0,
            ),
            self.airframe.max_rotor_thrust,
        )
        state, qacc = take_rows(self._state, rows), take_rows(self._qacc, rows)
        period = physics.step(active, f, state, qacc, self._steps[active])
        self._state[rows], self._qacc[rows] = state, qacc
        self._steps[active] += 1
        steps = self._steps[active]
        qpos, qvel = state[:, physics.qpos], state[:, physics.qvel]
        reference = self._references.rows(active, steps, self._autoreset)
        ahead = None
        if self._preview is not None and preview:  # an unreadable reference raises, as above
            ahead = self._preview.batch(self._references, active, steps, self._autoreset)
        obs = true_observation(qpos[:, 0:7], qvel[:, 0:6], reference, f, period.imu)
        out = task_step(
            self.task,
            take_rows(self._true_obs, rows),
            obs,
            action,
            take_rows(self._prev_action, rows),
            steps,
            period.sim_time,
            period.unstable,
            period.contact_speed,
        )
        self._true_obs[rows] = obs
        self._prev_action[rows] = action
        base = obs_out[:, :OBS_DIM]  # a view: the preview's entries follow
        sense_batch(base, info, obs, active, self._noisy[active], self.envs)
        base[rows] = self._latency.observation(active, take_rows(base, rows))
        if self._preview is not None:
            if ahead is None:  # only the envs whose episode ends here: their last observation
                ahead = np.full((len(active), self.obs_dim - OBS_DIM), np.nan)
                end = np.flatnonzero(out.terminated | out.truncated)
                if len(end):
                    ahead[end] = self._preview.batch(
                        self._references, active[end], steps[end], self._autoreset
                    )
            obs_out[rows, OBS_DIM:] = ahead
        reward_out[rows] = out.reward
        terminated_out[rows] = out.terminated
        truncated_out[rows] = out.truncated
        for key, value in (
            ("t", out.t),
            ("position_error", out.pos_error),
            ("residual_accel", out.residual.T),
            ("wind", period.wind),
            ("drag_force", period.drag),
            ("ground_gain", period.gain),
            ("rotor_thrusts", period.thrusts),
            *period.truth.items(),  # payload_kg, mean_wind, rotor_efficiency, events_fired
            ("true_mass", period.true_mass),
            ("diverged", out.terminated),
            ("termination", _REASONS[out.code + 1]),
        ):
            info[key][rows] = value
            info[f"_{key}"][rows] = True
        rt, rewarded = info["reward_terms"], out.rewarded
        for name in REWARD_TERMS:
            rt[name][rows] = np.where(rewarded, out.terms[name], 0.0)
            rt[f"_{name}"][rows] = rewarded
        info["_reward_terms"][rows] = rewarded
        return obs_out, reward_out, terminated_out, truncated_out, info

    # ------------------------------------------------------------------ render, close
    def render(self) -> np.ndarray | None:
        """The frame of env ``render_env`` (``render_mode="rgb_array"``), else ``None``."""
        self._check_open("render")
        if self.render_mode != "rgb_array":
            return None
        env = self.envs[self.render_env]
        env.set_state(self._state[self.render_env], int(self._steps[self.render_env]))
        return env.render()

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
        if self._physics is not None:
            self._physics.close()
