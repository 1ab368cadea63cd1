"""What a PPO policy sees beyond :func:`~residual_quad.controllers.features.ppo_features`: the
feature spec (:class:`FeatureSpec`), the builder over an explicit memory (:class:`PolicyFeatures`,
:class:`InputsState`) and training's builder holding the memory of its envs (:class:`PolicyInputs`).

The base features are memoryless. Published RL trackers that reach a few centimetres add memory
— the last actions [L2F], an adaptation signal [RMA] — or a model-based disturbance estimate fed
to the policy [DATT]. A :class:`FeatureSpec` appends, in this order:

* ``preview_k`` future reference points the env supplies (``preview_features`` of
  :mod:`residual_quad.controllers.features`, 6 values each; the env option ``preview``);
* ``action_history``: the last H actions the policy emitted, newest first, in action units
  [-1, 1] (zeros after a reset): what the rotors were asked for, which the base features show
  only through the thrusts of the last period;
* ``error_integral``: a leaky integral of the heading-frame position error, normalized by its
  time constant — ``z_k = λ·z_{k−1} + (1 − λ)·e_k``, ``λ = exp(−T/τ)`` with ``T`` the decision
  period and τ = :data:`INTEGRAL_TAU_S` — clipped to ±:data:`INTEGRAL_CLIP_M` per axis: the
  steady error a constant disturbance leaves, which a memoryless policy cannot see;
* ``estimate``: the residual acceleration estimate Δâ (``geo_rls``'s RLS estimator, run in the
  loop by ``ppo_adapt`` and ``ppo_res``; world frame) rotated into the heading frame and
  divided by :data:`ESTIMATE_SCALE`.

The empty spec adds nothing: its features are today's, bit for bit, and so is every policy file
without a ``features`` record.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.features import (
    FEATURE_NAMES,
    ppo_features_batch,
    ppo_features_rows,
)
from residual_quad.envs.observation import OBS_DIM, is_observation_width
from residual_quad.envs.observation import ObsLayout as L

INTEGRAL_TAU_S = 2.0  # s, time constant of the error integral's leak
INTEGRAL_CLIP_M = 1.0  # m, bound of the (τ-normalized) error integral per axis
ESTIMATE_SCALE = 5.0  # m/s², Δâ that maps to 1 (the reference acceleration's scale)
PREVIEW_WIDTH = 6  # values per preview point (preview_features)
MAX_PREVIEW_K = 64  # preview points a spec may ask for
MAX_ACTION_HISTORY = 64  # actions a spec may remember
RECORD_KEYS = ("preview_k", "action_history", "error_integral", "estimate")


class LayoutError(ValueError):
    """Observations of another layout than the one a policy was trained on (names both)."""


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True)
class FeatureSpec:
    """Which features a PPO policy sees beyond the base ones (module docstring).

    ``preview_k``: preview points (0 … :data:`MAX_PREVIEW_K`); ``action_history``: remembered
    actions (0 … :data:`MAX_ACTION_HISTORY`); ``error_integral``, ``estimate``: on/off. The
    default spec is today's input.
    """

    preview_k: int = 0  # reference points ahead the env supplies
    action_history: int = 0  # last actions, newest first
    error_integral: bool = False  # leaky integral of the heading-frame position error
    estimate: bool = False  # residual estimate Δâ, heading frame (ppo_adapt, ppo_res)

    def __post_init__(self) -> None:
        for key, top in (("preview_k", MAX_PREVIEW_K), ("action_history", MAX_ACTION_HISTORY)):
            value = getattr(self, key)
            if not _is_int(value) or not 0 <= value <= top:
                raise ValueError(f"features.{key} must be an integer in [0, {top}], got {value!r}")
        for key in ("error_integral", "estimate"):
            value = getattr(self, key)
            if not isinstance(value, bool):
                raise ValueError(f"features.{key} must be true or false, got {value!r}")

    @property
    def empty(self) -> bool:
        """Whether the spec adds nothing (today's features)."""
        return self == FeatureSpec()

    def dim(self, action_dim: int = 4) -> int:
        """Input size of a policy with ``action_dim`` actions."""
        return len(self.names(action_dim))

    def names(self, action_dim: int = 4) -> tuple[str, ...]:
        """The feature names in input order (base :data:`FEATURE_NAMES` first)."""
        extra: list[str] = []
        extra += [f"preview_{i}_{j}" for i in range(self.preview_k) for j in range(PREVIEW_WIDTH)]
        extra += [f"action_{t}_{j}" for t in range(self.action_history) for j in range(action_dim)]
        if self.error_integral:
            extra += [f"int_e_p_{a}" for a in "xyz"]
        if self.estimate:
            extra += [f"est_a_{a}" for a in "xyz"]
        return (*FEATURE_NAMES, *extra)

    def layout_name(self, action_dim: int = 4) -> str:
        """Readable name of the input layout with its size, e.g. ``base + history 4 (51)``."""
        parts = ["base"]
        if self.preview_k:
            parts.append(f"preview {self.preview_k}")
        if self.action_history:
            parts.append(f"history {self.action_history}")
        if self.error_integral:
            parts.append("integral")
        if self.estimate:
            parts.append("estimate")
        return f"{' + '.join(parts)} ({self.dim(action_dim)})"

    def to_record(self) -> dict[str, Any]:
        """The policy file's ``features`` record (JSON object), without the preview width: the
        file records the preview once, as the ``[K, dt]`` of its ``env_kwargs.preview``."""
        return {key: getattr(self, key) for key in RECORD_KEYS if key != "preview_k"}

    @classmethod
    def from_record(cls, record: Any, preview_k: int = 0) -> FeatureSpec:
        """The spec of a ``features`` record with ``preview_k`` preview points (the file's
        ``env_kwargs.preview``); ``None`` (a file without one) is the empty spec with them.
        A record may still carry ``preview_k`` (files written before it was stored once): it
        must then equal ``preview_k``. ``ValueError`` for anything but an object of
        :data:`RECORD_KEYS` with valid values."""
        if record is None:
            return cls(preview_k=preview_k)
        if not isinstance(record, dict):
            raise ValueError(f"features must be an object, got {type(record).__name__}")
        unknown = sorted(set(record) - set(RECORD_KEYS))
        if unknown:
            raise ValueError(f"features keys {unknown} unknown; valid: {list(RECORD_KEYS)}")
        recorded = cls(**record)  # the values checked as written
        if "preview_k" in record and recorded.preview_k != preview_k:
            raise ValueError(
                f"features.preview_k {recorded.preview_k} disagrees with the preview of "
                f"{preview_k} points its env_kwargs.preview records"
            )
        return cls(**{**record, "preview_k": preview_k})


def heading_frame(R: np.ndarray, v_w: np.ndarray) -> np.ndarray:
    """``R_z(ψ)ᵀ·v_w`` row by row: world vectors (n, 3) in the heading frame of rotations
    ``R`` (n, 3, 3) (ψ the yaw of each)."""
    psi = np.arctan2(R[:, 1, 0], R[:, 0, 0])
    c, s = np.cos(psi), np.sin(psi)
    return np.stack(
        (c * v_w[:, 0] + s * v_w[:, 1], -s * v_w[:, 0] + c * v_w[:, 1], v_w[:, 2]), axis=1
    )


def _flown_layout(width: int) -> str:
    """The env layout observations of ``width`` values come from, for layout errors."""
    if not is_observation_width(width):
        return "no observation layout"
    k = (width - OBS_DIM) // PREVIEW_WIDTH
    return f"preview {k}" if k else "base"


class InputsState(NamedTuple):
    """The memory of the policy inputs, one row per env (zeros after a reset)."""

    history: np.ndarray  # (n, H, a): the last H actions emitted, newest first
    integral: np.ndarray  # m, heading frame, τ-normalized, (n, 3): the leaky error integral


class PolicyFeatures:
    """The policy input of a :class:`FeatureSpec` over an explicit per-env memory
    (:class:`InputsState`): the parameters only, so a controller's law keeps the memory in its
    state. Every operation is row by row, so a batch equals its rows bit for bit.

    Args:
        spec: what to append to the base features.
        action_dim: actions per decision (4: ``ppo``/``ppo_adapt``, 3: ``ppo_res``).
        period_s: s between two :meth:`features` calls of an env (the decision period: control
            period × action repeat); sets the integral's leak.
        rowwise: the base features of :func:`ppo_features` row by row, bit for bit
            (:func:`ppo_features_rows`; the deployed controllers: the shipped rows were flown
            with them) instead of :func:`ppo_features_batch` (training;
            the two differ by at most one float32 rounding).
    """

    def __init__(
        self,
        spec: FeatureSpec,
        action_dim: int = 4,
        period_s: float = 0.02,  # s, between two feature calls of one env
        rowwise: bool = False,
    ):
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"period_s must be a finite number > 0, got {period_s!r}")
        self.spec = spec
        self.action_dim = int(action_dim)
        self.rowwise = rowwise
        self.dim = spec.dim(self.action_dim)
        self.leak = math.exp(-period_s / INTEGRAL_TAU_S)  # λ per call
        self.obs_dim = OBS_DIM + PREVIEW_WIDTH * spec.preview_k if spec.preview_k else None

    def init_state(self, n: int) -> InputsState:
        """No memory for ``n`` envs."""
        return InputsState(
            history=np.zeros((n, self.spec.action_history, self.action_dim)),
            integral=np.zeros((n, 3)),
        )

    def features(
        self,
        state: InputsState,
        obs: np.ndarray,
        last_actions: np.ndarray | None = None,
        estimate: np.ndarray | None = None,
        rows: Any = slice(None),
    ) -> tuple[InputsState, np.ndarray]:
        """The memory advanced by one decision of the envs ``rows`` (default: all; written in
        place into ``state``) and their inputs (m, dim) float32 of raw observations ``obs``
        (m, obs_dim).

        ``last_actions`` (m, action_dim): the action each env emitted last (held), pushed into
        the history first (needed with ``action_history``); ``estimate`` (m, 3): Δâ, world,
        m/s² (needed with ``estimate``). The base features read ``obs[:, :OBS_DIM]``.
        """
        spec = self.spec
        o = np.asarray(obs, dtype=np.float64)
        if o.ndim != 2 or o.shape[1] < OBS_DIM:
            raise ValueError(f"observations must have shape (n, >= {OBS_DIM}), got {o.shape}")
        base_obs = o[:, :OBS_DIM]
        if self.rowwise:
            base = ppo_features_rows(base_obs)
        else:
            base = ppo_features_batch(base_obs)
        if spec.empty:
            return state, base
        parts = [base.astype(np.float64)]
        if spec.preview_k:
            if o.shape[1] != self.obs_dim:
                flown = _flown_layout(o.shape[1])
                raise LayoutError(
                    f"trained on {spec.layout_name(self.action_dim)} (observations of "
                    f"{self.obs_dim} values: preview {spec.preview_k}) but flown on observations "
                    f"of {o.shape[1]} values ({flown}): make the env with the policy's env_kwargs"
                )
            from residual_quad.controllers.features import preview_features

            parts.append(np.asarray(preview_features(o, spec.preview_k), dtype=np.float64))
        if spec.action_history:
            if last_actions is None:
                raise ValueError("action_history needs the last actions")
            a = np.asarray(last_actions, dtype=np.float64).reshape(len(o), self.action_dim)
            h = state.history[rows]
            h = np.concatenate((a[:, None, :], h[:, :-1, :]), axis=1)
            state.history[rows] = h
            parts.append(h.reshape(len(o), -1))
        if spec.error_integral:
            R = o[:, L.rot].reshape(-1, 3, 3)
            e_h = heading_frame(R, o[:, L.pos] - o[:, L.ref_pos])
            z = self.leak * state.integral[rows] + (1.0 - self.leak) * e_h
            z = np.clip(z, -INTEGRAL_CLIP_M, INTEGRAL_CLIP_M)
            state.integral[rows] = z
            parts.append(z)
        if spec.estimate:
            if estimate is None:
                raise ValueError("the estimate feature needs the residual estimate")
            R = o[:, L.rot].reshape(-1, 3, 3)
            est = np.asarray(estimate, dtype=np.float64).reshape(len(o), 3)
            parts.append(heading_frame(R, est) / ESTIMATE_SCALE)
        return state, np.concatenate(parts, axis=1).astype(np.float32)


class PolicyInputs:
    """:class:`PolicyFeatures` with the memory of ``n_envs`` envs held here: training's vector
    env (the deployed controllers keep the memory in their law's state).

    Args:
        spec, action_dim, period_s, rowwise: as :class:`PolicyFeatures`.
        n_envs: number of envs (rows of memory).
    """

    def __init__(
        self,
        spec: FeatureSpec,
        n_envs: int,
        action_dim: int = 4,
        period_s: float = 0.02,  # s, between two feature calls of one env
        rowwise: bool = False,
    ):
        self.law = PolicyFeatures(spec, action_dim, period_s, rowwise)
        self.spec = spec
        self.n_envs = int(n_envs)
        self.action_dim = self.law.action_dim
        self.dim = self.law.dim
        self.state = self.law.init_state(self.n_envs)

    @property
    def history(self) -> np.ndarray:
        """(n, H, a): the last H actions of each env, newest first."""
        return self.state.history

    @property
    def integral(self) -> np.ndarray:
        """m, (n, 3): each env's error integral (heading frame, τ-normalized)."""
        return self.state.integral

    def reset_rows(self, index: Any = slice(None)) -> None:
        """Forget the memory of the envs ``index`` (a new episode)."""
        self.state.history[index] = 0.0
        self.state.integral[index] = 0.0

    def features(
        self,
        obs: np.ndarray,
        last_actions: np.ndarray | None = None,
        estimate: np.ndarray | None = None,
        rows: Any = slice(None),
    ) -> np.ndarray:
        """:meth:`PolicyFeatures.features` on the memory held here."""
        self.state, x = self.law.features(self.state, obs, last_actions, estimate, rows)
        return x
