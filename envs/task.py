"""The task step of ``ResidualQuad-v0``, shared by the single and the vector environment.

Both environments step in two parts (dm_control's Physics/Task split, MuJoCo Playground's
functional step): their **physics** (the single env its :class:`~residual_quad.envs.plant.
QuadrotorPlant`, the vector env the batched ``rollout`` of :mod:`residual_quad.envs.
vector_physics`) flies one control period, then the **task** functions here turn the result into
what ``step`` returns: the period residual, the position error, the termination reason, the
reward and its terms, and the truncation (:func:`task_step`), and the ``info`` dict
(:data:`INFO_KEYS`, :func:`step_info`). The two environments differ only in the physics call.

Batch form. The observation is either one observation as a list of Python floats (the single
env: N = 1) or an ``(N, OBS_DIM)`` array with a leading batch axis (the vector env); actions,
step counts and the physics' flags follow the same form. The formulas are written once with
operators (:func:`~residual_quad.envs.dynamics.period_residual`,
:func:`~residual_quad.envs.reward.position_error`, :func:`~residual_quad.envs.reward.
reward_terms`), and their square roots on the namespace ``xp`` of :mod:`residual_quad.envs.xp`
(:class:`~residual_quad.envs.xp.FLOATS` for one observation, :class:`~residual_quad.envs.xp.
ARRAYS` for a batch), so every element is the same IEEE arithmetic in either form; that module
states the rules, and why one observation is kept as Python floats.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from residual_quad.envs.dynamics import period_residual
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.reward import (
    REWARD_TERMS,
    RewardWeights,
    position_error,
    reward_terms,
    total_reward,
)
from residual_quad.envs.termination import (
    NO_REWARD_REASONS,
    TERMINATION_REASONS,
    CrashConditions,
    termination_code,
)
from residual_quad.envs.xp import ARRAYS, FLOATS

_REF_POS, _REF_VEL = L.ref_pos, L.ref_vel
_NON_FINITE = TERMINATION_REASONS.index("non_finite")
_NO_REWARD_CODES = sorted(TERMINATION_REASONS.index(r) for r in NO_REWARD_REASONS)
assert _NO_REWARD_CODES == [0, 1], "the no-reward reasons are checked first"
_FIRST_REWARDED = len(_NO_REWARD_CODES)  # codes below it (and >= 0) forfeit the reward

_INFO_FIELDS: dict[str, tuple[tuple[int, ...], Any] | None] = {
    "t": ((), float),  # s
    "position_error": ((), float),  # m
    "residual_accel": ((3,), float),  # m/s², world
    "wind": ((3,), float),  # m/s, world
    "drag_force": ((3,), float),  # N, world
    "ground_gain": ((), float),
    "rotor_thrusts": ((4,), float),  # N, the rotors' at the period's end, before the gain
    "payload_kg": ((), float),
    "true_mass": ((), float),  # kg
    "gyro_bias": ((3,), float),  # rad/s, body: the IMU bias in the observed body rates
    "accel_bias": ((3,), float),  # m/s², body: ... in the observed specific force
    "mean_wind": ((3,), float),  # m/s, world, the mean under the gusts (events move it)
    "rotor_efficiency": ((4,), float),  # per rotor, thrust and reaction-torque factor
    "events_fired": ((), np.int64),  # how many of the scenario's events (time order) fired
    "reward_terms": None,  # a dict keyed as REWARD_TERMS
    "diverged": ((), bool),
    "termination": ((), object),
}  # shape of one env's entry and dtype

INFO_KEYS: tuple[str, ...] = tuple(_INFO_FIELDS)
"""The keys of ``info``, in order (``reward_terms`` is a dict keyed as :data:`REWARD_TERMS`)."""


@dataclass(frozen=True)
class TaskParams:
    """The parameters of the task step: what it needs to know about an environment (shared by
    all envs of a batch)."""

    conditions: CrashConditions
    weights: RewardWeights
    control_dt: float  # s
    mass: float  # kg, the nominal model's mass (period residual)
    gravity: float  # m/s²
    max_steps: int  # control steps after which an episode is truncated


class TaskStep(NamedTuple):
    """The task's result of one step: floats for one observation, arrays of N for a batch."""

    t: Any  # s, simulated time the step reached
    residual: Any  # m/s², world: (3,) for one observation, (N, 3) for a batch
    pos_error: Any  # m, ‖p − p_ref‖
    code: Any  # index into TERMINATION_REASONS, -1 when the episode goes on
    terms: Any  # the reward terms (dict keyed as REWARD_TERMS; ignore where not rewarded)
    reward: Any  # 0 where not rewarded
    rewarded: Any  # the reward terms count (no simulation_unstable / non_finite end)
    terminated: Any
    truncated: Any


#: the no-op context of one environment's step (reusable)
_ONE_ENV = contextlib.nullcontext()


def task_step(
    task: TaskParams,
    prev_obs: Any,
    obs: Any,
    action: Any,
    prev_action: Any,
    steps: Any,
    sim_time: Any,
    unstable: Any,
    contact_speed: Any,
) -> TaskStep:
    """Everything ``step`` returns besides the observation, from the physics' result.

    Args:
        task: the environment's task parameters.
        prev_obs, obs: true observations at the start and the end of the period: one list of
            floats, or ``(N, OBS_DIM)`` arrays.
        action, prev_action: this step's clipped action and the previous one (4 floats or
            ``(N, 4)``).
        steps: control steps taken, this one included (int or ``(N,)``).
        sim_time: the physics' simulated time, s (a MuJoCo reset on a warning sets it back).
        unstable: the physics found the period unstable (MuJoCo warned; see
            :func:`~residual_quad.envs.termination.termination_code`).
        contact_speed: the frame's speed while touching the floor, else 0, m/s.

    The rules of :mod:`~residual_quad.envs.termination` and :mod:`~residual_quad.envs.reward`:
    a position error or a reward beyond the float range (a reference out of range) ends the
    episode as ``non_finite``; after ``simulation_unstable`` and ``non_finite`` the reward is 0
    with no terms. Truncated after ``task.max_steps`` steps unless terminated.
    """
    batch = isinstance(obs, np.ndarray)
    # a batch ignores numpy overflow warnings: inf and NaN are handled below; one env (floats)
    # takes the shared no-op context
    with np.errstate(over="ignore", invalid="ignore") if batch else _ONE_ENV:
        if batch:  # field rows of the batch: element k of every row is env k
            o, p, a, pa, xp = obs.T, prev_obs.T, action.T, prev_action.T, ARRAYS
        else:
            o, p, a, pa, xp = obs, prev_obs, action, prev_action, FLOATS
        t = steps * task.control_dt
        residual = period_residual(p, o, task.control_dt, task.mass, task.gravity)
        try:
            pos_error = position_error(o, o[_REF_POS], xp=xp)
        except OverflowError:  # floats: a reference beyond the float range, squared
            pos_error = math.inf
        code = termination_code(
            task.conditions, obs, pos_error, unstable, sim_time, t, contact_speed
        )
        pos_inf = pos_error == math.inf
        try:
            terms = reward_terms(task.weights, o, o[_REF_VEL], pos_error, a, pa, xp=xp)
            reward = total_reward(terms)
        except OverflowError:  # floats: a reference velocity beyond the float range
            terms, reward = {}, math.inf
        if batch:
            code[pos_inf & ((code < 0) | (code >= _FIRST_REWARDED))] = _NON_FINITE
            rewarded = (code < 0) | (code >= _FIRST_REWARDED)
            overflow = rewarded & ~np.isfinite(reward)
            code[overflow] = _NON_FINITE
            rewarded &= ~overflow
            reward = np.where(rewarded, reward, 0.0)
            terminated = code >= 0
            truncated = ~terminated & (steps >= task.max_steps)
        else:
            if pos_inf and not 0 <= code < _FIRST_REWARDED:
                code = _NON_FINITE
            rewarded = not 0 <= code < _FIRST_REWARDED
            if rewarded and not math.isfinite(reward):
                code, rewarded = _NON_FINITE, False
            if not rewarded:
                terms, reward = {}, 0.0
            terminated = code >= 0
            truncated = not terminated and steps >= task.max_steps
        return TaskStep(
            t, residual, pos_error, code, terms, reward, rewarded, terminated, truncated
        )


def reason(code: int) -> str | None:
    """The termination reason of a code of :class:`TaskStep` (``None``: the episode goes on)."""
    return TERMINATION_REASONS[code] if code >= 0 else None


def step_info(
    t: float,
    pos_error: float,
    residual: np.ndarray,
    wind: np.ndarray,
    drag_force: np.ndarray,
    ground_gain: float,
    rotor_thrusts: np.ndarray,
    payload_kg: float,
    true_mass: float,
    mean_wind: np.ndarray,
    rotor_efficiency: np.ndarray,
    events_fired: int,
    terms: dict[str, float],
    termination: str | None,
    imu_bias: np.ndarray | None = None,
) -> dict[str, Any]:
    """One environment's ``info`` (keys :data:`INFO_KEYS`); the arrays are copied, ``imu_bias``
    (gyro then accelerometer, 6 entries; ``None``: zeros) too. The vector env holds the same keys
    as arrays (:func:`empty_batch_info`)."""
    bias = np.zeros(6) if imu_bias is None else imu_bias
    return {
        "t": t,
        "position_error": pos_error,
        "residual_accel": residual,
        "wind": wind.copy(),
        "drag_force": drag_force.copy(),
        "ground_gain": ground_gain,
        "rotor_thrusts": np.array(rotor_thrusts, dtype=float),
        "payload_kg": payload_kg,
        "true_mass": true_mass,
        "gyro_bias": bias[0:3].copy(),
        "accel_bias": bias[3:6].copy(),
        "mean_wind": mean_wind.copy(),
        "rotor_efficiency": rotor_efficiency.copy(),
        "events_fired": events_fired,
        "reward_terms": terms,
        "diverged": termination is not None,
        "termination": termination,
    }


def empty_batch_info(n: int) -> dict[str, Any]:
    """The ``info`` of ``n`` envs in Gymnasium's vector form, nothing filled: every key of
    :data:`INFO_KEYS` an array of ``n`` rows with its mask ``_key`` (all ``False``);
    ``reward_terms`` a dict of the same form."""
    info: dict[str, Any] = {}
    for key, field in _INFO_FIELDS.items():
        if field is None:
            terms: dict[str, Any] = {}
            for name in REWARD_TERMS:
                terms[name] = np.zeros(n)
                terms[f"_{name}"] = np.zeros(n, dtype=bool)
            info[key] = terms
        else:
            shape, dtype = field
            info[key] = (
                np.full(n, None, dtype=object) if dtype is object else np.zeros((n, *shape), dtype)
            )
        info[f"_{key}"] = np.zeros(n, dtype=bool)
    return info


def fill_batch_info(info: dict[str, Any], i: Any, env_info: dict[str, Any]) -> None:
    """Put one env's info dict (:func:`step_info`) into the batched ``info`` at index ``i``."""
    for key, value in env_info.items():
        if key == "reward_terms":
            for name, term in value.items():
                info[key][name][i] = term
                info[key][f"_{name}"][i] = True
            info[f"_{key}"][i] = bool(value)
            continue
        info[key][i] = value
        info[f"_{key}"][i] = True
