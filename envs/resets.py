"""Resetting single envs as one batch: what the vector env's resets and autoresets are made of,
and the single env's ``reset`` with a batch of one (one implementation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from residual_quad.envs.observation import ObsLayout, true_observation
from residual_quad.envs.plant import finish_resets as finish_plant_resets
from residual_quad.envs.plant import specific_force
from residual_quad.envs.reward import position_error
from residual_quad.envs.trajectories import check_reference, fields_of
from residual_quad.envs.xp import ARRAYS

__all__ = ["begin_resets", "finish_resets"]

_ONE = slice(None)  # a single env's row in its latency lines (a batch of one)


def begin_resets(
    envs: Sequence[Any],
    seeds: Sequence[int | None],
    options: Sequence[dict[str, Any] | None],
    where: Sequence[str] | None = None,
) -> None:
    """The first half of a batched reset of distinct single envs ``envs``
    (:class:`~residual_quad.envs.residual_quad_env.ResidualQuadEnv`, each with its ``seed`` and
    reset ``options``): every env's first reference checked
    (:func:`~residual_quad.envs.trajectories.check_reference`), then each env's arguments
    checked, generator seeded, sensors reseeded and plant placed — every draw of its generator
    but its first wind block. :func:`finish_resets` completes the batch. ``where`` names each
    env in a ``ValueError`` (the vector env's ``env i: ...``)."""
    if len({id(env) for env in envs}) != len(envs):
        raise ValueError("a batched reset takes distinct envs (each draws from its own generator)")
    trajectories = [env.trajectory for env in envs]
    k = 0
    try:
        refs = []  # every env's first reference checked before any env is touched
        for k in range(len(envs)):
            refs.append(check_reference(trajectories[k], trajectories[k](0.0), 0.0))
        for k, env in enumerate(envs):
            env._begin_reset(seeds[k], options[k], refs[k])
    except ValueError as err:
        if where is None:
            raise
        raise ValueError(f"{where[k]}: {err}") from None


def finish_resets(
    envs: Sequence[Any],
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Complete the resets :func:`begin_resets` started, for a batch of distinct
    envs, as array computations: the plants' first wind blocks and forward passes
    (:func:`~residual_quad.envs.plant.finish_resets`), the true observations and position
    errors of the batch, then each env's sensing and ``info``.

    Returns the observations as the sensors report them, ``(len(envs), OBS_DIM)`` (without a
    preview: the caller adds its own), and the infos. Bit for bit each env's ``reset``
    alone; ``ResidualQuadEnv.reset`` is this with one env."""
    plants = [env.plant for env in envs]
    finish_plant_resets(plants)
    datas = [plant.data for plant in plants]
    qpos = np.array([d.qpos[0:7] for d in datas])
    qacc = np.array([d.qacc[0:3] for d in datas])
    rot = np.array([d.xmat[plant.body_id] for d, plant in zip(datas, plants, strict=True)])
    gravity = np.array([plant.airframe.gravity for plant in plants])
    imu = np.array(specific_force(qacc.T, list(rot.T), gravity)).T
    reference = np.array([fields_of(env._first_reference) for env in envs])
    true_obs = true_observation(
        qpos,
        np.array([d.qvel[0:6] for d in datas]),
        reference,
        np.array([plant.command for plant in plants]),
        imu,
    )
    pos_error = position_error(true_obs.T, true_obs[:, ObsLayout.ref_pos].T, xp=ARRAYS)
    sensed = np.empty_like(true_obs)
    infos = []
    for j, env in enumerate(envs):
        env._last_true_obs = true_obs[j].tolist()
        env._needs_reset = False
        sensed[j] = env.sensors.sense(true_obs[j])  # before the info: it reports the bias
        if env.latency.delays:
            env.latency.reset(_ONE, sensed[j, None])
        infos.append(env._info(float(pos_error[j]), np.zeros(3), {}, None))
    return sensed, infos
