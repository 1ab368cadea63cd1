"""PPO policy adapter: a trained stable-baselines3 model as a control law.

The policy file (one SB3 ``.zip`` with its ``residual_quad.json`` record: action mode, action
repeat, observation normalization, training record) is read, checked and written by
:mod:`residual_quad.controllers.policy_file`; the policy sees
:func:`~residual_quad.controllers.features.ppo_features` of the raw observation — the same
function the training wrapper uses — so training and deployment can never disagree on the input.
Both are re-exported here under their established names. ``ppo``, ``sac`` and ``tqc`` are
:class:`~residual_quad.controllers.law.Law`\\ s: one vehicle and a batch are the same law run by
the driver (:mod:`residual_quad.controllers.driver`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.driver import LawController
from residual_quad.controllers.features import (
    FEATURE_DIM,
    FEATURE_NAMES,
    ppo_features,
    ppo_features_batch,
    ppo_features_rows,
)
from residual_quad.controllers.law import Law
from residual_quad.controllers.numpy_policy import NumpyPolicy
from residual_quad.controllers.obs_norm import ObsNormalizer
from residual_quad.controllers.options import Choice, Domain, Integer, Optional, Text
from residual_quad.controllers.policy_file import (
    ACTION_DIMS,
    INSTALL_HINT,
    POLICY_ALGOS,
    SHIPPED_PLANTS,
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
from residual_quad.controllers.policy_inputs import FeatureSpec, InputsState, PolicyFeatures
from residual_quad.envs.observation import OBS_DIM

__all__ = [
    "FEATURE_DIM",
    "FEATURE_NAMES",
    "INSTALL_HINT",
    "NumpyPolicy",
    "ObsNormalizer",
    "PPOController",
    "PolicyFileError",
    "PolicyState",
    "SACController",
    "TQCController",
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


class PolicyState(NamedTuple):
    """The state of a policy law (``ppo``, ``sac``, ``tqc``, ``ppo_adapt``), one row per env."""

    k: np.ndarray  # (n,) int: control periods since reset (a decision when k % repeat == 0)
    held: np.ndarray  # (n, 4): the action being held (zeros before the first decision)
    inputs: InputsState  # the policy inputs' memory (action history, error integral)
    estimator: Any = None  # ``ppo_adapt``'s residual estimator


def due_rows(k: np.ndarray, action_repeat: int) -> Any:
    """The envs whose policy decides now (``k % action_repeat == 0``): all (``slice(None)``),
    none (``None``) or their indices."""
    due = k % action_repeat == 0
    if due.all():
        return slice(None)
    return np.flatnonzero(due) if due.any() else None


class PPOController(Law):
    """``ppo``: deterministic actions of a saved PPO policy (see the module docstring for the
    file format).

    Args:
        context: unused (the policy was trained on the nominal airframe at 100 Hz); kept for the
            registry's ``factory(context, **overrides)`` call.
        path: a policy ``.zip`` written by ``rquad train ppo``; default: the shipped policy.
        device: torch device for inference (``"cpu"``).
        training_seed: fly the shipped policy of this training seed instead (0: the default;
            ``ppo:training_seed=1`` in a sweep); not together with ``path``.
        plant: fly the shipped policy retrained for this plant (``realistic``: the
            ``realistic`` preset, ``ppo:plant=realistic``; default ``ideal``); not with ``path``.

    The policy's input is :class:`~residual_quad.controllers.policy_inputs.PolicyFeatures` of
    the file's feature spec (:attr:`spec`; the base features for a file without one), whose
    memory (the history holds the actions this controller emitted — the held one with action
    repeat — and the error integral) is the state's ``inputs`` (:class:`PolicyState`).

    ``action_mode`` is the mode the policy was trained in: fly it in an env made with the same
    ``action_mode`` (:func:`residual_quad.episode.run_episode` does this by itself) and
    the other ``env_kwargs`` it was trained with (``{}`` for the shipped policy). The policy acts
    every ``action_repeat`` control periods (the first after a reset included) and holds its
    action in between (zero-order hold), exactly as in training; a bad sample, answered by the
    driver with the held action, is no call.

    The forward is :class:`NumpyPolicy` (one row and a batch bit for bit). Where only SB3's
    ``predict`` reads the architecture, :meth:`actions` runs it one row at a time — its float32
    batch products round with the batch size — so each env of a batch acts as it would alone.
    One vehicle (:meth:`init_one`, :meth:`act_one`) keeps the cycle as a Python int and the
    inputs' memory as a batch of one.
    """

    OPTIONS: dict[str, Domain] = POLICY_OPTIONS
    kind = "ppo"  # the policy kind it flies (the record's ``controller``)
    name = "ppo"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="PPO's update size: a first policy and 3 tries; the learning rate's end: 2 tries; "
        "the recipe (reward, inputs, scenarios, episode lengths, masses, exploration, tilt "
        "limit): 9 tries of 3–6 M steps, then 8 not shipped (tilt limits, faster shapes, a "
        "focus draw, 100 Hz, a gain penalty), then 6 not shipped (the reward's smoothness "
        "weight, the rate's end twice, a smaller gain penalty, a longer schedule) and a check "
        "of checkpoints, then 3 not shipped (a low-rate polish), then 19 not shipped (focus "
        "draws on light vehicles in gusts, alone and with heavy starts, at 3 and 5 M steps; a "
        "privileged critic), then 18 not shipped (a third focus, an alive floor, 7 M steps, a "
        "45° tilt limit), then the shipped one (weaker motors in training: 5 runs); "
        "docs/ppo.md",
        learned="policy",
        action="rotor thrusts",
        tuning_trials=75,
    )

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        algo_module(POLICY_ALGOS[self.kind][0])  # first: without it the install hint answers
        self.path = policy_path(self.kind, path, training_seed, plant)
        policy = load_policy(self.path, self.kind, device)
        self.meta, self.model, self.normalizer, self.network = policy
        self.action_mode: str = self.meta["action_mode"]
        self.action_repeat = int(self.meta.get("action_repeat", 1))
        self.env_kwargs: dict[str, Any] = policy_env_kwargs(self.meta)
        self.context = context or ControlContext()
        self.spec = policy_spec(self.meta)
        self.inputs = policy_inputs(self)
        self.loaded()

    @classmethod
    def from_model(
        cls,
        model: Any,
        action_mode: str,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
        spec: FeatureSpec | None = None,
        record: dict[str, Any] | None = None,
    ) -> LawController:
        """The controller of an in-memory SB3 model (the training's evaluation callback): no
        file, the model's own ``predict``; ``record``: the entries of a policy file's record
        its kind reads (``ppo_adapt``'s ``estimate_feedforward``)."""
        self = in_memory(cls, model, normalizer, action_repeat, spec, record)
        self.action_mode = action_mode
        self.context = ControlContext()
        self.inputs = policy_inputs(self)
        self.loaded()
        return LawController(self)

    def loaded(self) -> None:
        """What a kind sets up once its policy is loaded (from a file or a model): nothing."""

    def init_state(self, n: int) -> PolicyState:
        return PolicyState(
            k=np.zeros(n, dtype=np.int64),
            held=np.zeros((n, 4)),
            inputs=self.inputs.init_state(n),
        )

    def init_one(self) -> PolicyState:
        # the cycle as a Python int, the held action (4,), the inputs' memory as a batch of one
        # (the feature builder is array code)
        return PolicyState(k=0, held=np.zeros(4), inputs=self.inputs.init_state(1))

    def act(self, state: PolicyState, obs: np.ndarray) -> tuple[PolicyState, np.ndarray]:
        """Deterministic (mean) actions in [-1, 1]: new for the envs due, held by the others."""
        rows = due_rows(state.k, self.action_repeat)
        if rows is not None:
            state.held[rows] = self.decide(state, obs[rows], None, rows)
        state.k[...] += 1
        return state, state.held.copy()

    def act_one(self, state: PolicyState, obs: np.ndarray) -> tuple[PolicyState, np.ndarray]:
        held = state.held
        if state.k % self.action_repeat == 0:
            held = observation_actions(self, obs[None, :], state.inputs, held[None, :])[0]
        return state._replace(k=state.k + 1, held=held), held.copy()

    def forget_one(self, state: PolicyState) -> PolicyState:
        return state

    def decide(
        self,
        state: PolicyState,
        obs: np.ndarray,
        estimate: np.ndarray | None = None,
        rows: Any = slice(None),
    ) -> np.ndarray:
        """New actions of the envs ``rows`` for their raw observations ``obs`` (and Δâ), their
        last emitted action entering the history (their inputs' memory advances in place)."""
        return observation_actions(self, obs, state.inputs, state.held[rows], estimate, rows)

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, a) in [-1, 1] of normalized feature rows ``x`` (n, d)."""
        return rowwise_actions(self.network, self.model, x)


def rowwise_actions(network: NumpyPolicy | None, model: Any, x: np.ndarray) -> np.ndarray:
    """:func:`~residual_quad.controllers.policy_file.policy_actions`, with SB3's ``predict``
    one row at a time (the numpy forward is batch-invariant; ``predict``'s float32 products are
    not, and each env must act as it would alone)."""
    if network is not None or len(x) == 1:
        return policy_actions(network, model, x)
    return np.concatenate([policy_actions(None, model, x[i : i + 1]) for i in range(len(x))])


def observation_actions(
    law: Any,
    obs: np.ndarray,
    inputs: InputsState | None = None,
    last_actions: np.ndarray | None = None,
    estimate: np.ndarray | None = None,
    rows: Any = slice(None),
) -> np.ndarray:
    """Deterministic actions (n, a) in [-1, 1] of a loaded ``ppo``/``ppo_res``/``ppo_adapt``
    law for raw observations (n, obs_dim): the inputs (the law's features over the memory
    ``inputs`` of the envs ``rows``, advanced in place, with their last actions and Δâ;
    default: :func:`ppo_features` of each row), the law's normalizer, one forward — the one
    path of one vehicle and a batch."""
    if inputs is None:
        x = ppo_features_rows(np.asarray(obs, dtype=np.float64)[:, :OBS_DIM])
    else:
        _, x = law.inputs.features(inputs, obs, last_actions, estimate, rows)
    if law.normalizer is not None:
        x = law.normalizer(x)
    return law.actions(x)


def policy_inputs(law: Any) -> PolicyFeatures:
    """The :class:`PolicyFeatures` of a loaded law: its spec, its kind's action size, one
    decision every ``action_repeat`` control periods, the base features row by row
    (:func:`ppo_features`, as the shipped rows were flown)."""
    return PolicyFeatures(
        law.spec,
        ACTION_DIMS[law.kind],
        law.context.control_dt * law.action_repeat,
        rowwise=True,
    )


def in_memory(
    cls: type,
    model: Any,
    normalizer: ObsNormalizer | None,
    action_repeat: int,
    spec: FeatureSpec | None = None,
    record: dict[str, Any] | None = None,
) -> Any:
    """A ``ppo``/``ppo_res``/``ppo_adapt`` law of class ``cls`` around an in-memory SB3 model
    (the training's evaluation callback), before its kind's own fields are set: no file, the
    ``record`` entries its kind reads (default none), no numpy forward (the model is still
    training: its own ``predict``)."""
    self = cls.__new__(cls)
    self.path, self.meta, self.model, self.normalizer = None, dict(record or {}), model, normalizer
    self.network, self.env_kwargs, self.action_repeat = None, {}, int(action_repeat)
    self.spec = spec or FeatureSpec()
    return self


class SACController(PPOController):
    """``sac``: a policy file trained by ``rquad train sac`` [SAC] — the ``ppo`` law's options
    and hold; its deterministic action is ``tanh`` of the actor's mean. No SAC policy is
    shipped: ``path`` is needed."""

    kind = "sac"
    name = "sac"
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
    name = "tqc"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="TQC with SB3-zoo-like defaults, untuned here; its budget in the policy file "
        "(docs/ppo.md)",
        learned="policy",
        action="rotor thrusts",
    )


def controller_class(kind: str) -> type[PPOController]:
    """The law flying env-action policies of ``kind`` (``ppo``, ``sac``, ``tqc``)."""
    return {"ppo": PPOController, "sac": SACController, "tqc": TQCController}[kind]
