"""PPO policy adapter: a trained stable-baselines3 model behind the :class:`Controller` interface.

The policy file (one SB3 ``.zip`` with its ``residual_quad.json`` record: action mode, action
repeat, observation normalization, training record) is read, checked and written by
:mod:`residual_quad.controllers.policy_file`; the policy sees
:func:`~residual_quad.controllers.features.ppo_features` of the raw observation — the same
function the training wrapper uses — so training and deployment can never disagree on the input.
Both are re-exported here under their established names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import (
    ControlContext,
    InformationUse,
    ObservationGuard,
    hover_action,
)
from residual_quad.controllers.batch import RowBatch, RowGuard, check_n_envs, check_obs_batch
from residual_quad.controllers.features import (
    FEATURE_DIM,
    FEATURE_NAMES,
    ppo_features,
    ppo_features_batch,
)
from residual_quad.controllers.numpy_policy import NumpyPolicy
from residual_quad.controllers.options import Choice, Domain, Integer, Optional, Text
from residual_quad.controllers.policy_file import (
    ACTION_DIMS,
    INSTALL_HINT,
    POLICY_ALGOS,
    SHIPPED_PLANTS,
    ObsNormalizer,
    PolicyFileError,
    algo_module,
    default_policy_path,
    load_policy,
    policy_actions,
    policy_env_kwargs,
    policy_path,
    policy_spec,
    read_meta,
    shipped_policy_path,
)
from residual_quad.controllers.policy_inputs import FeatureSpec, PolicyInputs

__all__ = [
    "BatchedPPOController",
    "BatchedSACController",
    "BatchedTQCController",
    "FEATURE_DIM",
    "FEATURE_NAMES",
    "INSTALL_HINT",
    "NumpyPolicy",
    "ObsNormalizer",
    "PPOController",
    "SACController",
    "TQCController",
    "PolicyFileError",
    "default_policy_path",
    "in_memory",
    "observation_actions",
    "policy_inputs",
    "ppo_features",
    "ppo_features_batch",
    "read_meta",
    "shipped_policy_path",
]

#: the options of ``ppo`` and ``ppo_res`` (a policy file, a torch device, a shipped seed)
POLICY_OPTIONS: dict[str, Domain] = {
    "path": Optional(Text("a policy .zip path", (Path,))),
    "device": Text("a torch device name (cpu, cuda, ...)"),
    "training_seed": Optional(Integer(ge=0)),
    "plant": Optional(Choice(SHIPPED_PLANTS)),
}


class PPOController(ObservationGuard):
    """Deterministic actions of a saved PPO policy (see the module docstring for the file format).

    Args:
        context: unused (the policy was trained on the nominal airframe at 100 Hz); kept for the
            registry's ``factory(context, **overrides)`` call.
        path: a policy ``.zip`` written by ``rquad train ppo``; default: the shipped policy.
        device: torch device for inference (``"cpu"``).
        training_seed: fly the shipped policy of this training seed instead (0: the default;
            ``ppo:training_seed=1`` in a sweep); not together with ``path``.
        plant: fly the shipped policy retrained for this plant (``realistic``: the
            ``realistic`` preset, ``ppo:plant=realistic``; default ``ideal``); not with ``path``.

    The policy's input is :class:`~residual_quad.controllers.policy_inputs.PolicyInputs` of the
    file's feature spec (:attr:`spec`; the base features for a file without one), whose memory
    (the history holds the actions this controller emitted — the held one with action repeat —
    and the error integral) :meth:`reset` clears.

    ``action_mode`` is the mode the policy was trained in: fly it in an env made with the same
    ``action_mode`` (:func:`residual_quad.episode.run_episode` does this by itself) and
    the other ``env_kwargs`` it was trained with (``{}`` for the shipped policy). The policy acts
    every ``action_repeat`` control periods and holds its action in between (zero-order hold), so
    :meth:`reset` must be called at the start of each episode.
    """

    OPTIONS: dict[str, Domain] = POLICY_OPTIONS
    kind = "ppo"  # the policy kind it flies (the record's ``controller``)
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="PPO hyper-parameters: a first policy and 3 update-size tries within a 30 min "
        "budget (docs/ppo.md)",
        learned="policy",
        action="rotor thrusts",
        tuning_trials=4,
    )

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        algo_module(POLICY_ALGOS[self.kind])  # first: without it the install hint answers
        self.path = policy_path(self.kind, path, training_seed, plant)
        policy = load_policy(self.path, self.kind, device)
        self.meta, self.model, self.normalizer, self.network = policy
        self.action_mode: str = self.meta["action_mode"]
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = policy_env_kwargs(self.meta)
        self.context = context or ControlContext()
        self.spec = policy_spec(self.meta)
        self.inputs = policy_inputs(self, 1)
        self._k, self._held = 0, np.zeros(4)

    @classmethod
    def from_model(
        cls,
        model: Any,
        action_mode: str,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
        spec: FeatureSpec | None = None,
    ) -> PPOController:
        """Wrap an in-memory SB3 model (used by the training's evaluation callback)."""
        self = in_memory(cls, model, normalizer, action_repeat, spec)
        self.action_mode = action_mode
        self.context = ControlContext()
        self.inputs = policy_inputs(self, 1)
        self._k, self._held = 0, np.zeros(4)
        return self

    def reset(self, seed: int | None = None) -> None:
        """Restart the action-hold cycle and clear the inputs' memory (the network itself is
        stateless)."""
        self.reset_guard()
        self._k, self._held = 0, np.zeros(4)
        self.inputs.reset_rows()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic (mean) action in [-1, 1] for one raw observation.

        A new action is computed every ``action_repeat`` calls (first call after ``reset``
        included) and held in between, exactly as in training. A non-finite observation is
        answered by :meth:`policy` with the last action and does not count as a call
        (:class:`~residual_quad.controllers.base.ObservationGuard`).
        """
        if self._k % self.action_repeat == 0:
            self._held = self.decide(obs[None, :])[0]
        self._k += 1
        return self._held.copy()

    def decide(self, obs: np.ndarray, estimate: np.ndarray | None = None) -> np.ndarray:
        """New actions (1, a) for the raw observation ``obs`` (1, obs_dim) (and Δâ (1, 3) where
        the spec has the estimate), the last emitted action entering the history."""
        return observation_actions(self, obs, self.inputs, self._held[None, :], estimate)

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 4) in [-1, 1] of normalized feature rows ``x`` (n, d)."""
        return policy_actions(self.network, self.model, x)


def observation_actions(
    controller: Any,
    obs: np.ndarray,
    inputs: PolicyInputs | None = None,
    last_actions: np.ndarray | None = None,
    estimate: np.ndarray | None = None,
    rows: Any = slice(None),
) -> np.ndarray:
    """Deterministic actions (n, a) in [-1, 1] of a loaded ``ppo``/``ppo_res``/``ppo_adapt``
    controller for raw observations (n, obs_dim): the inputs (``inputs``' features of the envs
    ``rows``, with their last actions and Δâ; default: :func:`ppo_features` of each row), the
    controller's normalizer, one forward — the one path of the single and the batched
    controllers."""
    if inputs is None:
        x = np.stack([ppo_features(o) for o in obs])
    else:
        x = inputs.features(obs, last_actions, estimate, rows)
    if controller.normalizer is not None:
        x = controller.normalizer(x)
    return controller.actions(x)


def policy_inputs(controller: Any, n_envs: int) -> PolicyInputs:
    """The :class:`PolicyInputs` of a loaded controller for ``n_envs`` envs: its spec, its
    kind's action size, one decision every ``action_repeat`` control periods, the base features
    row by row (:func:`ppo_features`, as the shipped rows were flown)."""
    return PolicyInputs(
        controller.spec,
        n_envs,
        ACTION_DIMS[controller.kind],
        controller.context.control_dt * controller.action_repeat,
        rowwise=True,
    )


def in_memory(
    cls: type,
    model: Any,
    normalizer: ObsNormalizer | None,
    action_repeat: int,
    spec: FeatureSpec | None = None,
) -> Any:
    """A ``ppo``/``ppo_res``/``ppo_adapt`` controller of class ``cls`` around an in-memory SB3
    model (the training's evaluation callback), before its kind's own fields are set: no file,
    no record, no numpy forward (the model is still training: its own ``predict``)."""
    self = cls.__new__(cls)
    self.path, self.meta, self.model, self.normalizer = None, {}, model, normalizer
    self.network, self.env_kwargs, self.action_repeat = None, {}, int(action_repeat)
    self.spec = spec or FeatureSpec()
    return self


class BatchedPPOController(RowBatch):
    """``ppo`` for N envs around a loaded :class:`PPOController` ``controller`` (its network or
    model, normalizer and ``action_repeat``): per-env features, one forward for the envs due,
    per-env hold. With the numpy forward (:class:`NumpyPolicy`, every plain MLP actor) each row
    equals the single controller's bit for bit; otherwise SB3's batched ``predict`` runs, whose
    float32 rounding depends on the batch."""

    from_single = True  # built around the loaded single controller, not from the options

    def __init__(self, controller: PPOController, n_envs: int):
        self.single = controller
        self.n_envs = check_n_envs(n_envs)
        self.action_mode = controller.action_mode
        self.action_repeat = controller.action_repeat
        self._k = np.zeros(self.n_envs, dtype=np.int64)
        self._held = np.zeros((self.n_envs, 4))
        self.inputs = policy_inputs(controller, self.n_envs)
        hover = hover_action(self.action_mode, controller.context.airframe)
        self.guard = RowGuard(self.n_envs, hover)

    def _reset_rows(self, index: int | slice) -> None:
        self._k[index], self._held[index] = 0, 0.0
        self.inputs.reset_rows(index)
        self.guard.reset(index)

    def decide(
        self, obs: np.ndarray, estimate: np.ndarray | None = None, rows: Any = slice(None)
    ) -> np.ndarray:
        """New actions of the envs ``rows`` for their raw observations ``obs`` (and Δâ)."""
        held = self._held[rows]
        return observation_actions(self.single, obs, self.inputs, held, estimate, rows)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, bad = check_obs_batch(obs, self.n_envs)
        due = (self._k % self.action_repeat == 0) & ~bad  # a bad sample is no call
        if due.any():
            self._held[due] = self.decide(obs[due], None, np.flatnonzero(due))
        self._k += ~bad
        return self.guard.finish(self._held.copy(), bad)


PPOController.batched = BatchedPPOController


class BatchedSACController(BatchedPPOController):
    """``sac`` for N envs: :class:`BatchedPPOController` (the same hold and forward)."""


class BatchedTQCController(BatchedPPOController):
    """``tqc`` for N envs: :class:`BatchedPPOController` (the same hold and forward)."""


class SACController(PPOController):
    """``sac``: a policy file trained by ``rquad train sac`` [SAC] — the ``ppo`` controller's
    options, hold and batched twin; its deterministic action is ``tanh`` of the actor's mean.
    No SAC policy is shipped: ``path`` is needed."""

    kind = "sac"
    batched = BatchedSACController
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="SAC with SB3-zoo-like defaults, untuned here; its budget in the policy file "
        "(docs/ppo.md)",
        learned="policy",
        action="rotor thrusts",
    )


class TQCController(PPOController):
    """``tqc``: a policy file trained by ``rquad train tqc`` [TQC] (sb3-contrib), flown as
    :class:`SACController` (the same actor)."""

    kind = "tqc"
    batched = BatchedTQCController
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="TQC with SB3-zoo-like defaults, untuned here; its budget in the policy file "
        "(docs/ppo.md)",
        learned="policy",
        action="rotor thrusts",
    )


def controller_class(kind: str) -> type[PPOController]:
    """The controller class flying env-action policies of ``kind`` (``ppo``, ``sac``, ``tqc``)."""
    return {"ppo": PPOController, "sac": SACController, "tqc": TQCController}[kind]
