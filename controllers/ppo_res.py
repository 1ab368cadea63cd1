"""``ppo_res``: residual RL [RESRL] — a PPO policy corrects ``geo``'s desired acceleration.

The RL counterpart of ``geo_res``: the tracker is ``geo`` (feed-forward + PD outer loop, the
shared geometric inner loop), and a PPO policy adds a bounded correction to the desired
acceleration,

``a_eff = a_ref + K_p·e_p + K_d·e_v + R_z(ψ)·δa_h``,  ``δa_h = accel_scale · u``, ``u ∈ [-1, 1]³``,

where ``δa_h`` (m/s²) is expressed in the vehicle's heading frame (world rotated by the current
yaw ψ; the frame of the policy's input :func:`~residual_quad.controllers.features.ppo_features`) and
``accel_scale`` (m/s²) is the bound stored in the policy file. The policy sees the same features
as ``ppo`` and acts every ``action_repeat`` control periods; ``geo`` runs every period with the
held correction. ``last_residual`` is ``−R_z(ψ)·δa_h`` — the residual the policy cancels — so
the sweep's residual-bias metric reads it like ``geo_res``'s estimate.

Policy files are ``ppo``'s format (one SB3 ``.zip`` with its ``residual_quad.json`` record:
normalization, action repeat, training record) with ``controller: ppo_res`` and
``accel_scale``; :func:`~residual_quad.controllers.policy_file.load_policy` checks them. Train
one with ``rquad train ppo_res`` (:mod:`residual_quad.training.ppo`, ``configs/ppo_res.yaml``).

:class:`ResidualPilot` is what the policy acts through in training (batched ``geo`` on the
vector env), :class:`BatchedResidualPPOController` the sweep's batched controller; both give the
single controller's rotor actions for the same correction (tests).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.policy_file import (
    ObsNormalizer,
    load_policy,
    policy_actions,
    policy_path,
    policy_spec,
)
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.controllers.ppo import (
    POLICY_OPTIONS,
    in_memory,
    observation_actions,
    policy_inputs,
)
from residual_quad.controllers.trackers import BatchedTracker, Tracker
from residual_quad.envs.observation import ObsLayout as L


def heading_to_world(R: np.ndarray, v_h: np.ndarray) -> np.ndarray:
    """``R_z(ψ)·v_h``: a heading-frame vector (3,) in the world frame, ψ the yaw of the
    body → world rotation ``R`` (3, 3) (scalar code: one vehicle)."""
    psi = math.atan2(R[1, 0], R[0, 0])
    c, s = math.cos(psi), math.sin(psi)
    return np.array((c * v_h[0] - s * v_h[1], s * v_h[0] + c * v_h[1], v_h[2]))


def heading_to_world_batch(R: np.ndarray, v_h: np.ndarray) -> np.ndarray:
    """:func:`heading_to_world` of N vehicles: ``R`` (N, 3, 3), ``v_h`` (N, 3) → (N, 3)."""
    psi = np.arctan2(R[:, 1, 0], R[:, 0, 0])
    c, s = np.cos(psi), np.sin(psi)
    return np.stack((c * v_h[:, 0] - s * v_h[:, 1], s * v_h[:, 0] + c * v_h[:, 1], v_h[:, 2]), 1)


class ResidualPPOController(Tracker):
    """``geo`` plus a PPO policy's bounded correction of the desired acceleration.

    Args:
        context: nominal airframe and control period (``geo``'s).
        path: a ``ppo_res`` policy ``.zip`` (``rquad train ppo_res``); default: the shipped one.
        device: torch device for SB3's ``predict`` (used only for architectures the numpy
            forward does not read).
        training_seed: fly the shipped policy of this training seed instead (0: the default,
            ``controllers/weights/ppo_res_default.zip``); not together with ``path``.
        plant: fly the shipped policy retrained for this plant (as ``ppo``'s ``plant``).

    The gains are ``geo``'s defaults, the ones the policy was trained with. Call :meth:`reset`
    at the start of every episode (it restarts the action-hold cycle).
    """

    name = "ppo_res"
    kind = "ppo_res"  # the policy file's controller kind
    OPTIONS = POLICY_OPTIONS
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="ppo's try-3 update size; exploration: 3 tries (docs/ppo.md)",
        learned="policy",
    )

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        self.path = policy_path("ppo_res", path, training_seed, plant)
        self.meta, self.model, self.normalizer, self.network = load_policy(
            self.path, "ppo_res", device
        )
        self.accel_scale = float(self.meta["accel_scale"])  # m/s²
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = dict(self.meta.get("env_kwargs", {}))
        self.spec = policy_spec(self.meta)
        super().__init__(context)

    @classmethod
    def from_model(
        cls,
        model: Any,
        accel_scale: float,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
        spec: FeatureSpec | None = None,
    ) -> ResidualPPOController:
        """Wrap an in-memory SB3 model (the training's evaluation callback)."""
        self = in_memory(cls, model, normalizer, action_repeat, spec)
        self.accel_scale = float(accel_scale)
        Tracker.__init__(self, None)
        return self

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._k = 0
        self._held = np.zeros(3)  # m/s², heading frame: the correction being held
        self._u = np.zeros(3)  # the action being held, [-1, 1]
        if getattr(self, "inputs", None) is None:
            self.inputs = policy_inputs(self, 1)
        self.inputs.reset_rows()

    @property
    def held_action(self) -> np.ndarray:
        """The policy's action being held, in [-1, 1]³ (the correction over ``accel_scale``)."""
        return self._u.copy()

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 3) in [-1, 1] of normalized feature rows ``x``."""
        return policy_actions(self.network, self.model, x)

    def correction(self, obs: np.ndarray) -> np.ndarray:
        """The policy's correction δa_h (m/s², heading frame) for one raw observation (its
        inputs advance one decision: the held action enters the history)."""
        self._u = observation_actions(self, obs[None, :], self.inputs, self._u[None, :])[0]
        return self._u * self.accel_scale

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        if self._k % self.action_repeat == 0:
            self._held = self.correction(obs)
        self._k += 1
        return -heading_to_world(R, self._held)


class BatchedResidualPPOController(BatchedTracker):
    """``ppo_res`` for N envs: batched ``geo``, one policy forward for the envs due, per-env
    action hold. The corrections equal the single controller's bit for bit (per-row features,
    the numpy forward's batch-invariant products, per-row heading rotation); the rotor actions
    then equal it as batched ``geo`` equals ``geo`` (≤ 1e-12).

    Args:
        controller: a loaded :class:`ResidualPPOController` (its network, normalizer, bound and
            action repeat are used).
        n_envs: number of envs.
    """

    name = "ppo_res"
    from_single = True

    def __init__(self, controller: ResidualPPOController, n_envs: int):
        self.single = controller
        self.accel_scale = controller.accel_scale
        self.action_repeat = controller.action_repeat
        self._k = np.zeros(n_envs, dtype=np.int64)
        self._held = np.zeros((n_envs, 3))
        self._u = np.zeros((n_envs, 3))  # the actions being held, [-1, 1]
        self.inputs = policy_inputs(controller, n_envs)
        super().__init__(controller.context, n_envs, kp=controller.kp, kd=controller.kd)

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self._k[index] = 0
        self._held[index] = 0.0
        self._u[index] = 0.0
        self.inputs.reset_rows(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        state = [(self, "_k"), (self, "_held"), (self, "_u")]
        state += [(self.inputs, "history"), (self.inputs, "integral")]
        return [*super()._row_state(), *state]

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        due = np.flatnonzero(self._k % self.action_repeat == 0)
        if len(due):
            u = observation_actions(self.single, obs[due], self.inputs, self._u[due], None, due)
            self._u[due] = u
            self._held[due] = u * self.accel_scale
        self._k += 1
        return -np.stack([heading_to_world(R[i], self._held[i]) for i in range(self.n_envs)])


class _CorrectedGeo(BatchedTracker):
    """Batched ``geo`` whose desired acceleration gets :attr:`correction` (N, 3) world m/s²."""

    name = "ppo_res"

    def __init__(self, context: ControlContext | None, n_envs: int):
        self.correction = np.zeros((n_envs, 3))
        super().__init__(context, n_envs)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return -self.correction


ResidualPPOController.batched = BatchedResidualPPOController


class ResidualPilot:
    """What a ``ppo_res`` policy acts through in training: per control period, the actions
    ``u`` (N, 3) in [-1, 1] → ``geo``'s rotor actions (N, 4) with the correction
    ``R_z(ψ)·(accel_scale·u)`` for the raw observations (N, OBS_DIM). ``geo`` is stateless
    between periods, so no env needs a reset here.

    Args:
        n_envs: number of envs.
        accel_scale: the correction bound, m/s² per heading-frame axis.
        context: nominal airframe and control period.
    """

    action_dim = 3

    def __init__(self, n_envs: int, accel_scale: float, context: ControlContext | None = None):
        self.accel_scale = float(accel_scale)
        self.geo = _CorrectedGeo(context, n_envs)

    def __call__(self, obs: np.ndarray, u: np.ndarray) -> np.ndarray:
        R = obs[:, L.rot].reshape(-1, 3, 3)
        self.geo.correction = heading_to_world_batch(R, self.accel_scale * u)
        return self.geo.policy_batch(obs)
