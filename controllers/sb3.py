"""Any stable-baselines3 policy behind the :class:`Controller` interface (controller ``sb3``).

One adapter flies a zip saved by ``model.save(...)`` of any of :data:`ALGORITHMS` (PPO, SAC, TD3,
A2C, DDPG) [SB3], optionally with the ``VecNormalize`` statistics saved next to it by
``VecNormalize.save(...)``. The conventions a policy must follow (``docs/rl_policies.md``):

* **observation** — by default the raw ``ResidualQuad-v0`` observation (a ``Box`` of
  :data:`~residual_quad.envs.observation.OBS_DIM` = 36 entries, named by ``ObsLayout``), i.e. a
  policy trained on ``gym.make("ResidualQuad-v0", ...)`` as it is; ``observation="ppo_features"``
  flies a policy trained on :func:`residual_quad.controllers.features.ppo_features` instead;
* **action** — ``Box(-1, 1, (4,))``, the env's action space in both action modes; the mode is
  the ``action_mode`` option, else the ``action_mode`` of a ``residual_quad.json`` entry in the
  zip (:func:`write_action_mode` adds it), else ``rotor``.

A zip for other spaces (another shape, non-``Box`` spaces, bounds other than ±1), an algorithm
that is not one of :data:`ALGORITHMS`, a missing or corrupt zip or statistics file are refused at
load time with an :class:`SB3PolicyError` (a ``ValueError``) naming the file and what is wrong.
stable-baselines3 and torch are imported lazily; without them the error carries the install hint.
"""

from __future__ import annotations

import importlib
import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, InformationUse, ObservationGuard
from residual_quad.controllers.features import FEATURE_DIM, ppo_features
from residual_quad.controllers.options import Choice, Domain, Flag, Optional, Text
from residual_quad.controllers.policy_file import (
    MAX_META_BYTES,
    META_ENTRY,
    PolicyFileError,
    import_sb3,
    read_json_entries,
    write_entry,
)
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.observation import OBS_DIM

#: the stable-baselines3 algorithms the adapter loads (class names in ``stable_baselines3``)
ALGORITHMS: tuple[str, ...] = ("PPO", "SAC", "TD3", "A2C", "DDPG")
ACTION_DIM = 4
SB3_PURPOSE = "the 'sb3' controller"  # what needs stable-baselines3, in the install hint
MAX_DATA_BYTES = 64 * 2**20  # SB3's ``data`` entry (JSON) is a few kB to a few MB
MAX_HINT_BYTES = MAX_META_BYTES  # its residual_quad.json hints, if any


def _raw(obs: np.ndarray) -> np.ndarray:
    """The env observation unchanged (the default contract)."""
    return np.asarray(obs, dtype=np.float64)


#: observation contract name → (map from the env observation, its length)
OBSERVATIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int]] = {
    "raw": (_raw, OBS_DIM),
    "ppo_features": (ppo_features, FEATURE_DIM),
}

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


class SB3PolicyError(PolicyFileError):
    """A stable-baselines3 policy or statistics file is missing, unreadable or for other spaces
    (the message names the file)."""


def _existing(path: str | Path, what: str) -> Path:
    """``path`` (or ``path.zip`` for a model, as SB3's ``load`` does) if it is a file."""
    p = Path(path)
    if not p.is_file() and what == "policy" and p.suffix != ".zip":
        zipped = p.with_name(p.name + ".zip")
        if zipped.is_file():
            return zipped
    if p.is_dir():
        raise SB3PolicyError(f"stable-baselines3 {what} file {p} is a directory, not a file")
    if not p.is_file():
        raise SB3PolicyError(f"stable-baselines3 {what} file not found: {p}")
    return p


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``data`` record of an SB3 zip and its ``residual_quad.json`` hints (``{}`` if none)."""
    not_sb3 = (
        f"{path} is a zip archive but not a stable-baselines3 model (no 'data' and 'policy.pth' "
        "entries; save models with model.save(...))"
    )
    entries = read_json_entries(
        path,
        {"data": MAX_DATA_BYTES, META_ENTRY: MAX_HINT_BYTES},
        ("data", "policy.pth"),
        not_sb3,
        "stable-baselines3 model",
        SB3PolicyError,
    )
    data, hints = entries["data"], entries.get(META_ENTRY, {})
    if not isinstance(data, dict) or not isinstance(hints, dict):
        raise SB3PolicyError(
            f"{path}: 'data' and '{META_ENTRY}' must hold JSON objects (not a stable-baselines3 "
            "model)"
        )
    return data, hints


def detect_algorithm(data: dict[str, Any], path: str | Path) -> str:
    """The algorithm (one of :data:`ALGORITHMS`) that saved an SB3 ``data`` record.

    The policy class's module tells SAC and TD3/DDPG apart from the actor-critic pair PPO/A2C;
    within a pair the saved hyperparameters decide: PPO records a ``clip_range`` (A2C does not),
    and DDPG is TD3 with ``policy_delay`` 1 and no target-policy noise clip. (A TD3 saved with
    those two settings reads as DDPG: the networks are the same, so it flies the same.)
    """
    policy_class = data.get("policy_class")
    module = policy_class.get("__module__") if isinstance(policy_class, dict) else None
    if not isinstance(module, str) or not module.startswith("stable_baselines3."):
        raise SB3PolicyError(
            f"{path}: cannot tell which stable-baselines3 algorithm saved it (policy class from "
            f"{module!r}); supported: {', '.join(ALGORITHMS)} — name it with algo=..."
        )
    family = module.split(".")[1]
    if family == "sac":
        return "SAC"
    if family in ("td3", "ddpg"):
        ddpg = data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0
        return "DDPG" if ddpg else "TD3"
    if family in ("common", "ppo", "a2c"):
        return "PPO" if "clip_range" in data else "A2C"
    raise SB3PolicyError(
        f"{path}: saved by stable-baselines3 algorithm family {family!r}, which this adapter "
        f"does not fly; supported: {', '.join(ALGORITHMS)}"
    )


def write_action_mode(path: str | Path, action_mode: str) -> None:
    """Record the env ``action_mode`` a policy was trained in, in its SB3 zip (an extra
    ``residual_quad.json`` entry that SB3's ``load`` ignores), so that ``sb3:PATH`` flies it in
    that mode without an option."""
    if action_mode not in ACTION_MODES:
        raise ValueError(
            f"unknown action_mode {action_mode!r}; valid choices: {', '.join(ACTION_MODES)}"
        )
    path = _existing(path, "policy")
    _, hints = _read_archive(path)
    write_entry(path, {**hints, "action_mode": action_mode})


def _flag(name: str, value: Any) -> bool:
    """A boolean option given as a bool or as text (``true``/``false``, ``1``/``0``, ...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"sb3 option {name}={value!r} is not a boolean; valid: true, false")


def load_vecnormalize(path: str | Path, obs_dim: int) -> Any:
    """A frozen ``VecNormalize`` from its ``VecNormalize.save`` pickle, checked: statistics of
    ``obs_dim`` finite entries with ``var ≥ 0``, finite ``epsilon ≥ 0`` with ``var + epsilon > 0``,
    finite ``clip_obs > 0``. Statistics are never updated and rewards are not normalized.

    The file is a pickle: load statistics only from a source you trust.
    """
    import_sb3(SB3_PURPOSE)
    vec_normalize_cls = importlib.import_module("stable_baselines3.common.vec_env").VecNormalize
    path = _existing(path, "VecNormalize statistics")
    try:
        with open(path, "rb") as handle:
            stats = pickle.load(handle)  # noqa: S301 - SB3's own format (VecNormalize.load)
    except Exception as exc:  # noqa: BLE001 - unpickling raises anything for bad bytes
        raise SB3PolicyError(
            f"corrupt or unreadable VecNormalize statistics {path}: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(stats, vec_normalize_cls):
        raise SB3PolicyError(
            f"{path} holds a {type(stats).__name__}, not VecNormalize statistics (save them with "
            "VecNormalize.save(...))"
        )

    def fail(what: str) -> SB3PolicyError:
        return SB3PolicyError(f"VecNormalize statistics {path}: {what}")

    stats.training, stats.norm_reward = False, False
    if not getattr(stats, "norm_obs", False):
        return stats  # normalize_obs is the identity, as in SB3
    rms = getattr(stats, "obs_rms", None)
    if isinstance(rms, dict):
        raise fail("statistics of a Dict observation space; the policy's must be a Box")
    try:
        mean = np.asarray(rms.mean, dtype=np.float64)
        var = np.asarray(rms.var, dtype=np.float64)
        eps, clip = float(stats.epsilon), float(stats.clip_obs)
    except Exception as exc:  # noqa: BLE001 - a tampered object may lack or mistype anything
        raise fail(f"unreadable statistics ({type(exc).__name__}: {exc})") from None
    if mean.shape != (obs_dim,) or var.shape != (obs_dim,):
        raise fail(
            f"statistics for observations of shape {mean.shape}, the policy sees ({obs_dim},)"
        )
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var >= 0)):
        raise fail("mean and var must be finite with var >= 0")
    if not (math.isfinite(eps) and eps >= 0 and np.all(var + eps > 0)):
        raise fail(f"epsilon must be finite, >= 0 and make var + epsilon > 0, got {eps!r}")
    if not (math.isfinite(clip) and clip > 0):
        raise fail(f"clip_obs must be a finite number > 0, got {clip!r}")
    return stats


class SB3Policy(ObservationGuard):
    """Actions of a saved stable-baselines3 policy (the conventions are in the module docstring).

    Args:
        context: unused (the policy fixed what it knows in training); kept for the registry's
            ``factory(context, **options)`` call.
        path: the model's ``.zip`` (``model.save(path)``; ``.zip`` may be left out, as in SB3).
        vecnormalize: the ``VecNormalize.save`` pickle the policy was trained with, or ``None``;
            its observation normalization is applied frozen, exactly as SB3 applies it.
        algo: one of :data:`ALGORITHMS` (any case), or ``None`` to read it from the zip.
        deterministic: the mean/greedy action (``True``), or a sample of the policy's
            distribution, reproducible per ``reset(seed)`` (it seeds torch's global generator).
        action_mode: the env action mode the policy acts in (overrides the zip's hint).
        observation: one of :data:`OBSERVATIONS` — what the policy was trained on.

    The model is loaded on the CPU. ``reset`` keeps no state for deterministic policies.
    """

    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="a user's policy: its record's budget, else unknown",
        learned="policy",
        action="the env's action (its action_mode)",
    )
    OPTIONS: dict[str, Domain] = {
        "path": Text("a stable-baselines3 .zip path", (Path,)),
        "vecnormalize": Optional(Text("a VecNormalize .pkl path", (Path,))),
        "algo": Optional(Choice(ALGORITHMS, fold=True)),
        "deterministic": Flag(),
        "action_mode": Optional(Choice(ACTION_MODES)),
        "observation": Choice(tuple(OBSERVATIONS)),
    }

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        *,
        vecnormalize: str | Path | None = None,
        algo: str | None = None,
        deterministic: bool | str = True,
        action_mode: str | None = None,
        observation: str = "raw",
    ):
        sb3 = import_sb3(SB3_PURPOSE)  # first: without SB3 the install hint is the useful answer
        if path is None:
            raise ValueError("the sb3 controller needs path=MODEL.zip (e.g. sb3:runs/sac.zip)")
        if observation not in OBSERVATIONS:
            raise ValueError(
                f"unknown sb3 observation {observation!r}; valid choices: {', '.join(OBSERVATIONS)}"
            )
        if action_mode is not None and action_mode not in ACTION_MODES:
            raise ValueError(
                f"unknown sb3 action_mode {action_mode!r}; valid choices: {', '.join(ACTION_MODES)}"
            )
        self.deterministic = _flag("deterministic", deterministic)
        self.context = context or ControlContext()
        self.path = _existing(path, "policy")
        data, hints = _read_archive(self.path)
        if "feature_version" in hints:
            kind = hints.get("controller", "ppo")
            raise SB3PolicyError(
                f"{self.path} is a residual-quad PPO policy file (its own features, frozen "
                f"normalization and action hold): fly it with the {kind!r} controller"
            )
        if algo is None:
            self.algo = detect_algorithm(data, self.path)
        elif isinstance(algo, str) and algo.upper() in ALGORITHMS:
            self.algo = algo.upper()
        else:
            raise ValueError(f"unknown sb3 algo {algo!r}; valid choices: {', '.join(ALGORITHMS)}")
        self.action_mode: str = self._action_mode(action_mode, hints)
        self.observation = observation
        self._features, obs_dim = OBSERVATIONS[observation]
        try:
            self.model = getattr(sb3, self.algo).load(self.path, device="cpu")
        except Exception as exc:  # noqa: BLE001 - SB3/torch raise many types for a broken file
            raise SB3PolicyError(
                f"cannot load {self.path} as a stable-baselines3 {self.algo} model: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        self._check_spaces(obs_dim)
        if not all(bool(p.isfinite().all()) for p in self.model.policy.parameters()):
            raise SB3PolicyError(f"{self.path}: the policy network has non-finite parameters")
        self.normalizer = load_vecnormalize(vecnormalize, obs_dim) if vecnormalize else None
        self.vecnormalize = None if vecnormalize is None else Path(vecnormalize)

    def _action_mode(self, option: str | None, hints: dict[str, Any]) -> str:
        """The option, else the zip's hint, else ``rotor``; a conflict of the two is an error."""
        hint = hints.get("action_mode")
        if hint is not None and hint not in ACTION_MODES:
            raise SB3PolicyError(
                f"{self.path}: {META_ENTRY} names action_mode {hint!r}; valid choices: "
                f"{', '.join(ACTION_MODES)}"
            )
        if option is not None and hint is not None and option != hint:
            raise SB3PolicyError(
                f"action-mode mismatch: {self.path} was trained in action_mode {hint!r}, the "
                f"sb3 option asks for {option!r}"
            )
        return option or hint or "rotor"

    def _check_spaces(self, obs_dim: int) -> None:
        """Refuse a policy trained on other observation or action spaces, naming the file."""
        gym_spaces = importlib.import_module("gymnasium.spaces")
        obs_space, act_space = self.model.observation_space, self.model.action_space
        raw = self.observation == "raw"
        what = "the raw ResidualQuad-v0 observation" if raw else "ppo_features"
        expected = f"{what}, a Box of shape ({obs_dim},)"
        if not isinstance(obs_space, gym_spaces.Box) or obs_space.shape != (obs_dim,):
            note = ""
            if isinstance(obs_space, gym_spaces.Box) and obs_space.shape == (FEATURE_DIM,):
                note = "; trained on ppo_features? add observation=ppo_features"
            raise SB3PolicyError(
                f"{self.path} was trained on observation space {obs_space}, the sb3 controller "
                f"expects {expected}{note}"
            )
        box = isinstance(act_space, gym_spaces.Box) and act_space.shape == (ACTION_DIM,)
        if not box or not (np.all(act_space.low == -1.0) and np.all(act_space.high == 1.0)):
            raise SB3PolicyError(
                f"{self.path} acts in action space {act_space}, the sb3 controller expects "
                f"Box(-1.0, 1.0, ({ACTION_DIM},)) (the ResidualQuad-v0 action space)"
            )

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """The policy's input for one env observation: the observation contract's map, then
        the frozen ``VecNormalize.normalize_obs`` if statistics were given."""
        x = self._features(obs)
        if self.normalizer is not None:
            x = self.normalizer.normalize_obs(x)
        return x

    def reset(self, seed: int | None = None) -> None:
        """Nothing to restore for a deterministic policy (but the held action); a stochastic one
        reseeds torch."""
        self.reset_guard()
        if not self.deterministic and seed is not None:
            importlib.import_module("torch").manual_seed(seed)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The policy's action (float64, in [-1, 1]) for one raw ``ResidualQuad-v0`` observation
        (a non-finite one is answered by :meth:`policy` with the last action)."""
        action, _ = self.model.predict(self.observe(obs), deterministic=self.deterministic)
        return np.asarray(action, dtype=np.float64).reshape(ACTION_DIM)
