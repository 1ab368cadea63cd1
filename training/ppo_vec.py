"""PPO on the vector env: an SB3 ``VecEnv`` over :class:`ResidualQuadVectorEnv`.

:class:`QuadVecEnv` is what ``rquad train ppo`` trains on (``backend: vector``): all training envs
live in one :class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv` (physics batched on
``mujoco.rollout``), so SB3's side of the hot path holds no per-env Python env objects. It emits
:func:`~residual_quad.controllers.features.ppo_features` of the observations (batched:
:func:`~residual_quad.controllers.features.ppo_features_batch`), so policies trained on it have the
same input and the same file format as before; with a feature spec, the
:class:`~residual_quad.controllers.policy_inputs.PolicyInputs` the deployed controllers use too
(``ppo_adapt``: its estimator run every control period).

Conventions translated from the vector env's to SB3's:

- **Autoreset.** The vector env autoresets ``NEXT_STEP`` (the step after an episode ended resets
  that env). SB3 wants the reset *in the same step*: the returned observation of an env whose
  episode ended is the first observation of its next episode, the last one goes in
  ``infos[i]["terminal_observation"]`` and ``infos[i]["TimeLimit.truncated"]`` is ``True`` when
  the episode was cut by the time limit rather than terminated. The adapter resets ended envs
  right after the step (the vector env's own autoreset, scenario draw included), so the other
  envs never step an extra time.
- **Action repeat.** Each action is held for ``action_repeat`` control periods (rewards summed),
  an env stopping at the end of its episode, as the deployed
  :class:`~residual_quad.controllers.ppo.PPOController` does.
- **Reward.** By default the env's reward summed over the held periods, with the optional
  shaping (``position_log`` per period, ``action_cost`` per decision). With ``precision`` (a
  :class:`~residual_quad.training.precision.PrecisionReward`) each control period ``k`` of
  decision ``t`` pays ``P(‖e_p,k‖, ‖u_t − u_{t−1}‖², progress)`` ∈ (0, 1] instead, and the
  decision pays their mean over the ``action_repeat`` periods it holds (a period after its
  episode ended pays 0), at least :data:`PRECISION_FLOOR`: every decision in (0, 1]
  (docs/rl_reward.md). ``progress`` (:meth:`QuadVecEnv.set_progress`) anneals the finest
  tolerance; the training sets it from the model's step count.
- **Domain randomization.** Every episode of every env draws its scenario with
  :class:`ScenarioSampler` (uniform over the config's payloads × winds × trajectories; the
  ``extra`` payload is refused by the config) or, with ``trajectory_draw: randomized``,
  :class:`~residual_quad.training.scenarios.OffMatrixSampler` (a trajectory object with random
  parameters per episode): the first ones at construction (generator seeded
  ``scenario_seed``), each later one at its autoreset from the vector env's sampler generator;
  each env's own generator continues across episodes.
- **Seeding.** ``seed(s)`` then ``reset()`` (what SB3 does): env ``i`` gets seed
  ``s + seed_offset + i``, the sampler ``s + seed_offset + num_envs`` (the vector env's rule;
  ``seed_offset`` 0 by default, :data:`~residual_quad.training.scenarios.
  FIRST_OFF_MATRIX_SEED` off the matrix). Same seed → same episodes.

``infos[i]`` carries ``position_error`` (m), ``diverged``, ``control_steps`` (periods simulated
this step) and ``scenario`` (payload, wind, trajectory) — the keys the training callbacks read.

This module needs the ``rl`` extra (stable-baselines3); :mod:`residual_quad.training.ppo` imports
it only when training runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from residual_quad.controllers.features import FEATURE_DIM
from residual_quad.controllers.policy_inputs import FeatureSpec, PolicyInputs
from residual_quad.envs.checks import integer
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.vector_env import ResidualQuadVectorEnv
from residual_quad.training.ppo_config import MAX_VECTOR_ENVS
from residual_quad.training.precision import PrecisionReward
from residual_quad.training.privileged import PRIVILEGED_DIM, privileged_columns

#: the least a decision pays with a precision reward: float32's smallest normal number, so the
#: reward SB3 stores stays > 0 where every kernel underflows (an error many tolerances wide)
PRECISION_FLOOR = float(np.finfo(np.float32).tiny)


class ScenarioSampler:
    """Domain randomization for the vector env: ``sampler(rng) -> scenario`` (picklable).

    Draws payload, wind and trajectory uniformly and independently from the lists (the scenario
    grid of ``PPOTrainConfig``; an entry listed k times is drawn k times as often), and, when
    ``start_pos_noise > 0``,
    a uniform start offset per axis (m; the vertical one not below ``-start_pos_noise / 2``).
    """

    def __init__(
        self,
        payloads: Sequence[str],
        winds: Sequence[str],
        trajectories: Sequence[str],
        start_pos_noise: float = 0.0,
    ):
        self.scenarios = [(p, w, t) for p in payloads for w in winds for t in trajectories]
        self.start_pos_noise = float(start_pos_noise)

    def __call__(self, rng: np.random.Generator) -> dict[str, Any]:
        payload, wind, trajectory = self.scenarios[int(rng.integers(len(self.scenarios)))]
        scenario: dict[str, Any] = {"payload": payload, "wind": wind, "trajectory": trajectory}
        if self.start_pos_noise > 0:
            n = self.start_pos_noise
            offset = rng.uniform(-n, n, 3)
            offset[2] = max(offset[2], -0.5 * n)  # not into the floor
            scenario["options"] = {"position_offset": offset}
        return scenario


class _MaskedVectorEnv(ResidualQuadVectorEnv):
    """The vector env for SB3's convention: its public :meth:`~ResidualQuadVectorEnv.
    step_subset` (action repeat: an env whose episode ended mid-repeat must not step on) and
    :meth:`~ResidualQuadVectorEnv.reset_subset` (SB3 resets in the same step), both made of the
    vector env's own per-env step and autoreset, so every env evolves exactly as under ``step``.

    One change of cost, not of result: its :meth:`replace_env` hook reuses the env object
    another env left for a drawn scenario (its plant compiled for the payload) instead of
    building one (≈3 ms, more than a hundred policy steps of an env): a reset restores an env
    completely (same generator state → the same episode; the equivalence tests compare with the
    vector env's own autoreset, which builds).

    A scenario whose ``trajectory`` is a trajectory object (a random one per episode: the
    off-matrix draw) is pooled by the rest of the scenario: a spare env of the same payload,
    wind and events takes the new trajectory (the single env reads ``trajectory`` only at
    reset and step, so that is the env a build would give), so the pool holds at most
    ``num_envs`` envs per (payload, wind, events), however many trajectories are drawn. The env
    in place is never changed: a failed autoreset puts it back as it was."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._spare: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        self._keys = [_build_key(sc) for sc in self.scenarios]

    def replace_env(self, index: int, scenario: dict[str, Any]) -> None:
        key = _build_key(scenario)
        trajectory = scenario.get("trajectory")
        drawn = trajectory is not None and not isinstance(trajectory, str)  # an object
        if key == self._keys[index] and not drawn:
            return  # the same scenario: the env itself serves again
        old = self.envs[index]
        spare = self._spare.get(key)
        if spare:  # taken before the old env joins the pool: never the env in place
            new = spare.pop()
            if drawn:
                new.trajectory = trajectory
        else:
            new = self.make_env(index, scenario)
        self._spare.setdefault(self._keys[index], []).append(old)
        new.np_random = old.np_random  # the env's generator continues
        self.set_env(index, new)
        self._keys[index] = key

    def close_extras(self, **kwargs: Any) -> None:
        super().close_extras(**kwargs)
        for spare in self._spare.values():
            for env in spare:
                env.close()
        self._spare.clear()


def _scenario_info(scenario: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """``infos[i]["scenario"]``: the episode's (payload, wind, trajectory), a trajectory object
    by its name."""
    trajectory = scenario.get("trajectory")
    if trajectory is not None and not isinstance(trajectory, str):
        trajectory = getattr(trajectory, "name", type(trajectory).__name__)
    return scenario.get("payload"), scenario.get("wind"), trajectory


def _build_key(scenario: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What an env is built from in a scenario (all but its reset ``options``), hashable; a
    trajectory object is left out (a pooled env takes it over: :class:`_MaskedVectorEnv`)."""
    return tuple(
        sorted(
            (str(k), repr(v))
            for k, v in scenario.items()
            if k != "options" and not (k == "trajectory" and not isinstance(v, str))
        )
    )


class QuadVecEnv(VecEnv):
    """SB3 ``VecEnv`` of ``num_envs`` domain-randomized quadrotors on the vector env.

    Args:
        num_envs: batch size (1 … :data:`MAX_VECTOR_ENVS`).
        sampler: scenario of each new episode at an autoreset, ``(rng) -> scenario``
            (:class:`ScenarioSampler`).
        scenarios: the first episode's scenario of each env (``None``: drawn with ``sampler``
            from a generator seeded ``scenario_seed``).
        scenario_seed: see ``scenarios``.
        seed_offset: added to every seed ``seed(s)`` gives (env ``i``: ``s + seed_offset + i``;
            the sampler ``s + seed_offset + num_envs``); with an offset, a first ``reset``
            before any ``seed`` seeds as ``seed(0)`` — every env seed is at least the offset
            (off the matrix: :data:`~residual_quad.training.scenarios.FIRST_OFF_MATRIX_SEED`).
        action_repeat: control periods each action is held (rewards summed).
        nthread: ``rollout`` threads of the vector env (``None``: the cores).
        pilot: ``None`` — the actions are the env's (4 rotor or ``ctbr`` values); or what
            the actions act through (``ppo_res``: a
            :class:`~residual_quad.controllers.ppo_res.ResidualPilot`, actions of
            ``pilot.action_dim`` values: ``pilot.decide(actions)`` once per decision gives
            what the action history remembers, ``pilot(raw_obs)`` the rotor actions of every
            control period; ``pilot.reset_rows(index)`` at each env's new episode).
        features: the policy's inputs beyond the base features
            (:class:`~residual_quad.controllers.policy_inputs.FeatureSpec`; ``None``: none),
            built by one :class:`~residual_quad.controllers.policy_inputs.PolicyInputs`
            (history: the actions as given, clipped; reset with each env's episode).
        estimator: ``geo_rls``'s estimator as
            :class:`~residual_quad.controllers.ppo_adapt.AdaptEstimator` (needed by a spec
            with ``estimate``): every control period it sees each running env's new
            observation and is told the command applied, as the deployed controller — the
            rotor action's nominal acceleration, or with a pilot the acceleration its tracker
            handed the inner loop (``pilot.last_command``).
        **env_kwargs: ``ResidualQuad-v0`` arguments shared by every env (``action_mode``,
            ``episode_s``, ``reward_weights``, ``max_position_error``, …).
        privileged: append the privileged columns
            (:data:`~residual_quad.training.privileged.PRIVILEGED_NAMES`, truth from the vector
            env's ``info``) after the ``actor_dim`` feature columns, for an asymmetric critic.
        action_cost: ``(w_s, w_m)``, the policy's own action cost (:meth:`_action_cost`).
        position_log: ``(w, s)``: each control period's reward also loses
            ``w·ln(1 + ‖e_p‖/s)`` (``s`` in m; ``w`` 0: off), a position cost whose slope grows
            as the error shrinks, so a millimetre in calm air is not lost beside a gust's
            centimetres.
        episode_lengths: training episode lengths (s, each up to the env's ``episode_s``): each
            episode's is drawn uniformly from the list (an entry listed k times k times as
            often; from a generator seeded with ``scenario_seed``) and the episode ends there as
            a time limit (``TimeLimit.truncated``: PPO bootstraps it). More short episodes mean
            more starts per sample without losing the long flights. ``None``: every episode
            runs to ``episode_s``.
        precision: the precision reward (``None``: the env's, shaped as above): each decision
            pays the mean over its ``action_repeat`` periods of
            ``precision(‖e_p‖, ‖u − u_prev‖², progress)`` (``u`` the policy's action, ``u_prev``
            the previous one of the episode, zero at its start), at least
            :data:`PRECISION_FLOOR`, in place of the env reward and of ``action_cost`` and
            ``position_log`` (which must be off).

    See the module docstring for the conventions. ``get_attr``/``set_attr``/``env_method`` reach
    the single envs that hold each env's scenario and generator (``vector_env.envs``).
    """

    def __init__(
        self,
        num_envs: int,
        sampler: ScenarioSampler,
        action_repeat: int = 1,
        nthread: int | None = None,
        scenarios: Sequence[Mapping[str, Any]] | None = None,
        scenario_seed: int = 0,
        seed_offset: int = 0,
        pilot: Any = None,
        features: FeatureSpec | None = None,
        estimator: Any = None,
        privileged: bool = False,
        action_cost: tuple[float, float] = (0.0, 0.0),
        position_log: tuple[float, float] = (0.0, 0.01),
        precision: PrecisionReward | None = None,
        episode_lengths: Sequence[float] | None = None,
        **env_kwargs: Any,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer):
            raise ValueError(f"num_envs must be an integer, got {num_envs!r}")
        if not 1 <= num_envs <= MAX_VECTOR_ENVS:
            raise ValueError(f"num_envs must be in [1, {MAX_VECTOR_ENVS}], got {num_envs}")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        if scenarios is None:
            rng = np.random.default_rng(scenario_seed)
            scenarios = [sampler(rng) for _ in range(num_envs)]
        self.vector_env = _MaskedVectorEnv(
            int(num_envs), scenarios=scenarios, sampler=sampler, nthread=nthread, **env_kwargs
        )
        self.sampler = sampler
        self.seed_offset = integer("seed_offset", seed_offset, low=0)
        self._seeded = False  # a reset with a seed happened
        self.action_repeat = int(action_repeat)
        self.pilot = pilot
        self.action_dim = 4 if pilot is None else int(pilot.action_dim)
        self.feature_spec = features or FeatureSpec()
        if self.feature_spec.estimate and estimator is None:
            raise ValueError("features.estimate needs the estimator (ppo_adapt's AdaptEstimator)")
        self.estimator = estimator
        self.action_cost = tuple(float(w) for w in action_cost)  # (smooth, magnitude) weights
        self.position_log = tuple(float(w) for w in position_log)  # (weight, scale in m)
        if precision is not None and (any(self.action_cost) or self.position_log[0]):
            raise ValueError(
                "the precision reward replaces the action cost and the log position cost: "
                f"got action_cost {self.action_cost} and position_log {self.position_log}"
            )
        self.precision = precision
        self.progress = 0.0  # the fraction of the training budget done (set_progress)
        period_s = self.vector_env.control_dt * self.action_repeat  # s per decision
        self.inputs = PolicyInputs(self.feature_spec, int(num_envs), self.action_dim, period_s)
        self.actor_dim = self.inputs.dim  # the policy's inputs; privileged columns come after
        self.privileged = bool(privileged)
        width = self.actor_dim + (PRIVILEGED_DIM if self.privileged else 0)
        observation_space = spaces.Box(-1e6, 1e6, shape=(width,), dtype=np.float32)
        action_space = spaces.Box(-1.0, 1.0, shape=(self.action_dim,), dtype=np.float32)
        super().__init__(int(num_envs), observation_space, action_space)
        self._actions: np.ndarray | None = None
        obs_dim = self.vector_env.single_observation_space.shape[0]
        self._raw = np.zeros((int(num_envs), obs_dim))  # each env's last raw observation
        self._last = np.zeros((int(num_envs), self.action_dim))  # each env's last action
        self._estimate = np.zeros((int(num_envs), 3))  # Δâ of each env's last observation
        self._scenario_info = [_scenario_info(sc) for sc in self.vector_env.scenarios]
        self._lengths = self._length_steps(episode_lengths)
        # each env's episode budget in control periods and the periods it has flown; the
        # budgets are drawn from their own generator (the scenario seed's), one per episode
        self._length_rng = np.random.default_rng([int(scenario_seed), 1])
        self._limit = np.full(int(num_envs), self.vector_env.max_steps, dtype=np.int64)
        self._elapsed = np.zeros(int(num_envs), dtype=np.int64)

    def _length_steps(self, lengths: Sequence[float] | None) -> np.ndarray | None:
        """``episode_lengths`` (s) as control periods, each in [1, the env's episode]; a
        ``ValueError`` naming the entry otherwise (``None``: every episode runs to its end)."""
        if lengths is None:
            return None
        dt, most = self.vector_env.control_dt, self.vector_env.max_steps
        steps = []
        for s in lengths:
            n = round(float(s) / dt) if np.isfinite(float(s)) else 0
            if not 1 <= n <= most:
                raise ValueError(
                    f"episode_lengths entries must be in ({dt:g}, {most * dt:g}] s (a control "
                    f"period up to the env's episode_s), got {s!r}"
                )
            steps.append(n)
        if not steps:
            raise ValueError("episode_lengths must name at least one length, or be null")
        return np.array(steps, dtype=np.int64)

    def _draw_limits(self, rows: np.ndarray) -> None:
        """New episode budgets for ``rows`` (in order), their flown periods back to zero."""
        self._elapsed[rows] = 0
        if self._lengths is not None:
            pick = self._length_rng.integers(len(self._lengths), size=len(rows))
            self._limit[rows] = self._lengths[pick]

    def set_progress(self, progress: float) -> None:
        """The fraction of the training budget done, clipped to [0, 1]: the precision reward's
        annealing (:meth:`~residual_quad.training.precision.PrecisionReward.tolerances_at`)
        takes it for every later step. The training sets it from the model's step count (which
        a checkpoint restores), so a resumed run anneals on from where it stopped."""
        p = float(progress)
        if not np.isfinite(p):
            raise ValueError(f"progress must be a finite number, got {progress!r}")
        self.progress = min(1.0, max(0.0, p))

    # ------------------------------------------------------------------ reset / step
    def reset(self) -> np.ndarray:
        """Reset every env (after ``seed(s)``: env ``i`` seeded ``s + seed_offset + i``, the
        sampler ``s + seed_offset + num_envs``), each in its current scenario."""
        seed = self._seeds[0]
        if self.seed_offset:
            if seed is None and not self._seeded:
                seed = 0  # never from entropy: every env seed at least the offset
            if seed is not None:
                seed += self.seed_offset
        obs, info = self.vector_env.reset(seed=seed)
        self._seeded |= seed is not None
        self._reset_seeds()
        self._reset_options()
        self._raw[:] = obs
        self._last[:] = 0.0
        self._draw_limits(np.arange(self.num_envs))
        self.inputs.reset_rows()
        if self.pilot is not None:
            self.pilot.reset_rows()
        if self.estimator is not None:
            self.estimator.reset()
            self._estimate = self.estimator.observe(obs)
        features = self.inputs.features(obs, self._last, self._estimate)
        return self._with_privileged(features, info, np.arange(self.num_envs))

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async first"
        venv = self.vector_env
        n = self.num_envs
        # shape, finite, clipped to [-1, 1]
        action = venv.check_actions(self._actions, self.action_dim)
        self._actions = None
        reward = np.zeros(n)
        last = np.zeros_like(self._raw)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        pos_err = np.zeros(n)
        steps = np.zeros(n, dtype=np.int64)
        running = np.ones(n, dtype=bool)
        est = self.estimator
        truth = self._truth_rows(n)
        # what the history remembers: the action, or the correction a pilot holds after it
        held = action if self.pilot is None else self.pilot.decide(action)
        w_log, s_log = self.position_log  # the log-shaped position cost (w 0: off)
        precision = self.precision
        if precision is not None:  # the decision's ‖u_t − u_{t−1}‖², the policy's own action
            change_sq = np.sum((action - self._last) ** 2, axis=1)
        for k in range(self.action_repeat):
            active = np.flatnonzero(running)
            # a pilot's tracker reads the base fields only (a mid-hold preview is not read)
            act = action if self.pilot is None else self.pilot(self._raw[:, :OBS_DIM])
            if est is not None:  # as deployed: Δâ of the new observation, then the command
                if k:
                    self._estimate = est.observe(self._raw, running)
                if self.pilot is None:  # the rotor actions, with a feed-forward of Δâ
                    act = est.applied(self._raw, action, self._estimate)
                    est.command(self._raw, act, running)
                else:
                    est.set_command(self.pilot.last_command, running)
            # the preview is read at the decision's last period only (and at an episode's end)
            last_period = k == self.action_repeat - 1
            obs, rew, term, trunc, info = venv.step_subset(active, act[active], last_period)
            self._raw[active] = obs[active]
            if precision is not None:  # a non-finite error (a blown-up state) pays 0
                err = info["position_error"][active]
                err = np.where(np.isfinite(err), err, np.inf)
                reward[active] += precision(err, change_sq[active], self.progress)
            else:
                reward[active] += rew[active]
                if w_log:
                    reward[active] -= w_log * np.log1p(info["position_error"][active] / s_log)
            last[active] = obs[active]
            terminated[active] = term[active]
            truncated[active] = trunc[active]
            pos_err[active] = info["position_error"][active]
            steps[active] += 1
            if truth is not None:
                truth[active] = privileged_columns(info, active)
            running[active] = ~(term[active] | trunc[active])
            if not running.any():
                break
        if self._lengths is not None:  # an episode cut at its drawn length: a time limit
            self._elapsed += steps
            truncated |= (self._elapsed >= self._limit) & ~terminated
        dones = terminated | truncated
        if est is not None:
            self._estimate = est.observe(last)
        features = self._with_privileged(self.inputs.features(last, held, self._estimate), truth)
        if precision is not None:  # the periods' mean: every decision in (0, 1]
            reward = np.maximum(reward / self.action_repeat, PRECISION_FLOOR)
        else:
            reward -= self._action_cost(action)
        self._last[:] = action
        infos = [
            {"position_error": e, "diverged": d, "control_steps": c, "scenario": sc}
            for e, d, c, sc in zip(
                pos_err.tolist(),
                terminated.tolist(),
                steps.tolist(),
                self._scenario_info,
                strict=True,
            )
        ]
        ended = np.flatnonzero(dones)
        if len(ended):
            raw_first, reset_info = venv.reset_subset(ended)
            raw_first = raw_first[ended]
            self._raw[ended] = raw_first
            self._last[ended] = 0.0
            self._draw_limits(ended)
            self.inputs.reset_rows(ended)
            if self.pilot is not None:
                self.pilot.reset_rows(ended)
            if est is not None:
                est.reset(ended)
                start = np.zeros(n, dtype=bool)
                start[ended] = True
                self._estimate = est.observe(self._raw, start)
            first = self.inputs.features(
                raw_first, self._last[ended], self._estimate[ended], rows=ended
            )
            first = self._with_privileged(first, reset_info, ended)
            cut = (truncated & ~terminated)[ended].tolist()
            for k, i in enumerate(ended.tolist()):
                infos[i]["terminal_observation"] = features[i].copy()
                infos[i]["TimeLimit.truncated"] = cut[k]
                features[i] = first[k]
                self._scenario_info[i] = _scenario_info(venv.scenarios[i])
        return features, reward.astype(np.float32), dones, infos

    def _action_cost(self, action: np.ndarray) -> np.ndarray:
        """The policy's own action cost per env, ``w_s·‖u − u_prev‖² + w_m·‖u‖²`` (``u`` the
        policy's action, ``u_prev`` the previous one of the episode, zero at its start): the
        smoothness shaping of [SIMPLEFLIGHT] on what the policy outputs — for ``ppo_res`` its
        correction, whose rotor-level effect the env's own ``smooth`` term does not see."""
        w_smooth, w_mag = self.action_cost
        cost = np.zeros(len(action))
        if w_smooth:
            cost += w_smooth * np.sum((action - self._last) ** 2, axis=1)
        if w_mag:
            cost += w_mag * np.sum(action**2, axis=1)
        return cost

    # ------------------------------------------------------------------ privileged columns
    def _truth_rows(self, n: int) -> np.ndarray | None:
        """A step's privileged columns, filled per repeat (``None`` without ``privileged``)."""
        return np.zeros((n, PRIVILEGED_DIM), dtype=np.float32) if self.privileged else None

    def _with_privileged(
        self, features: np.ndarray, truth: Any = None, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``features`` with the privileged columns appended when ``privileged``: ``truth`` an
        array of them, or a batched ``info`` read at ``rows``."""
        if not self.privileged:
            return features
        if isinstance(truth, dict):
            truth = privileged_columns(truth, rows)
        return np.concatenate([features, truth], axis=1)

    # ------------------------------------------------------------------ the rest of VecEnv
    def close(self) -> None:
        self.vector_env.close()

    def _targets(self, indices: Any) -> list[Any]:
        return [self.vector_env.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(env, attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for env in self._targets(indices):
            setattr(env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        return [
            getattr(env, method_name)(*method_args, **method_kwargs)
            for env in self._targets(indices)
        ]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [isinstance(env, wrapper_class) for env in self._targets(indices)]


class NullVecEnv(VecEnv):
    """A ``VecEnv`` with :class:`QuadVecEnv`'s spaces that simulates nothing (the SB3 ceiling).

    Observations are a fixed random batch, rewards zero, and every env's episode ends every
    ``episode_steps`` steps (with ``terminal_observation``), so PPO does all of its own work
    (policy forward, buffer, GAE, updates) and the env none. ``obs_dim`` and ``action_dim`` are
    the policy's input and output sizes (default: the base features, four rotor thrusts); a
    ceiling for a recipe with more inputs must be given that recipe's sizes, since the network's
    first layer, and so the learner's cost, grows with them.
    """

    def __init__(
        self,
        num_envs: int,
        episode_steps: int = 1000,
        seed: int = 0,
        obs_dim: int = FEATURE_DIM,
        action_dim: int = 4,
    ):
        if obs_dim < 1 or action_dim < 1:
            raise ValueError(f"obs_dim and action_dim must be >= 1, got {obs_dim}, {action_dim}")
        observation_space = spaces.Box(-1e6, 1e6, shape=(obs_dim,), dtype=np.float32)
        action_space = spaces.Box(-1.0, 1.0, shape=(action_dim,), dtype=np.float32)
        super().__init__(num_envs, observation_space, action_space)
        rng = np.random.default_rng(seed)
        self._obs = rng.standard_normal((num_envs, obs_dim)).astype(np.float32)
        self.episode_steps = episode_steps
        self._t = 0

    def reset(self) -> np.ndarray:
        self._t = 0
        return self._obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        pass

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self._t += 1
        done = self._t % self.episode_steps == 0
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if done:
            for info in infos:
                info["terminal_observation"] = self._obs[0]
                info["TimeLimit.truncated"] = True
        dones = np.full(self.num_envs, done)
        return self._obs.copy(), np.zeros(self.num_envs, dtype=np.float32), dones, infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [None for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        pass

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        return [None for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
