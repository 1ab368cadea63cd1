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

from residual_quad.controllers.base import ControlContext, ObservationGuard
from residual_quad.controllers.features import (
    FEATURE_DIM,
    FEATURE_NAMES,
    ppo_features,
    ppo_features_batch,
)
from residual_quad.controllers.options import Domain, Integer, Optional, Text
from residual_quad.controllers.policy_file import (
    INSTALL_HINT,
    NumpyPolicy,
    ObsNormalizer,
    PolicyFileError,
    default_policy_path,
    load_policy,
    policy_actions,
    policy_path,
    read_meta,
    shipped_policy_path,
)

__all__ = [
    "FEATURE_DIM",
    "FEATURE_NAMES",
    "INSTALL_HINT",
    "NumpyPolicy",
    "ObsNormalizer",
    "PPOController",
    "PolicyFileError",
    "default_policy_path",
    "in_memory",
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

    ``action_mode`` is the mode the policy was trained in: fly it in an env made with the same
    ``action_mode`` (:func:`residual_quad.episode.run_episode` does this by itself) and
    the other ``env_kwargs`` it was trained with (``{}`` for the shipped policy). The policy acts
    every ``action_repeat`` control periods and holds its action in between (zero-order hold), so
    :meth:`reset` must be called at the start of each episode.
    """

    OPTIONS: dict[str, Domain] = POLICY_OPTIONS

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
    ):
        self.path = policy_path("ppo", path, training_seed)
        policy = load_policy(self.path, "ppo", device)
        self.meta, self.model, self.normalizer, self.network = policy
        self.action_mode: str = self.meta["action_mode"]
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = dict(self.meta.get("env_kwargs", {}))
        self.context = context or ControlContext()
        self._k, self._held = 0, np.zeros(4)

    @classmethod
    def from_model(
        cls,
        model: Any,
        action_mode: str,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
    ) -> PPOController:
        """Wrap an in-memory SB3 model (used by the training's evaluation callback)."""
        self = in_memory(cls, model, normalizer, action_repeat)
        self.action_mode = action_mode
        self.context = ControlContext()
        self._k, self._held = 0, np.zeros(4)
        return self

    def reset(self, seed: int | None = None) -> None:
        """Restart the action-hold cycle (the network itself is stateless)."""
        self.reset_guard()
        self._k, self._held = 0, np.zeros(4)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic (mean) action in [-1, 1] for one raw observation.

        A new action is computed every ``action_repeat`` calls (first call after ``reset``
        included) and held in between, exactly as in training. A non-finite observation is
        answered by :meth:`policy` with the last action and does not count as a call
        (:class:`~residual_quad.controllers.base.ObservationGuard`).
        """
        if self._k % self.action_repeat == 0:
            x = ppo_features(obs)
            if self.normalizer is not None:
                x = self.normalizer(x)
            self._held = self.actions(x[None, :])[0]
        self._k += 1
        return self._held.copy()

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 4) in [-1, 1] of normalized feature rows ``x`` (n, d)."""
        return policy_actions(self.network, self.model, x)


def in_memory(cls: type, model: Any, normalizer: ObsNormalizer | None, action_repeat: int) -> Any:
    """A ``ppo``/``ppo_res`` controller of class ``cls`` around an in-memory SB3 model (the
    training's evaluation callback), before its kind's own fields are set: no file, no record,
    no numpy forward (the model is still training: its own ``predict``)."""
    self = cls.__new__(cls)
    self.path, self.meta, self.model, self.normalizer = None, {}, model, normalizer
    self.network, self.env_kwargs, self.action_repeat = None, {}, int(action_repeat)
    return self
