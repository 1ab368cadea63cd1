"""The frozen observation statistics of a policy file (``obs_norm`` in its record): what
``VecNormalize`` learned in training, written once and applied as a fixed transform when the
policy flies (:mod:`residual_quad.controllers.policy_file` reads and writes the record)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from residual_quad.controllers.features import FEATURE_DIM


def obs_norm_stats(vec_env: Any) -> dict[str, Any] | None:
    """The record's ``obs_norm``: frozen observation statistics of a ``VecNormalize``
    (``None`` when ``vec_env`` does not normalize observations); :meth:`ObsNormalizer.from_meta`
    reads them back."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(vec_env, VecNormalize) or not vec_env.norm_obs:
        return None
    # an env with privileged columns after the actor's: the policy file keeps the actor's only
    cols = getattr(vec_env.unwrapped, "actor_dim", None)
    return {
        "mean": vec_env.obs_rms.mean[:cols].tolist(),
        "var": vec_env.obs_rms.var[:cols].tolist(),
        "epsilon": float(vec_env.epsilon),
        "clip": float(vec_env.clip_obs),
    }


class ObsNormalizer:
    """The frozen ``VecNormalize`` observation transform ``clip((x − μ)/√(σ² + ε), ±c)``."""

    def __init__(self, mean: Any, var: Any, epsilon: float = 1e-8, clip: float = 10.0):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.sqrt(np.asarray(var, dtype=np.float64) + epsilon)
        self.clip = float(clip)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.clip((x - self.mean) / self.std, -self.clip, self.clip).astype(np.float32)

    @classmethod
    def from_meta(
        cls, stats: dict[str, Any] | None, dim: int = FEATURE_DIM
    ) -> ObsNormalizer | None:
        """The normalizer of a policy record's ``obs_norm`` (``None`` for ``None``); a
        ``ValueError`` unless ``mean`` and ``var`` are ``dim`` finite numbers (the policy's
        input size; :data:`FEATURE_DIM` for the base features) with
        ``var ≥ 0``, ``epsilon`` a finite number ≥ 0 with ``var + epsilon > 0`` and ``clip`` a
        finite number > 0."""
        if stats is None:
            return None
        if not isinstance(stats, dict):
            raise ValueError(f"must be null or an object, got {type(stats).__name__}")
        missing = sorted({"mean", "var", "epsilon", "clip"} - set(stats))
        if missing:
            raise ValueError(f"missing keys {missing}")
        vectors = {}
        for key in ("mean", "var"):
            v = stats[key]
            if not (
                isinstance(v, list)
                and len(v) == dim
                and all(is_json_number(x) and math.isfinite(x) for x in v)
            ):
                raise ValueError(f"{key} must be a list of {dim} finite numbers")
            vectors[key] = np.array(v, dtype=np.float64)
        eps, clip = stats["epsilon"], stats["clip"]
        if not (is_json_number(eps) and math.isfinite(eps) and eps >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {eps!r}")
        if not (is_json_number(clip) and math.isfinite(clip) and clip > 0):
            raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
        if not np.all(vectors["var"] >= 0) or not np.all(vectors["var"] + eps > 0):
            raise ValueError("var must be >= 0 and var + epsilon > 0")
        return cls(vectors["mean"], vectors["var"], float(eps), float(clip))


def is_json_number(x: Any) -> bool:
    """A JSON number (not a boolean), as Python reads it."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)
