"""PPO policy adapter: a trained stable-baselines3 model behind the :class:`Controller` interface.

A saved policy is one SB3 ``.zip`` with one extra archive entry, ``residual_quad.json``
(:data:`META_ENTRY`): the env ``action_mode`` it acts in, the feature version, the observation
normalization statistics (``VecNormalize`` mean/var/clip, or ``null``) and a record of how it was
trained. SB3 ignores archive entries that are not ``.pth`` files, so ``PPO.load`` reads the file
unchanged, and one file is all a user has to carry.

The policy sees :func:`ppo_features` of the raw observation — the same function the training
wrapper uses — so training and deployment can never disagree on the input.

Every inconsistency of a policy file (unreadable archive, a record that is not a JSON object, a
missing or invalid ``action_mode``, ``action_repeat``, ``env_kwargs`` or ``obs_norm``, a network
of the wrong shape or with non-finite parameters) raises :class:`PolicyFileError` (a
``ValueError``) naming the file, at load time — never at the first ``policy`` call.

stable-baselines3 and torch are imported lazily (:func:`import_sb3`): the rest of the package
works without them, and asking for ``ppo`` without them raises an ``ImportError`` carrying the
install hint :data:`INSTALL_HINT`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import numbers
import re
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, ObservationGuard, hover_action
from residual_quad.controllers.batch import RowBatch, RowGuard, check_n_envs, check_obs_batch
from residual_quad.controllers.options import Domain, Integer, Optional, Text
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

INSTALL_HINT = "pip install 'residual-quad[rl]'"
META_ENTRY = "residual_quad.json"  # extra archive entry of a saved policy
META_FORMAT = 1
FEATURE_VERSION = 1
MAX_ACTION_REPEAT = 1000  # control periods an action may be held
MAX_META_BYTES = 16 * 2**20  # the record is a few kB
#: action size of each policy kind: ``ppo`` acts on the env (4), ``ppo_res`` on geo's desired
#: acceleration (3, heading frame; :mod:`residual_quad.controllers.ppo_res`)
ACTION_DIMS = {"ppo": 4, "ppo_res": 3}
MAX_ACCEL_SCALE = 20.0  # m/s², largest ppo_res correction bound a policy file may carry
#: env arguments a policy's ``env_kwargs`` may not set (the scenario and the policy own them)
#: the options of ``ppo`` and ``ppo_res`` (a policy file, a torch device, a shipped seed)
POLICY_OPTIONS: dict[str, Domain] = {
    "path": Optional(Text("a policy .zip path", (Path,))),
    "device": Text("a torch device name (cpu, cuda, ...)"),
    "training_seed": Optional(Integer(ge=0)),
}
RESERVED_ENV_KWARGS = frozenset(
    {"payload", "wind", "trajectory", "action_mode", "episode_s", "seed"}
    | {"reward_weights", "max_position_error"}
)


class PolicyFileError(ValueError):
    """A PPO policy file is unreadable or inconsistent (the message names the file)."""


# fixed feature scales (independent of the airframe the policy is flown on, so that the
# function is the same in training and deployment)
_G = 9.81  # m/s²
_ROTOR_MAX = 6.0  # N, rotor thrust that maps to +1
_POS_CLIP = 3.0  # m, position error beyond this reads as this (the env ends episodes at 5 m)
_SCALES = {"e_p": 1.0, "e_v": 2.0, "ref_v": 5.0, "ref_a": 5.0, "omega": 4.0, "z": 3.0}

FEATURE_NAMES: tuple[str, ...] = (
    *(f"e_p_{a}" for a in "xyz"),
    *(f"e_v_{a}" for a in "xyz"),
    *(f"ref_v_{a}" for a in "xyz"),
    *(f"ref_a_{a}" for a in "xyz"),
    *(f"R_h_{i}{j}" for i in range(3) for j in range(3)),
    "sin_dyaw",
    "cos_dyaw",
    "ref_yaw_rate",
    *(f"omega_{a}" for a in "xyz"),
    *(f"thrust_{i}" for i in range(4)),
    *(f"imu_{a}" for a in "xyz"),
    "z",
)
FEATURE_DIM = len(FEATURE_NAMES)


def ppo_features(obs: np.ndarray) -> np.ndarray:
    """The policy input: a scaled, heading-frame view of one ``ResidualQuad-v0`` observation.

    World vectors (position and velocity errors ``p − p_ref``, ``v − v_ref``, the reference
    velocity and acceleration) are rotated into the vehicle's heading frame (world rotated by the
    current yaw ψ), so that "ahead" means the same thing whatever the heading: the map from errors
    to body-rate or rotor commands becomes nearly yaw-invariant, which is what makes the helix
    (yaw follows the tangent) learnable. The attitude enters as ``R_h = R_z(ψ)ᵀ·R`` (tilt, no
    yaw), the heading error as sin/cos of ``ψ − ψ_ref``. Body rates, the last rotor thrusts
    (normalized to [-1, 1] like the ``rotor`` action), the accelerometer (in g; with the thrusts it
    reveals the true mass) and the height (ground effect) complete it. Every term is O(1).

    Returns a float32 vector of :data:`FEATURE_DIM` entries named :data:`FEATURE_NAMES`.
    """
    o = np.asarray(obs, dtype=np.float64)
    R = o[L.rot].reshape(3, 3)
    psi = math.atan2(R[1, 0], R[0, 0])
    c, s = math.cos(psi), math.sin(psi)
    Rz_T = np.array(((c, s, 0.0), (-s, c, 0.0), (0.0, 0.0, 1.0)))
    e_p = np.clip(Rz_T @ (o[L.pos] - o[L.ref_pos]), -_POS_CLIP, _POS_CLIP)
    e_v = Rz_T @ (o[L.vel] - o[L.ref_vel])
    ref_v = Rz_T @ o[L.ref_vel]
    ref_a = Rz_T @ o[L.ref_acc]
    dyaw = psi - o[L.ref_yaw]
    return np.concatenate(
        (
            e_p / _SCALES["e_p"],
            e_v / _SCALES["e_v"],
            ref_v / _SCALES["ref_v"],
            ref_a / _SCALES["ref_a"],
            (Rz_T @ R).ravel(),
            (math.sin(dyaw), math.cos(dyaw), o[L.ref_yaw_rate]),
            o[L.omega_b] / _SCALES["omega"],
            o[L.thrusts] * (2.0 / _ROTOR_MAX) - 1.0,
            o[L.imu] / _G,
            (o[2] / _SCALES["z"],),
        )
    ).astype(np.float32)


def ppo_features_batch(obs: np.ndarray) -> np.ndarray:
    """:func:`ppo_features` of a batch of observations ``(n, OBS_DIM)`` → ``(n, FEATURE_DIM)``.

    The same features row by row (the training adapter on the vector env uses it; equal to
    :func:`ppo_features` of each row to within one float32 rounding, see the tests), computed
    with array operations instead of one Python call per row.
    """
    o = np.asarray(obs, dtype=np.float64)
    if o.ndim != 2 or o.shape[1] != OBS_DIM:
        raise ValueError(f"observations must have shape (n, {OBS_DIM}), got {o.shape}")
    R = o[:, L.rot].reshape(-1, 3, 3)
    psi = np.arctan2(R[:, 1, 0], R[:, 0, 0])
    c, s = np.cos(psi), np.sin(psi)

    def heading(v: np.ndarray) -> np.ndarray:  # R_z(ψ)ᵀ·v, row by row
        return np.stack((c * v[:, 0] + s * v[:, 1], -s * v[:, 0] + c * v[:, 1], v[:, 2]), axis=1)

    e_p = np.clip(heading(o[:, L.pos] - o[:, L.ref_pos]), -_POS_CLIP, _POS_CLIP)
    e_v = heading(o[:, L.vel] - o[:, L.ref_vel])
    rows = [heading(R[:, :, j]) for j in range(3)]  # columns of R_z(ψ)ᵀ·R
    R_h = np.stack(rows, axis=2).reshape(-1, 9)
    dyaw = psi - o[:, L.ref_yaw]
    return np.concatenate(
        (
            e_p / _SCALES["e_p"],
            e_v / _SCALES["e_v"],
            heading(o[:, L.ref_vel]) / _SCALES["ref_v"],
            heading(o[:, L.ref_acc]) / _SCALES["ref_a"],
            R_h,
            np.stack((np.sin(dyaw), np.cos(dyaw), o[:, L.ref_yaw_rate]), axis=1),
            o[:, L.omega_b] / _SCALES["omega"],
            o[:, L.thrusts] * (2.0 / _ROTOR_MAX) - 1.0,
            o[:, L.imu] / _G,
            o[:, 2:3] / _SCALES["z"],
        ),
        axis=1,
    ).astype(np.float32)


def import_sb3(kind: str = "ppo") -> Any:
    """The ``stable_baselines3`` module, or ``ImportError`` with the install hint naming the
    policy ``kind`` that asked for it (``ppo`` or ``ppo_res``: the controller and its
    ``rquad train`` command)."""
    try:
        return importlib.import_module("stable_baselines3")
    except ImportError as exc:
        raise ImportError(
            f"the {kind!r} controller and `rquad train {kind}` need stable-baselines3 and torch "
            f"({exc}); install them with: {INSTALL_HINT}"
        ) from exc


def default_policy_path() -> Path:
    """The shipped default policy (``controllers/weights/ppo_default.zip``)."""
    return shipped_policy_path("ppo")


def shipped_policy_path(kind: str, training_seed: int = 0) -> Path:
    """A shipped policy of ``kind`` (``ppo``/``ppo_res``): training seed 0 is the default
    (``<kind>_default.zip``), the others ``<kind>_seed<k>.zip`` — the training seeds the
    report's intervals are taken over (docs/ppo.md). A seed that was not shipped is a
    ``FileNotFoundError`` listing those that were."""
    if isinstance(training_seed, bool) or not isinstance(training_seed, int) or training_seed < 0:
        raise ValueError(f"training_seed must be an integer >= 0, got {training_seed!r}")
    folder = Path(str(resources.files("residual_quad.controllers").joinpath("weights")))
    name = f"{kind}_default.zip" if training_seed == 0 else f"{kind}_seed{training_seed}.zip"
    path = folder / name
    if training_seed and not path.is_file():
        seeds = sorted(
            int(m.group(1))
            for p in folder.glob(f"{kind}_seed*.zip")
            if (m := re.fullmatch(rf"{kind}_seed(\d+)\.zip", p.name))
        )
        raise FileNotFoundError(
            f"no shipped {kind!r} policy of training seed {training_seed} ({path}); shipped "
            f"seeds: {', '.join(map(str, [0, *seeds]))}"
        )
    return path


def policy_path(kind: str, path: str | Path | None, training_seed: int | None) -> Path:
    """The policy file a ``ppo``/``ppo_res`` controller loads: ``path``, or the shipped policy of
    ``training_seed`` (default 0); both given is an error."""
    if path is not None and training_seed is not None:
        raise ValueError("give a policy path or a shipped training_seed, not both")
    if path is not None:
        return Path(path)
    return shipped_policy_path(kind, 0 if training_seed is None else training_seed)


def read_meta(path: str | Path) -> dict[str, Any]:
    """The ``residual_quad.json`` record of a saved policy, checked (:func:`check_meta`);
    :class:`PolicyFileError` naming the file for anything unreadable or inconsistent."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"PPO policy file not found: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            if META_ENTRY not in archive.namelist():
                raise PolicyFileError(
                    f"{path} is a zip archive but not a residual-quad PPO policy (no {META_ENTRY} "
                    "entry; save policies with residual_quad.training.ppo)"
                )
            if archive.getinfo(META_ENTRY).file_size > MAX_META_BYTES:
                raise PolicyFileError(f"{path}: {META_ENTRY} is larger than {MAX_META_BYTES} B")
            meta = json.loads(archive.read(META_ENTRY).decode())
    except PolicyFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile/zlib/json raise many types for bad bytes
        raise PolicyFileError(
            f"corrupt or unreadable PPO policy file {path}: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(meta, dict):
        raise PolicyFileError(
            f"{path}: {META_ENTRY} must hold a JSON object, got {type(meta).__name__}"
        )
    if meta.get("format") != META_FORMAT or meta.get("feature_version") != FEATURE_VERSION:
        raise PolicyFileError(
            f"{path}: policy format {meta.get('format')}/features {meta.get('feature_version')} "
            f"not supported (this version reads {META_FORMAT}/{FEATURE_VERSION}); retrain it"
        )
    check_meta(meta, path)
    return meta


def check_meta(meta: dict[str, Any], path: str | Path) -> None:
    """Check the fields :class:`PPOController` uses: ``action_mode`` (one of
    :data:`~residual_quad.envs.actions.ACTION_MODES`), ``action_repeat`` (an integer in
    [1, :data:`MAX_ACTION_REPEAT`], default 1), ``env_kwargs`` (an object of
    ``ResidualQuad-v0`` arguments other than :data:`RESERVED_ENV_KWARGS`, default ``{}``) and
    ``obs_norm`` (``null`` or :func:`ObsNormalizer.from_meta`'s statistics); raises
    :class:`PolicyFileError` naming ``path`` and the field."""

    def fail(what: str) -> PolicyFileError:
        return PolicyFileError(f"PPO policy file {str(path)!r}: {what}")

    kind = meta.get("controller", "ppo")
    if kind not in ACTION_DIMS:
        raise fail(f"controller {kind!r}; valid choices: {', '.join(ACTION_DIMS)}")
    if kind == "ppo_res":
        scale = meta.get("accel_scale")
        if not (_is_number(scale) and math.isfinite(scale) and 0 < scale <= MAX_ACCEL_SCALE):
            raise fail(
                f"accel_scale must be a number in (0, {MAX_ACCEL_SCALE}] m/s², got {scale!r}"
            )
        if meta.get("action_mode") != "rotor":
            raise fail("a ppo_res policy acts through geo's inner loop: action_mode is 'rotor'")
    mode = meta.get("action_mode")
    if not isinstance(mode, str) or mode not in ACTION_MODES:
        raise fail(f"action_mode {mode!r}; valid choices: {', '.join(ACTION_MODES)}")
    repeat = meta.get("action_repeat", 1)
    if (
        isinstance(repeat, bool)
        or not isinstance(repeat, int)
        or not 1 <= repeat <= MAX_ACTION_REPEAT
    ):
        raise fail(f"action_repeat must be an integer in [1, {MAX_ACTION_REPEAT}], got {repeat!r}")
    env_kwargs = meta.get("env_kwargs", {})
    if not isinstance(env_kwargs, dict):
        raise fail(f"env_kwargs must be a JSON object, got {type(env_kwargs).__name__}")
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv

    valid = set(inspect.signature(ResidualQuadEnv).parameters) - RESERVED_ENV_KWARGS
    unknown = sorted(set(env_kwargs) - valid)
    if unknown:
        raise fail(f"env_kwargs keys {unknown} are not allowed; valid: {sorted(valid)}")
    try:
        ObsNormalizer.from_meta(meta.get("obs_norm"))
    except ValueError as exc:
        raise fail(f"obs_norm: {exc}") from None


def write_meta(path: str | Path, meta: dict[str, Any]) -> None:
    """Add (or replace) the ``residual_quad.json`` entry of an SB3 ``.zip`` at ``path``."""
    path = Path(path)
    with zipfile.ZipFile(path) as archive:
        entries = {n: archive.read(n) for n in archive.namelist() if n != META_ENTRY}
    full = {"format": META_FORMAT, "feature_version": FEATURE_VERSION, **meta}
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        archive.writestr(META_ENTRY, json.dumps(full, indent=1))
    tmp.replace(path)


class ObsNormalizer:
    """The frozen ``VecNormalize`` observation transform ``clip((x − μ)/√(σ² + ε), ±c)``."""

    def __init__(self, mean: Any, var: Any, epsilon: float = 1e-8, clip: float = 10.0):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.sqrt(np.asarray(var, dtype=np.float64) + epsilon)
        self.clip = float(clip)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.clip((x - self.mean) / self.std, -self.clip, self.clip).astype(np.float32)

    @classmethod
    def from_meta(cls, stats: dict[str, Any] | None) -> ObsNormalizer | None:
        """The normalizer of a policy record's ``obs_norm`` (``None`` for ``None``); a
        ``ValueError`` unless ``mean`` and ``var`` are :data:`FEATURE_DIM` finite numbers with
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
                and len(v) == FEATURE_DIM
                and all(_is_number(x) and math.isfinite(x) for x in v)
            ):
                raise ValueError(f"{key} must be a list of {FEATURE_DIM} finite numbers")
            vectors[key] = np.array(v, dtype=np.float64)
        eps, clip = stats["epsilon"], stats["clip"]
        if not (_is_number(eps) and math.isfinite(eps) and eps >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {eps!r}")
        if not (_is_number(clip) and math.isfinite(clip) and clip > 0):
            raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
        if not np.all(vectors["var"] >= 0) or not np.all(vectors["var"] + eps > 0):
            raise ValueError("var must be >= 0 and var + epsilon > 0")
        return cls(vectors["mean"], vectors["var"], float(eps), float(clip))


_ACTIVATIONS: dict[str, Any] = {
    "Tanh": np.tanh,
    "ReLU": lambda h: np.maximum(h, 0.0),
    "Identity": lambda h: h,
}


#: action distributions whose deterministic action is the action net's output (gSDE's noise is
#: state-dependent, its mean is not)
_MEAN_HEADS = ("DiagGaussianDistribution", "StateDependentNoiseDistribution")


class NumpyPolicy:
    """The deterministic action of an SB3 MLP actor (``ActorCriticPolicy`` with a flat
    observation and a Gaussian action head), evaluated in float64 numpy.

    Why: SB3's ``predict`` costs a few hundred µs a call (tensor conversions, float32 torch),
    more than the whole vehicle step; this forward costs a few µs. Its products are
    ``np.einsum`` contractions, whose summation order does not depend on the batch size, so one
    observation and a batch of them give bit-identical actions (a BLAS matrix product does not:
    a one-row product takes another kernel). It equals SB3's float32 forward to float32 rounding
    (``tests/controllers/test_ppo_numpy.py``).
    """

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray, Any]]):
        self.layers = layers  # (W (in, out), b (out,), activation) each; the last is the mean

    @classmethod
    def from_sb3(cls, policy: Any) -> NumpyPolicy | None:
        """The numpy forward of ``policy``, or ``None`` where its architecture is not a plain
        MLP actor (another extractor, activation or distribution): then ``predict`` is used."""
        if (
            type(policy).__name__ != "ActorCriticPolicy"
            or type(policy.pi_features_extractor).__name__ != "FlattenExtractor"
            or type(policy.action_dist).__name__ not in _MEAN_HEADS
            or getattr(policy, "squash_output", False)
        ):
            return None
        layers: list[tuple[np.ndarray, np.ndarray, Any]] = []
        modules = [*policy.mlp_extractor.policy_net, policy.action_net]
        for module in modules:
            kind = type(module).__name__
            if kind == "Linear":
                w = module.weight.detach().cpu().numpy().astype(np.float64).T.copy()
                b = module.bias.detach().cpu().numpy().astype(np.float64).copy()
                layers.append((w, b, _ACTIVATIONS["Identity"]))
            elif kind in _ACTIVATIONS and layers:
                w, b, _ = layers[-1]
                layers[-1] = (w, b, _ACTIVATIONS[kind])
            else:
                return None
        return cls(layers)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Mean actions (n, 4), clipped to [-1, 1], of the normalized features ``x`` (n, d)."""
        h = np.asarray(x, dtype=np.float64)
        for w, b, act in self.layers:
            h = act(np.einsum("nd,dh->nh", h, w) + b)
        return np.clip(h, -1.0, 1.0)


def _is_number(x: Any) -> bool:
    """A JSON number (not a boolean), as Python reads it."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def load_policy(path: Path, kind: str, device: str = "cpu") -> tuple[Any, ...]:
    """``(meta, model, normalizer, network)`` of the ``kind`` policy file ``path`` (``ppo`` or
    ``ppo_res``): the checked record, the SB3 model, the frozen observation normalizer (or
    ``None``) and the numpy forward (``None``: SB3's ``predict``). Every inconsistency is a
    :class:`PolicyFileError` naming the file, raised here rather than at the first action."""
    sb3 = import_sb3(kind)  # first: without SB3 the install hint is the useful answer
    meta = read_meta(path)
    found = meta.get("controller", "ppo")
    if found != kind:
        raise PolicyFileError(
            f"{path} is a {found!r} policy, not a {kind!r} one: fly it with the {found!r} "
            "controller"
        )
    try:
        model = sb3.PPO.load(path, device=device)
    except Exception as exc:  # SB3 raises many exception types for a broken archive
        raise PolicyFileError(
            f"cannot load PPO policy {path}: {type(exc).__name__}: {exc}"
        ) from None
    shape = getattr(model.observation_space, "shape", None)
    if shape != (FEATURE_DIM,):
        raise PolicyFileError(f"{path}: policy expects {shape} inputs, features have {FEATURE_DIM}")
    shape = getattr(model.action_space, "shape", None)
    if shape != (ACTION_DIMS[kind],):
        raise PolicyFileError(
            f"{path}: policy acts with shape {shape}, a {kind!r} policy with ({ACTION_DIMS[kind]},)"
        )
    if not all(bool(p.isfinite().all()) for p in model.policy.parameters()):
        raise PolicyFileError(f"{path}: the policy network has non-finite parameters")
    normalizer = ObsNormalizer.from_meta(meta.get("obs_norm"))
    return meta, model, normalizer, NumpyPolicy.from_sb3(model.policy)


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
            self._held = observation_actions(self, obs[None, :])[0]
        self._k += 1
        return self._held.copy()

    def actions(self, x: np.ndarray) -> np.ndarray:
        """Deterministic actions (n, 4) in [-1, 1] of normalized feature rows ``x`` (n, d)."""
        return policy_actions(self.network, self.model, x)


def observation_actions(controller: Any, obs: np.ndarray) -> np.ndarray:
    """Deterministic actions (n, a) in [-1, 1] of a loaded ``ppo``/``ppo_res`` controller for raw
    observations (n, OBS_DIM): :func:`ppo_features` of each, the controller's normalizer, one
    forward — the one path of the single and the batched controllers."""
    x = np.stack([ppo_features(o) for o in obs])
    if controller.normalizer is not None:
        x = controller.normalizer(x)
    return controller.actions(x)


def in_memory(cls: type, model: Any, normalizer: ObsNormalizer | None, action_repeat: int) -> Any:
    """A ``ppo``/``ppo_res`` controller of class ``cls`` around an in-memory SB3 model (the
    training's evaluation callback), before its kind's own fields are set: no file, no record,
    no numpy forward (the model is still training: its own ``predict``)."""
    self = cls.__new__(cls)
    self.path, self.meta, self.model, self.normalizer = None, {}, model, normalizer
    self.network, self.env_kwargs, self.action_repeat = None, {}, int(action_repeat)
    return self


def policy_actions(network: NumpyPolicy | None, model: Any, x: np.ndarray) -> np.ndarray:
    """Deterministic actions (n, a) in [-1, 1] of normalized feature rows ``x`` (n, d): the
    numpy forward ``network`` where the architecture allows it, else ``model``'s ``predict``."""
    if network is not None:
        return network(x)
    action, _ = model.predict(x, deterministic=True)
    return np.clip(np.asarray(action, dtype=np.float64).reshape(len(x), -1), -1.0, 1.0)


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
        hover = hover_action(self.action_mode, controller.context.airframe)
        self.guard = RowGuard(self.n_envs, hover)

    def _reset_rows(self, index: int | slice) -> None:
        self._k[index], self._held[index] = 0, 0.0
        self.guard.reset(index)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, bad = check_obs_batch(obs, self.n_envs)
        due = (self._k % self.action_repeat == 0) & ~bad  # a bad sample is no call
        if due.any():
            self._held[due] = observation_actions(self.single, obs[due])
        self._k += ~bad
        return self.guard.finish(self._held.copy(), bad)


PPOController.batched = BatchedPPOController
