"""``ResidualQuad-v0`` batched: N quadrotors stepped together on MuJoCo's ``rollout`` engine."""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import mujoco
import mujoco.rollout
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from residual_quad.envs.actions import CtbrActions
from residual_quad.envs.checks import integer, seed_value
from residual_quad.envs.disturbances import drag_world_force
from residual_quad.envs.dynamics import period_residual
from residual_quad.envs.observation import OBS_DIM, ObsLayout
from residual_quad.envs.plant import DSBL_CONTACT, quat_to_rot, specific_force
from residual_quad.envs.registration import time_limit_warning
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.reward import REWARD_TERMS, position_error, reward_terms, total_reward
from residual_quad.envs.termination import NO_REWARD_REASONS, TERMINATION_REASONS
from residual_quad.envs.trajectories import TRAJECTORIES, make_trajectory

MAX_NUM_ENVS = 16_384
"""The largest ``num_envs``: each env holds a single env, its MuJoCo model and data (≈ 1.4 MB and
≈ 4 ms to build), so 16 384 envs are ≈ 23 GB and a minute of construction — more is a typo, and
is refused before anything is allocated."""

SCENARIO_KEYS: tuple[str, ...] = ("payload", "wind", "trajectory", "options")
"""The keys of a scenario: ``payload``, ``wind``, ``trajectory`` (as the single env takes them)
and ``options`` (its reset options)."""

Scenario = Mapping[str, Any]
Sampler = Callable[[np.random.Generator], Scenario]

_FULL = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)
_CONTROL_SPEC = int(mujoco.mjtState.mjSTATE_CTRL) | int(mujoco.mjtState.mjSTATE_XFRC_APPLIED)
_L = ObsLayout


def _check_scenario(index: int, scenario: Any) -> dict[str, Any]:
    """A scenario as a dict; anything but a mapping with keys among :data:`SCENARIO_KEYS` is a
    ``ValueError`` naming the env index and the valid keys."""
    if not isinstance(scenario, Mapping):
        raise ValueError(
            f"scenario of env {index} must be a dict with keys among {', '.join(SCENARIO_KEYS)}, "
            f"got {scenario!r}"
        )
    unknown = sorted(str(k) for k in scenario if k not in SCENARIO_KEYS)
    if unknown:
        raise ValueError(
            f"scenario of env {index}: unknown keys {unknown}; valid: {', '.join(SCENARIO_KEYS)}"
        )
    return dict(scenario)


class _Qvel:
    """The one attribute of ``MjData`` the ``ctbr`` rate loop reads (``qvel``)."""

    __slots__ = ("qvel",)

    def __init__(self, qvel: np.ndarray):
        self.qvel = qvel


class ResidualQuadVectorEnv(VectorEnv):
    r"""``ResidualQuad-v0`` for ``num_envs`` quadrotors at once, physics batched on
    ``mujoco.rollout``.

    ## What it is

    The same task as :class:`~residual_quad.envs.residual_quad_env.ResidualQuadEnv` (spaces,
    reward, termination and truncation, ``info`` keys, sensor noise), batched: ``step`` takes
    actions of shape ``(num_envs, 4)`` and returns observations ``(num_envs, 36)``, rewards,
    terminations and truncations ``(num_envs,)`` and an ``info`` dict of arrays, each key ``k``
    paired with a boolean mask ``_k`` (Gymnasium's vector convention; ``reward_terms`` is a nested
    dict of the same form, ``termination`` an object array of reasons or ``None``). It is the
    registered vector entry point of ``ResidualQuad-v0``:
    ``gym.make_vec("ResidualQuad-v0", num_envs=N, **kwargs)`` returns it (Gymnasium's default
    mode for this id; it passes the spec's ``max_episode_steps``, 2000, like ``gym.make``).

    ## Physics

    Each env keeps a single env (its scenario, seeded generator, wind process, sensors and
    plant). An env that flies above the contact band (the plant's exact rule: collision detection
    cannot matter this period) is stepped by one ``rollout`` call per physics substep
    (``nstep=1``), all such envs together, on a persistent thread pool of ``nthread`` threads
    (default: the cores): the drag on the air-relative velocity and the ground-effect gain are
    recomputed in numpy before every substep by the same functions the single env uses
    (:func:`~residual_quad.envs.disturbances.drag_world_force`,
    :meth:`~residual_quad.envs.disturbances.GroundEffect.gain`) and passed in the control vector
    (``mjSTATE_CTRL | mjSTATE_XFRC_APPLIED``: rotor forces ``gain·f``, on a copy of the model with
    unit actuator gain and no control clamp — the same product MuJoCo forms from the single env's
    actuator gain; the frame's drag wrench). One model per distinct payload; models with the same
    size signature go in one call. An env in the contact band is stepped by its own plant
    (``QuadrotorPlant.step``, contacts included). The accelerometer of a batched env uses the last
    substep's ``Δv/Δt`` (MuJoCo's Euler step) and pre-step attitude in
    :func:`~residual_quad.envs.plant.specific_force`: equal to the single env's to ~1e-12.

    ## Scenarios

    ``scenarios``: ``None`` (every env from the keyword arguments), one scenario broadcast to
    every env, or a list of ``num_envs`` scenarios. A scenario is a dict with keys among
    :data:`SCENARIO_KEYS` — ``payload``, ``wind``, ``trajectory`` (as the single env takes them)
    and ``options`` (its reset options) — that overrides the keyword arguments for that env.
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
    | ``**kwargs`` | | every argument of the single env (``seed`` excepted) |
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
        if sampler is not None and not callable(sampler):
            raise ValueError(f"sampler must be a callable (rng) -> scenario, got {sampler!r}")
        if scenarios is None:
            scenarios = [{}] * num_envs
        elif isinstance(scenarios, Mapping):
            scenarios = [scenarios] * num_envs
        elif not isinstance(scenarios, Sequence) or isinstance(scenarios, str):
            raise ValueError(
                f"scenarios must be None, one scenario dict or a list of {num_envs}, "
                f"got {scenarios!r}"
            )
        if len(scenarios) != num_envs:
            raise ValueError(
                f"scenarios has {len(scenarios)} entries; give one per env ({num_envs}) or a "
                f"single scenario dict to broadcast"
            )
        self.num_envs = num_envs
        self._env_kwargs = dict(env_kwargs)
        self._sampler = sampler
        self._sampler_rng = np.random.default_rng()
        self._models: dict[float, mujoco.MjModel] = {}  # rollout model per payload, kg
        self._trajectories: dict[str, Any] = {}  # one shared instance per built-in name
        # per-env facts derived from self.envs[i], kept by _set_env
        self._payload_kg = np.zeros(num_envs)  # kg (info)
        self._true_mass = np.zeros(num_envs)  # kg (info)
        self._noisy = np.zeros(num_envs, dtype=bool)  # its sensors add noise
        self._env_models: list[mujoco.MjModel | None] = [None] * num_envs  # rollout model
        self._trajectory_groups: list[tuple[Any, np.ndarray]] | None = None  # see _references
        # a mirror of every env's wind block (see _winds): samples, length, read position, and
        # which process and block array it copies
        self._wind_block = np.zeros((num_envs, 0, 3))  # m/s, world
        self._wind_len = np.zeros(num_envs, dtype=np.int64)
        self._wind_pos = np.zeros(num_envs, dtype=np.int64)
        self._wind_src: list[tuple[Any, Any]] = [(None, None)] * num_envs
        self.envs: list[ResidualQuadEnv] = []
        self.scenarios: list[dict[str, Any]] = []
        for i, scenario in enumerate(scenarios):
            self._set_env(i, self._make_env(i, scenario))
            self.scenarios.append(_check_scenario(i, scenario))
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
        self.airframe = first.airframe
        self.control_dt = first.control_dt  # s
        plant = first.plant
        self.substeps = plant.substeps
        self.physics_dt = plant.physics_dt  # s
        self.nthread = int(nthread)
        self._pool = mujoco.rollout.Rollout(nthread=0 if self.nthread == 1 else self.nthread)
        self._datas: dict[int, list[mujoco.MjData]] = {}  # per nbody: one MjData per thread
        self._fallen: dict[int, np.ndarray] = {}  # per rollout model: see _rollout_period

        self.single_action_space = first.action_space
        self.single_observation_space = first.observation_space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

        nq, nv = plant.model.nq, plant.model.nv
        self._nstate = mujoco.mj_stateSize(plant.model, _FULL)
        self._qpos = slice(1, 1 + nq)
        self._qvel = slice(1 + nq, 1 + nq + nv)
        self._state = np.zeros((num_envs, self._nstate))
        self._qacc = np.zeros((num_envs, nv))  # last substep's acceleration (warm start)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._prev_action = np.zeros((num_envs, 4))
        self._true_obs = np.zeros((num_envs, OBS_DIM))
        self._autoreset = np.zeros(num_envs, dtype=bool)
        self._started = False

    # ------------------------------------------------------------------ construction
    def _make_env(self, index: int, scenario: Any) -> ResidualQuadEnv:
        scenario = _check_scenario(index, scenario)
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

    def _set_env(self, index: int, env: ResidualQuadEnv) -> None:
        """Make ``env`` the env at ``index`` and refresh what the batch keeps about it (every
        replacement of an env goes through here)."""
        if index == len(self.envs):
            self.envs.append(env)
        else:
            self.envs[index] = env
        self._payload_kg[index] = env.payload_kg
        self._true_mass[index] = env.plant.true_mass
        self._noisy[index] = env.sensors.noisy
        self._env_models[index] = None
        self._trajectory_groups = None

    def _env_model(self, index: int) -> mujoco.MjModel:
        """The rollout model of env ``index`` (cached until the env is replaced)."""
        model = self._env_models[index]
        if model is None:
            model = self._env_models[index] = self._rollout_model(self.envs[index])
        return model

    def _rollout_model(self, env: ResidualQuadEnv) -> mujoco.MjModel:
        """The env's model for ``rollout``: unit actuator gain, no control clamp (the force
        ``gain·f`` arrives in the control), collision detection off (only envs above the contact
        band are batched). One per distinct payload."""
        key = env.payload_kg
        model = self._models.get(key)
        if model is None:
            model = copy.copy(env.plant.model)
            model.actuator_gainprm[:, 0] = 1.0
            model.actuator_ctrllimited[:] = 0
            model.opt.disableflags |= DSBL_CONTACT
            self._models[key] = model
            data = mujoco.MjData(model)
            mujoco.mj_step(model, data)  # what MuJoCo's reset on a warning leaves after a substep
            fallen = np.zeros(self._nstate)
            mujoco.mj_getState(model, data, fallen, _FULL)
            self._fallen[id(model)] = fallen
        return model

    # ------------------------------------------------------------------ API
    def reset(
        self,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._check_open("reset")
        n = self.num_envs
        seeds = self._seeds(seed)
        if seed is not None and not isinstance(seed, Sequence | np.ndarray):
            self._sampler_rng = np.random.default_rng(int(seed) + n)
        obs = np.zeros((n, OBS_DIM))
        infos = []
        for i in range(n):
            obs[i], info = self._reset_env(i, seeds[i], options)
            infos.append(info)
        self._autoreset[:] = False
        self._started = True
        return obs, self._batch_infos(infos)

    def _check_open(self, method: str) -> None:
        """Gymnasium's ``ClosedEnvironmentError`` naming ``method`` once :meth:`close` ran (its
        thread pool and renderers are gone; ``close`` itself may be called again)."""
        if self.closed:
            from gymnasium.error import ClosedEnvironmentError

            raise ClosedEnvironmentError(
                f"the vector env is closed: {method}() after close(); build a new one"
            )

    def _seeds(self, seed: Any) -> list[int | None]:
        """The seed of every env for ``reset(seed=...)``: ``None``, an integer ``s >= 0`` (env
        ``i`` gets ``s + i``) or a sequence of ``num_envs`` entries, each an integer ``>= 0`` or
        ``None``; numpy integers are accepted, anything else is a ``ValueError`` naming ``seed``
        and what it accepts."""
        n = self.num_envs
        if seed is None:
            return [None] * n
        if isinstance(seed, Sequence | np.ndarray) and not isinstance(seed, str | bytes):
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(
                    f"seed list has {len(seeds)} entries, num_envs is {n}: give one seed per env"
                )
            return [seed_value(s, f"seed[{i}]") for i, s in enumerate(seeds)]
        try:
            first = seed_value(seed)
        except ValueError:
            raise ValueError(
                f"seed must be an integer >= 0 (env i gets seed + i), a list of {n} integers "
                f">= 0 or None (one per env), or None; got {seed!r}"
            ) from None
        assert first is not None
        return [first + i for i in range(n)]

    def _reset_env(
        self, i: int, seed: int | None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        env = self.envs[i]
        if options is None:
            options = self.scenarios[i].get("options")
        try:
            obs, info = env.reset(seed=seed, options=options)
        except ValueError as err:
            raise ValueError(f"env {i}: {err}") from None
        mujoco.mj_getState(env.plant.model, env.plant.data, self._state[i], _FULL)
        self._qacc[i] = env.plant.data.qacc
        self._true_obs[i] = env._last_true_obs
        self._steps[i] = 0
        self._prev_action[i] = 0.0
        self._mirror_wind(i)
        return obs, info

    def _autoreset_envs(self, ids: list[int]) -> dict[int, tuple[np.ndarray, dict[str, Any]]]:
        """Autoreset the envs ``ids`` (in order), all or nothing; their reset observations and
        infos by index.

        The sampler draws every scenario first, then each env is replaced and reset. If anything
        raises (the sampler, a scenario the env refuses, a reset), the exception propagates with
        the vector env as it was before the call: the sampler's generator, every env's generator,
        env object and scenario restored and the envs still pending autoreset, so a retry of
        ``step`` redoes the same autoresets with the same draws (no env is reset twice, no draw
        is lost)."""
        rng_state = self._sampler_rng.bit_generator.state
        saved = [
            (i, self.envs[i], self.envs[i].np_random.bit_generator.state, self.scenarios[i])
            for i in ids
        ]
        out: dict[int, tuple[np.ndarray, dict[str, Any]]] = {}
        try:
            if self._sampler is not None:
                drawn = [_check_scenario(i, self._sampler(self._sampler_rng)) for i in ids]
                for i, scenario in zip(ids, drawn, strict=True):
                    self._replace_env(i, scenario)
                    self.scenarios[i] = scenario
            for i in ids:
                out[i] = self._reset_env(i, None)
        except BaseException:
            self._sampler_rng.bit_generator.state = rng_state
            for i, env, state, scenario in saved:
                if self.envs[i] is not env:
                    self._set_env(i, env)
                env.np_random.bit_generator.state = state
                self.scenarios[i] = scenario
            raise
        return out

    def _autoreset_env(self, i: int) -> tuple[np.ndarray, dict[str, Any]]:
        if self._sampler is not None:
            scenario = _check_scenario(i, self._sampler(self._sampler_rng))
            self._replace_env(i, scenario)
            self.scenarios[i] = scenario
        return self._reset_env(i, None)

    def _replace_env(self, i: int, scenario: dict[str, Any]) -> None:
        """Put an env of ``scenario`` at index ``i``, the old env's generator continuing in it
        (a subclass may reuse env objects instead of building one). The old env stays usable:
        a failed autoreset puts it back (:meth:`_autoreset_envs`)."""
        old = self.envs[i]
        new = self._make_env(i, scenario)
        new._np_random = old.np_random
        self._set_env(i, new)
        old.close()

    def _check_actions(self, actions: Any, dim: int = 4) -> np.ndarray:
        """``actions`` (num_envs, dim) as float64 clipped to [-1, 1]; a ``ValueError`` naming
        the problem (shape, dtype, the first env with NaN/inf) otherwise."""
        n = self.num_envs
        try:
            arr = np.asarray(actions)
        except Exception:
            arr = None
        if arr is None or arr.shape != (n, dim):
            raise ValueError(
                f"actions must have shape ({n}, {dim}) (num_envs, {dim}), got "
                f"{'no array' if arr is None else arr.shape}"
            )
        if arr.dtype.kind not in "fiu":
            raise ValueError(f"actions must hold real numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        bad = ~np.isfinite(arr).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"action of env {i} must be finite, got {arr[i].tolist()} "
                f"(envs with NaN/inf: {np.flatnonzero(bad).tolist()})"
            )
        return np.minimum(np.maximum(arr, -1.0), 1.0)

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self._check_open("step")
        if not self._started:
            from gymnasium.error import ResetNeeded

            raise ResetNeeded("call reset() before step()")
        action = self._check_actions(actions)
        n = self.num_envs
        obs = np.zeros((n, OBS_DIM))
        reward = np.zeros(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        reset_infos = {}
        for i, (reset_obs, reset_info) in self._autoreset_envs(
            np.flatnonzero(self._autoreset).tolist()
        ).items():
            obs[i], reset_infos[i] = reset_obs, reset_info
        active = np.flatnonzero(~self._autoreset)
        info = self._step_active(active, action[active], obs, reward, terminated, truncated)
        for i, env_info in reset_infos.items():
            self._fill_info(info, i, env_info)
        self._autoreset = terminated | truncated
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ the batched step
    def _rotor_thrusts(self, active: np.ndarray, action: np.ndarray) -> np.ndarray:
        mapping = self.envs[0].action_mapping
        if not isinstance(mapping, CtbrActions):
            return (action + 1.0) * mapping.half_max_rotor_thrust
        thrusts = np.empty((len(active), 4))
        qvel = self._state[:, self._qvel]
        for k, i in enumerate(active.tolist()):
            thrusts[k] = mapping.rotor_thrusts(action[k].tolist(), _Qvel(qvel[i]))
        return thrusts

    def _step_active(
        self,
        active: np.ndarray,
        action: np.ndarray,
        obs_out: np.ndarray,
        reward_out: np.ndarray,
        terminated_out: np.ndarray,
        truncated_out: np.ndarray,
    ) -> dict[str, Any]:
        m = len(active)
        frame = self.airframe
        info = self._empty_info()
        if m == 0:
            return info
        f = np.minimum(np.maximum(self._rotor_thrusts(active, action), 0.0), frame.max_rotor_thrust)
        state = self._state[active]
        qpos, qvel = state[:, self._qpos], state[:, self._qvel]
        plant0 = self.envs[0].plant
        reach = plant0.contact_height + 2.0 * np.abs(qvel[:, 2]) * self.control_dt
        batched = qpos[:, 2] > reach  # above the contact band: no collision check can matter
        imu = np.zeros((m, 3))
        wind = np.zeros((m, 3))
        drag = np.zeros((m, 3))
        gain = np.ones(m)
        unstable = np.zeros(m, dtype=bool)
        contact_speed = np.zeros(m)
        qacc = self._qacc[active]

        # envs in the contact band: their own plant, exactly the single env's step
        for k in np.flatnonzero(~batched).tolist():
            i = int(active[k])
            plant = self.envs[i].plant
            d = plant.data
            mujoco.mj_setState(plant.model, d, state[k], _FULL)
            d.qacc_warmstart[:] = qacc[k]
            plant._wind_proc.position = self._wind_pos[i]  # the mirror read ahead of it
            plant.step(f[k].tolist())
            self._mirror_wind(i)
            mujoco.mj_getState(plant.model, d, state[k], _FULL)
            qacc[k] = d.qacc
            imu[k] = plant.imu_specific_force()
            wind[k], drag[k], gain[k] = plant.wind, plant.drag_force, plant.ground_gain
            unstable[k] = plant.unstable()
            contact_speed[k] = plant.floor_contact_speed() if d.ncon else 0.0

        rows = np.flatnonzero(batched)
        if len(rows):
            unstable[rows] = self._rollout_period(
                active, rows, f, state, qacc, imu, wind, drag, gain
            )
        self._state[active] = state
        self._qacc[active] = qacc

        # observation, as the single env assembles it
        self._steps[active] += 1
        steps = self._steps[active]
        t = steps * self.control_dt
        qpos, qvel = state[:, self._qpos], state[:, self._qvel]
        obs = np.empty((m, OBS_DIM))
        obs[:, _L.pos] = qpos[:, 0:3]
        obs[:, _L.vel] = qvel[:, 0:3]
        obs[:, _L.rot] = np.array(quat_to_rot(*qpos[:, 3:7].T)).T
        obs[:, _L.omega_b] = qvel[:, 3:6]
        self._references(active, steps, obs)
        obs[:, _L.thrusts] = f
        obs[:, _L.imu] = imu

        prev = self._true_obs[active]
        residual = period_residual(
            prev.T, obs.T, self.control_dt, frame.mass, frame.gravity
        ).T  # m/s², world
        with np.errstate(over="ignore", invalid="ignore"):
            pos_error = position_error(obs.T, obs[:, _L.ref_pos].T, sqrt=np.sqrt)
        # the crash checks of termination.termination_reason, in its order, element by element
        conditions = self.envs[0].crash_conditions
        unstable |= np.abs(state[:, 0] - t) > 1e-6
        finite = np.isfinite(obs).all(axis=1)
        reason = np.full(m, -1)
        checks = (
            unstable,
            ~finite,
            obs[:, _L.R22] < conditions.cos_max_tilt,
            pos_error > conditions.max_position_error,
            contact_speed > conditions.crash_speed,
        )
        for code in range(len(checks) - 1, -1, -1):
            reason[checks[code]] = code
        no_reward_codes = [TERMINATION_REASONS.index(r) for r in NO_REWARD_REASONS]
        reason[(pos_error == math.inf) & ~np.isin(reason, no_reward_codes)] = 1  # non_finite
        rewarded = ~np.isin(reason, no_reward_codes)
        weights = self.envs[0].reward_weights
        with np.errstate(over="ignore", invalid="ignore"):
            terms = reward_terms(
                weights,
                obs.T,
                obs[:, _L.ref_vel].T,
                pos_error,
                action.T,
                self._prev_action[active].T,
                sqrt=np.sqrt,
            )
            rew = total_reward(terms)
        overflow = rewarded & ~np.isfinite(rew)
        reason[overflow] = 1
        rewarded &= ~overflow
        rew = np.where(rewarded, rew, 0.0)
        term = reason >= 0
        trunc = ~term & (steps >= self.max_steps)

        self._true_obs[active] = obs
        self._prev_action[active] = action
        obs_out[active] = obs
        for k in np.flatnonzero(self._noisy[active]).tolist():
            obs_out[active[k]] = self.envs[int(active[k])].sensors.sense(obs[k])
        reward_out[active] = rew
        terminated_out[active] = term
        truncated_out[active] = trunc

        payload, true_mass = self._payload_kg[active], self._true_mass[active]
        reasons = np.array([None, *TERMINATION_REASONS], dtype=object)[reason + 1]
        for key, value in (
            ("t", t),
            ("position_error", pos_error),
            ("residual_accel", residual),
            ("wind", wind),
            ("drag_force", drag),
            ("ground_gain", gain),
            ("payload_kg", payload),
            ("true_mass", true_mass),
            ("diverged", term),
            ("termination", reasons),
        ):
            info[key][active] = value
            info[f"_{key}"][active] = True
        rt = info["reward_terms"]
        for name in REWARD_TERMS:
            rt[name][active] = np.where(rewarded, terms[name], 0.0)
            rt[f"_{name}"][active] = rewarded
        info["_reward_terms"][active] = rewarded
        return info

    def _mirror_wind(self, i: int) -> None:
        """Copy env ``i``'s wind block and read position into the mirror (after its reset, a
        refill, or a period its own plant flew)."""
        proc = self.envs[i].plant._wind_proc
        buf = proc.block
        src_proc, src_buf = self._wind_src[i]
        if src_proc is not proc or src_buf is not buf:
            if len(buf) > self._wind_block.shape[1]:
                grown = np.zeros((self.num_envs, len(buf), 3))
                grown[:, : self._wind_block.shape[1]] = self._wind_block
                self._wind_block = grown
            self._wind_block[i, : len(buf)] = buf
            self._wind_len[i] = len(buf)
            self._wind_src[i] = (proc, buf)
        self._wind_pos[i] = proc.position

    def _winds(self, envs: np.ndarray) -> np.ndarray:
        """The next period's wind samples (len(envs), substeps, 3) of ``envs``, m/s, world: the
        samples each env's own :class:`~residual_quad.envs.disturbances.WindProcess` would hand
        out, gathered from the mirror in one indexing; an env whose block runs out takes them from
        its process (which refills exactly when the single env's would) and is mirrored anew."""
        n = self.substeps
        pos = self._wind_pos[envs]
        out = np.empty((len(envs), n, 3))
        fits = pos + n <= self._wind_len[envs]
        if fits.all():
            out[:] = self._wind_block[envs[:, None], pos[:, None] + np.arange(n)]
        else:
            j = np.flatnonzero(fits)
            out[j] = self._wind_block[envs[j, None], pos[j, None] + np.arange(n)]
            for k in np.flatnonzero(~fits).tolist():
                i = int(envs[k])
                proc = self.envs[i].plant._wind_proc
                proc.position = self._wind_pos[i]
                out[k] = proc.take(n)
                self._mirror_wind(i)
        self._wind_pos[envs[fits]] += n
        return out

    def _references(self, active: np.ndarray, steps: np.ndarray, obs: np.ndarray) -> None:
        """The reference part of the observations of the envs ``active`` at their ``steps``:
        one trajectory call per distinct (trajectory object, step) — envs given the same
        built-in trajectory share one (pure, frozen) instance."""
        if self._trajectory_groups is None:
            by_object: dict[int, list[int]] = {}
            for i, env in enumerate(self.envs):
                by_object.setdefault(id(env.trajectory), []).append(i)
            self._trajectory_groups = [
                (self.envs[g[0]].trajectory, np.array(g)) for g in by_object.values()
            ]
        position = np.full(self.num_envs, -1)
        position[active] = np.arange(len(active))
        calls: list[tuple[int, np.ndarray]] = []  # (step, rows of active) per trajectory call
        for _, members in self._trajectory_groups:
            rows = position[members]
            rows = rows[rows >= 0]
            if len(rows) == 0:
                continue
            group_steps = steps[rows]
            first = int(group_steps[0])
            if (group_steps == first).all():  # the usual case: the group steps in lockstep
                calls.append((first, rows))
            else:
                for step in np.unique(group_steps).tolist():
                    calls.append((int(step), rows[group_steps == step]))
        for step, ks in calls:
            i = int(active[ks[0]])
            trajectory = self.envs[i].trajectory
            tk = float(step) * self.control_dt
            ref = trajectory(tk)
            rows = ks if len(ks) > 1 else int(ks[0])
            try:
                obs[rows, _L.ref_pos] = ref.pos
                obs[rows, _L.ref_vel] = ref.vel
                obs[rows, _L.ref_acc] = ref.acc
                obs[rows, _L.ref_yaw] = math.remainder(ref.yaw, 2.0 * math.pi)
                obs[rows, _L.ref_yaw_rate] = ref.yaw_rate
            except (AttributeError, TypeError, ValueError):
                from residual_quad.envs.trajectories import check_reference

                self._autoreset[active[ks]] = True
                try:
                    check_reference(trajectory, ref, tk)
                except (TypeError, ValueError) as err:
                    raise type(err)(f"env {i}: {err}") from None
                raise

    def _rollout_period(
        self,
        active: np.ndarray,
        rows: np.ndarray,
        f: np.ndarray,
        state: np.ndarray,
        qacc: np.ndarray,
        imu_out: np.ndarray,
        wind_out: np.ndarray,
        drag_out: np.ndarray,
        gain_out: np.ndarray,
    ) -> np.ndarray:
        """One control period of the envs ``active[rows]`` on ``rollout``: one call per substep
        and model size signature, the drag and ground-effect wrench recomputed between calls.

        Returns which of them MuJoCo found unstable. ``rollout`` clears MuJoCo's warning counters,
        so the instability is read from what MuJoCo does on it: it puts the data back at the
        model's default pose at rest and finishes the substep from there without controls: a
        substep that lands exactly on that state, from anywhere but the default pose at rest, was
        unstable."""
        winds = self._winds(active[rows])
        models = [self._env_model(int(active[k])) for k in rows.tolist()]
        groups: dict[int, list[int]] = {}
        for j, model in enumerate(models):
            groups.setdefault(model.nbody, []).append(j)
        unstable = np.zeros(len(rows), dtype=bool)
        for js in groups.values():
            g = np.array(js)
            r = rows[g]
            unstable[g] = self._rollout_group(
                [models[j] for j in js],
                f[r],
                state,
                r,
                qacc,
                winds[g],
                imu_out,
                wind_out,
                drag_out,
                gain_out,
            )
        return unstable

    def _rollout_group(
        self,
        models: list[mujoco.MjModel],
        f: np.ndarray,
        state: np.ndarray,
        rows: np.ndarray,
        qacc: np.ndarray,
        winds: np.ndarray,
        imu_out: np.ndarray,
        wind_out: np.ndarray,
        drag_out: np.ndarray,
        gain_out: np.ndarray,
    ) -> np.ndarray:
        """:meth:`_rollout_period` for envs whose models share one size signature: the period's
        substeps, one ``rollout`` call each (checks skipped: every array is built here with the
        shapes ``rollout`` needs, contiguous float64)."""
        plant0 = self.envs[0].plant
        drag_model = plant0.drag
        k_h, k_v, c_lin = drag_model.k_h, drag_model.k_v, drag_model.c_lin
        ge = plant0.ground_effect
        n = len(rows)
        nb = models[0].nbody
        datas = self._datas.get(nb)
        if datas is None:
            datas = [mujoco.MjData(models[0]) for _ in range(max(1, self.nthread))]
            self._datas[nb] = datas
        nu = 4
        x0 = nu + 6 * plant0.body_id  # the body's force in the xfrc_applied block
        control = np.zeros((n, 1, nu + 6 * nb))
        s = np.ascontiguousarray(state[rows])
        out = np.empty((n, 1, self._nstate))
        no_sensors = np.empty((n, 1, 0))
        warm = np.ascontiguousarray(qacc[rows])
        qpos_sl, qvel_sl = self._qpos, self._qvel
        qpos0 = plant0.model.qpos0
        fallen = np.stack([self._fallen[id(model)] for model in models])
        unstable = np.zeros(n, dtype=bool)
        fk = f.copy()
        for sub in range(self.substeps):
            qpos, qvel = s[:, qpos_sl], s[:, qvel_sl]
            before = (qpos == qpos0).all(axis=1) & (qvel == 0.0).all(axis=1)  # default pose
            w = winds[:, sub]
            rot = quat_to_rot(*qpos[:, 3:7].T)
            fx, fy, fz = drag_world_force(
                rot,
                qvel[:, 0] - w[:, 0],
                qvel[:, 1] - w[:, 1],
                qvel[:, 2] - w[:, 2],
                k_h,
                k_v,
                c_lin,
                sqrt=np.sqrt,
            )
            gain = ge.gain(qpos[:, 2]) if ge is not None else np.ones(n)
            if sub == self.substeps - 1:
                v_before, rot_before = qvel[:, 0:3].copy(), rot
            control[:, 0, 0:nu] = gain[:, None] * fk
            control[:, 0, x0] = fx
            control[:, 0, x0 + 1] = fy
            control[:, 0, x0 + 2] = fz
            self._pool.rollout(
                models,
                datas,
                s,
                control,
                control_spec=_CONTROL_SPEC,
                nstep=1,
                initial_warmstart=warm,
                state=out,
                sensordata=no_sensors,
                skip_checks=True,
            )
            s = out[:, 0, :].copy()
            unstable |= (s == fallen).all(axis=1) & ~before
            fk[unstable] = 0.0  # MuJoCo's reset cleared the controls for the rest of the period
        v_after = s[:, qvel_sl][:, 0:3]
        acc = (v_after - v_before) / self.physics_dt  # m/s², world: Euler's qacc
        imu_out[rows] = np.array(specific_force(acc.T, list(rot_before), self.airframe.gravity)).T
        qacc[rows, 0:3] = acc
        state[rows] = s
        wind_out[rows] = winds[:, -1]
        drag_out[rows] = np.stack((fx, fy, fz), axis=1)
        gain_out[rows] = gain
        return unstable

    # ------------------------------------------------------------------ info
    def _empty_info(self) -> dict[str, Any]:
        n = self.num_envs
        info: dict[str, Any] = {
            "t": np.zeros(n),
            "position_error": np.zeros(n),
            "residual_accel": np.zeros((n, 3)),
            "wind": np.zeros((n, 3)),
            "drag_force": np.zeros((n, 3)),
            "ground_gain": np.zeros(n),
            "payload_kg": np.zeros(n),
            "true_mass": np.zeros(n),
            "diverged": np.zeros(n, dtype=bool),
            "termination": np.full(n, None, dtype=object),
        }
        for key in list(info):
            info[f"_{key}"] = np.zeros(n, dtype=bool)
        terms: dict[str, Any] = {}
        for name in REWARD_TERMS:
            terms[name] = np.zeros(n)
            terms[f"_{name}"] = np.zeros(n, dtype=bool)
        info["reward_terms"] = terms
        info["_reward_terms"] = np.zeros(n, dtype=bool)
        return info

    def _fill_info(self, info: dict[str, Any], i: int, env_info: dict[str, Any]) -> None:
        """Put one env's (single-env) info dict into the batched ``info`` at index ``i``."""
        for key, value in env_info.items():
            if key == "reward_terms":
                for name, term in value.items():
                    info[key][name][i] = term
                    info[key][f"_{name}"][i] = True
                info[f"_{key}"][i] = bool(value)
                continue
            info[key][i] = value
            info[f"_{key}"][i] = True

    def _batch_infos(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        info = self._empty_info()
        for i, env_info in enumerate(infos):
            self._fill_info(info, i, env_info)
        return info

    # ------------------------------------------------------------------ render, close
    def render(self) -> np.ndarray | None:
        """The frame of env ``render_env`` (``render_mode="rgb_array"``), else ``None``."""
        self._check_open("render")
        if self.render_mode != "rgb_array":
            return None
        i = self.render_env
        env = self.envs[i]
        plant = env.plant
        mujoco.mj_setState(plant.model, plant.data, self._state[i], _FULL)
        mujoco.mj_forward(plant.model, plant.data)
        env._steps = int(self._steps[i])
        return env.render()

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
        self._pool.close()
