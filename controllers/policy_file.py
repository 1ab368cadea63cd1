"""The residual-quad PPO policy file: one module to read, check and write it.

A saved policy is one SB3 ``.zip`` with one extra archive entry, ``residual_quad.json``
(:data:`META_ENTRY`): the controller kind (``ppo``, ``ppo_res`` with its ``accel_scale``,
``ppo_adapt``, or ``sac``/``tqc`` for the off-policy baselines), the learner ``algo`` (``ppo``
when absent; :data:`POLICY_ALGOS`), the ``privileged_columns`` of an asymmetric critic's model,
the env ``action_mode`` it acts in, the feature version, the input features
(``features``: a :class:`~residual_quad.controllers.policy_inputs.FeatureSpec` record, absent =
the base features) and the observation layout they make (``observation_layout``, e.g.
``base + history 4 (51)``), the observation normalization statistics
(``VecNormalize`` mean/var/clip, or ``null``) and a record of how it was trained. SB3 ignores
archive entries that are not ``.pth`` files, so ``PPO.load`` reads the file unchanged, and one
file is all a user has to carry.

Here, for every user of the format (the ``ppo``, ``ppo_res`` and ``sb3`` controllers, the
training under :mod:`residual_quad.training`): the record (:func:`read_meta`,
:func:`check_meta`, :func:`write_meta`, :func:`write_entry`), the frozen normalizer
(:class:`~residual_quad.controllers.obs_norm.ObsNormalizer`), the actions of the numpy forward
(:func:`policy_actions`; the forward itself is
:class:`~residual_quad.controllers.numpy_policy.NumpyPolicy`), the loader with its file checks
(:func:`load_policy`), where the shipped policies lie (:func:`shipped_policy_path`) and the
lazy SB3 import (:func:`import_sb3`).

Every inconsistency of a policy file (unreadable archive, a record that is not a JSON object, a
missing or invalid ``action_mode``, ``action_repeat``, ``env_kwargs`` or ``obs_norm``, a network
of the wrong shape or with non-finite parameters) raises :class:`PolicyFileError` (a
``ValueError``) naming the file, at load time — never at the first ``policy`` call.

stable-baselines3 and torch are imported lazily (:func:`import_sb3`): the rest of the package
works without them, and asking for a policy without them raises an ``ImportError`` carrying the
install hint :data:`INSTALL_HINT`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.attitude import optional_attitude_gains
from residual_quad.controllers.numpy_policy import NumpyPolicy
from residual_quad.controllers.obs_norm import ObsNormalizer, is_json_number
from residual_quad.controllers.policy_inputs import FeatureSpec, LayoutError
from residual_quad.envs.actions import ACTION_MODES
from residual_quad.envs.observation import PreviewSpec, check_preview, layout_name
from residual_quad.envs.preview import check_preview_horizon

INSTALL_HINT = "pip install 'residual-quad[rl]'"
META_ENTRY = "residual_quad.json"  # extra archive entry of a saved policy
META_FORMAT = 1
FEATURE_VERSION = 1
MAX_ACTION_REPEAT = 1000  # control periods an action may be held
MAX_META_BYTES = 16 * 2**20  # the record is a few kB
#: action size of each policy kind: ``ppo``, ``ppo_adapt``, ``sac`` and ``tqc`` act on the env
#: (4), ``ppo_res`` and ``ppo_acc`` on a tracker's desired acceleration (3, heading frame;
#: :mod:`residual_quad.controllers.ppo_res`, :mod:`residual_quad.controllers.ppo_acc`)
ACTION_DIMS = {"ppo": 4, "ppo_res": 3, "ppo_acc": 3, "ppo_adapt": 4, "sac": 4, "tqc": 4}
#: the learners a policy kind's file may be trained by (the record's ``algo``; the first: a
#: record without the entry): ``sac``/``tqc`` policies are trained off-policy [SAC] [TQC] and
#: fly env actions as ``ppo`` ones do; an acceleration policy (``ppo_res``, ``ppo_acc``) may be
#: trained by either kind of learner, its law reads the actor the same way
POLICY_ALGOS: dict[str, tuple[str, ...]] = (
    {kind: ("ppo",) for kind in ACTION_DIMS}
    | {"sac": ("sac",), "tqc": ("tqc",)}
    | {kind: ("ppo", "sac", "tqc") for kind in ("ppo_res", "ppo_acc")}
)
CONTRIB_INSTALL_HINT = "pip install 'residual-quad[rl]' (sb3-contrib)"
MAX_ACCEL_SCALE = 20.0  # m/s², largest ppo_res correction bound a policy file may carry
MAX_CORRECTION_RATE = 1000.0  # m/s³, largest ppo_res correction rate a policy file may carry
#: relative tolerance on a preview's spacing between a policy's record and the env it flies
#: (the preview's own "whole number of control periods" tolerance)
PREVIEW_DT_RTOL = 1e-9
#: the trackers a ppo_res correction may add to: geo (every file without a ``tracker`` entry),
#: or pid (geo plus the PID's position-error integral at its default gains)
RESIDUAL_TRACKERS = ("geo", "pid")
#: the tracker a ``ppo_acc`` policy acts through: the reference's acceleration and no feedback
#: (the policy is the whole outer loop), then the trackers' shared attitude loop
FEEDFORWARD_TRACKER = "feedforward"
#: the policy kinds whose action is a desired acceleration handed to a tracker's attitude loop,
#: and the trackers each may act through (the first: a file without a ``tracker`` entry)
ACCELERATION_KINDS = {"ppo_res": RESIDUAL_TRACKERS, "ppo_acc": (FEEDFORWARD_TRACKER,)}
#: the defaults an acceleration policy's tracker takes (its ``core``; the first: a file without
#: the entry): ``ideal`` — the source's, whatever the plant (the PD attitude loop, no rotor
#: model, no latency predictor); ``plant`` — the trackers' own defaults for the plant the
#: policy was trained on, wherever it flies (behind lag: the lag-tuned gains, INDI, the rotor
#: model, the predictor: ``docs/controllers.md``, "Lagged rotors")
CORE_DEFAULTS = ("ideal", "plant")
#: policy kinds with shipped policies (``controllers/weights``)
SHIPPED_KINDS = ("ppo", "ppo_res", "ppo_acc", "ppo_adapt")
#: env arguments a policy's ``env_kwargs`` may not set (the scenario and the policy own them)
RESERVED_ENV_KWARGS = frozenset(
    {"payload", "wind", "trajectory", "action_mode", "episode_s", "seed"}
    | {"reward_weights", "max_position_error"}
)


class PolicyFileError(ValueError):
    """A PPO policy file is unreadable or inconsistent (the message names the file)."""


def rl_purpose(kind: str) -> str:
    """What needs stable-baselines3 when policy ``kind`` (``ppo``, ``ppo_res``) is asked for: the
    controller and its ``rquad train`` command (the install hint names them)."""
    return f"the {kind!r} controller and `rquad train {kind}`"


def import_sb3(purpose: str = rl_purpose("ppo")) -> Any:
    """The ``stable_baselines3`` module, or ``ImportError`` naming ``purpose`` (what needs it)
    with the install hint."""
    try:
        return importlib.import_module("stable_baselines3")
    except ImportError as exc:
        raise ImportError(
            f"{purpose}: stable-baselines3 and torch are needed ({exc}); install them with: "
            f"{INSTALL_HINT}"
        ) from exc


def import_sb3_contrib(purpose: str = rl_purpose("tqc")) -> Any:
    """The ``sb3_contrib`` module (TQC), or ``ImportError`` naming ``purpose`` with the install
    hint."""
    import_sb3(purpose)
    try:
        return importlib.import_module("sb3_contrib")
    except ImportError as exc:
        raise ImportError(
            f"{purpose}: sb3-contrib is needed ({exc}); install it with: {CONTRIB_INSTALL_HINT}"
        ) from exc


def algo_module(algo: str) -> Any:
    """The SB3 class that loads an ``algo`` policy (``ppo``, ``sac``, ``tqc``)."""
    if algo == "tqc":
        return import_sb3_contrib(rl_purpose("tqc")).TQC
    return getattr(import_sb3(rl_purpose(algo)), algo.upper())


def default_policy_path() -> Path:
    """The shipped default policy (``controllers/weights/ppo_default.zip``)."""
    return shipped_policy_path("ppo")


#: the plants a policy is shipped for: ``ideal`` (the default files, trained on the default
#: plant) and the presets of :data:`residual_quad.envs.presets.PRESETS` it was retrained on
SHIPPED_PLANTS: tuple[str, ...] = ("ideal", "realistic")


def shipped_policy_path(kind: str, training_seed: int = 0, plant: str = "ideal") -> Path:
    """A shipped policy of ``kind`` (``ppo``/``ppo_res``) for ``plant``: training seed 0 is the
    default (``<kind>_default.zip``; ``<kind>_<plant>_default.zip`` for a plant other than
    ``ideal``), the others ``…_seed<k>.zip`` — the training seeds the report's intervals are
    taken over (docs/ppo.md). A seed or plant that was not shipped is a ``FileNotFoundError``
    listing what was."""
    if isinstance(training_seed, bool) or not isinstance(training_seed, int) or training_seed < 0:
        raise ValueError(f"training_seed must be an integer >= 0, got {training_seed!r}")
    if plant not in SHIPPED_PLANTS:
        raise ValueError(f"plant must be one of {', '.join(SHIPPED_PLANTS)}, got {plant!r}")
    folder = Path(str(resources.files("residual_quad.controllers").joinpath("weights")))
    stem = kind if plant == "ideal" else f"{kind}_{plant}"
    name = f"{stem}_default.zip" if training_seed == 0 else f"{stem}_seed{training_seed}.zip"
    path = folder / name
    if (training_seed or plant != "ideal") and not path.is_file():
        seeds = sorted(
            int(m.group(1))
            for p in folder.glob(f"{stem}_seed*.zip")
            if (m := re.fullmatch(rf"{re.escape(stem)}_seed(\d+)\.zip", p.name))
        )
        shipped = [0] if (folder / f"{stem}_default.zip").is_file() else []
        raise FileNotFoundError(
            f"no shipped {kind!r} policy for the {plant!r} plant of training seed "
            f"{training_seed} ({path}); shipped seeds: "
            f"{', '.join(map(str, [*shipped, *seeds])) or 'none'}"
        )
    return path


def policy_path(
    kind: str, path: str | Path | None, training_seed: int | None, plant: str | None = None
) -> Path:
    """The policy file a ``ppo``/``ppo_res`` controller loads: ``path``, or the shipped policy of
    ``training_seed`` (default 0) for ``plant`` (default ``ideal``); a path together with a
    seed or a plant is an error."""
    if path is not None and (training_seed is not None or plant is not None):
        raise ValueError("give a policy path or a shipped training_seed/plant, not both")
    if path is not None:
        return Path(path)
    if kind not in SHIPPED_KINDS:
        raise ValueError(
            f"no {kind!r} policy is shipped: give path=POLICY.zip (e.g. {kind}:path=runs/{kind}/"
            "best.zip)"
        )
    seed = 0 if training_seed is None else training_seed
    return shipped_policy_path(kind, seed, "ideal" if plant is None else plant)


def require_file(path: str | Path, what: str) -> Path:
    """``path`` if it is a file; else a ``FileNotFoundError`` (nothing there) or an
    ``IsADirectoryError`` (a folder) starting with ``what``, the file it should be (e.g.
    ``SAC policy file``)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a directory, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def recorded_algo(meta: dict[str, Any], kind: str) -> str:
    """The learner a ``kind`` policy's record names (its kind's first learner when absent)."""
    return meta.get("algo", POLICY_ALGOS[kind][0])


def policy_file_name(kind: str) -> str:
    """What a policy file of ``kind`` is called in messages: its learner's name
    (``PPO policy file``, ``SAC policy file``, ``TQC policy file``)."""
    return f"{POLICY_ALGOS.get(kind, ('ppo',))[0].upper()} policy file"


def read_meta(path: str | Path, kind: str = "ppo") -> dict[str, Any]:
    """The ``residual_quad.json`` record of a saved policy, checked (:func:`check_meta`);
    :class:`PolicyFileError` naming the file for anything unreadable or inconsistent. A missing
    file or a folder is named as a policy of ``kind`` (its learner: :func:`policy_file_name`)."""
    path = require_file(path, policy_file_name(kind))
    not_policy = (
        f"{path} is a zip archive but not a residual-quad PPO policy (no {META_ENTRY} entry; "
        "save policies with residual_quad.training)"
    )
    meta = read_json_entries(
        path, {META_ENTRY: MAX_META_BYTES}, (META_ENTRY,), not_policy, "PPO policy file"
    )[META_ENTRY]
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


def read_json_entries(
    path: Path,
    limits: dict[str, int],
    required: tuple[str, ...],
    not_ours: str,
    kind: str,
    error: type[PolicyFileError] = PolicyFileError,
) -> dict[str, Any]:
    """The JSON entries named in ``limits`` (name → largest size in bytes) that the zip at
    ``path`` holds, parsed. ``error`` (naming the file) for a zip without every ``required``
    entry (message ``not_ours``), an entry over its limit, or anything unreadable (``kind`` names
    what the file should have been)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not all(name in names for name in required):
                raise error(not_ours)
            entries = {}
            for name, limit in limits.items():
                if name in names:
                    if archive.getinfo(name).file_size > limit:
                        raise error(f"{path}: its {name!r} entry is larger than {limit} B")
                    entries[name] = json.loads(archive.read(name).decode())
    except error:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile/zlib/json raise many types for bad bytes
        raise error(f"corrupt or unreadable {kind} {path}: {type(exc).__name__}: {exc}") from None
    return entries


def is_correction_rate(rate: Any) -> bool:
    """Whether ``rate`` is a valid ``ppo_res`` correction rate: a real number in
    (0, :data:`MAX_CORRECTION_RATE`] m/s³ (a bool is not one)."""
    return is_json_number(rate) and math.isfinite(rate) and 0 < rate <= MAX_CORRECTION_RATE


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
    if kind in ACCELERATION_KINDS:
        scale = meta.get("accel_scale")
        if not (is_json_number(scale) and math.isfinite(scale) and 0 < scale <= MAX_ACCEL_SCALE):
            raise fail(
                f"accel_scale must be a number in (0, {MAX_ACCEL_SCALE}] m/s², got {scale!r}"
            )
        if meta.get("action_mode") != "rotor":
            raise fail(
                f"a {kind} policy acts through the trackers' inner loop: action_mode is 'rotor'"
            )
        rate = meta.get("correction_rate")
        if rate is not None:
            if not is_correction_rate(rate):
                raise fail(
                    f"correction_rate must be null or a number in (0, {MAX_CORRECTION_RATE}] "
                    f"m/s³, got {rate!r}"
                )
        trackers = ACCELERATION_KINDS[kind]
        tracker = meta.get("tracker", trackers[0])
        if not (isinstance(tracker, str) and tracker in trackers):
            raise fail(f"tracker {tracker!r}; valid choices: {', '.join(trackers)}")
        try:
            optional_attitude_gains(meta.get("attitude"))
        except (TypeError, ValueError) as err:
            raise fail(str(err)) from None
        core = meta.get("core", CORE_DEFAULTS[0])
        if not (isinstance(core, str) and core in CORE_DEFAULTS):
            raise fail(f"core {core!r}; valid choices: {', '.join(CORE_DEFAULTS)}")
    else:
        for entry in ("correction_rate", "tracker", "attitude", "core"):
            if entry in meta:
                raise fail(f"{entry} is a ppo_res/ppo_acc entry, not a {kind!r} one")
    algo = recorded_algo(meta, kind)
    if algo not in POLICY_ALGOS[kind]:
        learners = " or ".join(repr(a) for a in POLICY_ALGOS[kind])
        raise fail(f"algo {algo!r}: a {kind!r} policy is trained with {learners}")
    privileged = meta.get("privileged_columns", [])
    if not (isinstance(privileged, list) and all(isinstance(c, str) for c in privileged)):
        raise fail("privileged_columns must be a list of column names")
    if privileged and algo != "ppo":
        raise fail("privileged_columns (an asymmetric critic) are PPO only")
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
    preview = preview_points(env_kwargs)
    if preview < 0:
        raise fail(f"env_kwargs.preview {env_kwargs.get('preview')!r} must be [K, dt]")
    try:
        spec = FeatureSpec.from_record(meta.get("features"), preview)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if kind == "ppo_adapt":
        if mode != "rotor" or not spec.estimate:
            raise fail("a ppo_adapt policy acts in action_mode 'rotor' and sees the estimate")
    elif spec.estimate and kind not in ACCELERATION_KINDS:
        raise fail(f"the estimate feature is ppo_adapt's, ppo_res's and ppo_acc's, not {kind!r}'s")
    layout = spec.layout_name(ACTION_DIMS[kind])
    recorded = meta.get("observation_layout", layout)
    if recorded != layout:
        raise fail(f"observation_layout {recorded!r} disagrees with its features: {layout}")
    try:
        record_preview(meta)
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        ObsNormalizer.from_meta(meta.get("obs_norm"), spec.dim(ACTION_DIMS[kind]))
    except ValueError as exc:
        raise fail(f"obs_norm: {exc}") from None


def preview_points(env_kwargs: dict[str, Any]) -> int:
    """Reference preview points an env made with ``env_kwargs`` supplies (its ``preview=(K, dt)``
    option; 0 without one)."""
    preview = env_kwargs.get("preview")
    if preview is None:
        return 0
    if isinstance(preview, list | tuple) and preview:
        return preview[0] if isinstance(preview[0], int) else -1
    return -1


def record_preview(meta: dict[str, Any]) -> PreviewSpec | None:
    """The reference preview (``K`` points ``dt`` s apart) a policy record was trained with, part
    of its observation layout as much as ``K`` is: ``env_kwargs.preview`` (every file with a
    preview records the pair there — the shipped ``ppo_adapt`` files ``[10, 0.06]``); a record
    whose ``env_kwargs.preview`` lacks the spacing (``[K]``) takes it from the training config
    recorded with it (``config.env_kwargs.preview`` with the same ``K``). ``None`` without a
    preview; a ``ValueError`` naming ``env_kwargs.preview`` for one that is no valid ``(K, dt)``
    (:func:`~residual_quad.envs.observation.check_preview`) and has no such config entry."""
    env_kwargs = meta.get("env_kwargs") or {}
    preview = env_kwargs.get("preview") if isinstance(env_kwargs, dict) else None
    if preview is None:
        return None
    why = ""
    if isinstance(preview, list | tuple) and len(preview) == 1:
        config = meta.get("config")
        trained = config.get("env_kwargs") if isinstance(config, dict) else None
        other = trained.get("preview") if isinstance(trained, dict) else None
        if isinstance(other, list | tuple) and len(other) == 2 and other[0] == preview[0]:
            preview = other
        else:
            why = (
                f" (no spacing, and its config.env_kwargs.preview gives none for K = {preview[0]})"
            )
    try:
        spec = check_preview(preview)
        return None if spec is None else check_preview_horizon(spec)
    except ValueError as exc:
        raise ValueError(
            f"env_kwargs.preview {preview!r} must be the (K, dt) the policy was trained on"
            f"{why}: {exc}"
        ) from None


def policy_env_kwargs(meta: dict[str, Any]) -> dict[str, Any]:
    """The env arguments a checked policy record was trained with (``env_kwargs``), its preview
    as the full ``[K, dt]`` pair (:func:`record_preview`)."""
    env_kwargs = dict(meta.get("env_kwargs", {}))
    spec = record_preview(meta)
    if spec is not None:
        env_kwargs["preview"] = [spec.k, spec.dt_s]
    return env_kwargs


def check_flown_preview(trained: Any, flown: PreviewSpec | None, who: str) -> None:
    """A :class:`~residual_quad.controllers.policy_inputs.LayoutError` naming both layouts
    (``K`` and spacing) unless an env of preview ``flown`` gives the observations a policy
    trained with preview ``trained`` (its ``env_kwargs.preview``) saw; ``who`` names the policy.
    The spacing agrees to :data:`PREVIEW_DT_RTOL` relative (``3 × 0.02`` is ``0.06``)."""
    want = check_preview(trained)
    if want == flown or (
        want is not None
        and flown is not None
        and want.k == flown.k
        and math.isclose(want.dt_s, flown.dt_s, rel_tol=PREVIEW_DT_RTOL, abs_tol=0.0)
    ):
        return
    pair = "no preview" if want is None else f"preview=({want.k}, {want.dt_s:g})"
    raise LayoutError(
        f"{who} was trained on observations {layout_name(want)} but the env gives "
        f"{layout_name(flown)}: make the env with the policy's {pair} (run_episode and the "
        "sweeps do when the env and its preview are left to them)"
    )


def policy_spec(meta: dict[str, Any]) -> FeatureSpec:
    """The :class:`FeatureSpec` of a checked policy record (the empty spec without one), its
    preview width read from ``env_kwargs.preview``, where the file records it once."""
    return FeatureSpec.from_record(meta.get("features"), preview_points(meta.get("env_kwargs", {})))


def policy_layout(meta: dict[str, Any]) -> str:
    """The observation layout a checked policy record was trained on (e.g. ``base (35)``)."""
    return policy_spec(meta).layout_name(ACTION_DIMS[meta.get("controller", "ppo")])


def write_meta(path: str | Path, meta: dict[str, Any]) -> None:
    """Add (or replace) the ``residual_quad.json`` record of an SB3 ``.zip`` at ``path``, with
    this version's format and feature version."""
    write_entry(path, {"format": META_FORMAT, "feature_version": FEATURE_VERSION, **meta})


def write_entry(path: str | Path, record: dict[str, Any]) -> None:
    """Replace the ``residual_quad.json`` entry of the zip at ``path`` by ``record`` as it is
    (the other entries copied unchanged), through a temporary file renamed over ``path``."""
    path = Path(path)
    with zipfile.ZipFile(path) as archive:
        entries = {n: archive.read(n) for n in archive.namelist() if n != META_ENTRY}
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        archive.writestr(META_ENTRY, json.dumps(record, indent=1))
    tmp.replace(path)


def save_model(model: Any, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write the SB3 ``model`` to ``path`` (``.zip`` appended as SB3 does) with the record
    ``meta`` (:func:`write_meta`); the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    if path.suffix != ".zip":  # SB3 appends .zip
        path = path.with_name(path.name + ".zip")
    write_meta(path, meta)
    return path


def load_policy(path: Path, kind: str, device: str = "cpu") -> tuple[Any, ...]:
    """``(meta, model, normalizer, network)`` of the ``kind`` policy file ``path`` (``ppo`` or
    ``ppo_res``): the checked record, the SB3 model, the frozen observation normalizer (or
    ``None``) and the numpy forward (``None``: SB3's ``predict``). Every inconsistency is a
    :class:`PolicyFileError` naming the file, raised here rather than at the first action."""
    sb3 = import_sb3(rl_purpose(kind))  # first: without SB3 the install hint is the useful answer
    meta = read_meta(path, kind)
    found = meta.get("controller", "ppo")
    if found != kind:
        raise PolicyFileError(
            f"{path} is a {found!r} policy, not a {kind!r} one: fly it with the {found!r} "
            "controller"
        )
    algo = recorded_algo(meta, kind)  # read_meta checked it
    loader = sb3.PPO if algo == "ppo" else algo_module(algo)
    try:
        model = loader.load(path, device=device)
    except Exception as exc:  # SB3 raises many exception types for a broken archive
        raise PolicyFileError(
            f"cannot load {algo.upper()} policy {path}: {type(exc).__name__}: {exc}"
        ) from None
    shape = getattr(model.observation_space, "shape", None)
    spec = policy_spec(meta)
    privileged = len(meta.get("privileged_columns", []))
    if shape != (spec.dim(ACTION_DIMS[kind]) + privileged,):
        critic = f" and {privileged} privileged critic columns" if privileged else ""
        raise PolicyFileError(
            f"{path}: its record says trained on {spec.layout_name(ACTION_DIMS[kind])}{critic} "
            f"but the network takes inputs of shape {shape}"
        )
    shape = getattr(model.action_space, "shape", None)
    if shape != (ACTION_DIMS[kind],):
        raise PolicyFileError(
            f"{path}: policy acts with shape {shape}, a {kind!r} policy with ({ACTION_DIMS[kind]},)"
        )
    if not all(bool(p.isfinite().all()) for p in model.policy.parameters()):
        raise PolicyFileError(f"{path}: the policy network has non-finite parameters")
    normalizer = ObsNormalizer.from_meta(meta.get("obs_norm"), spec.dim(ACTION_DIMS[kind]))
    return meta, model, normalizer, NumpyPolicy.from_sb3(model.policy)


def policy_actions(network: NumpyPolicy | None, model: Any, x: np.ndarray) -> np.ndarray:
    """Deterministic actions (n, a) in [-1, 1] of normalized feature rows ``x`` (n, d): the
    numpy forward ``network`` where the architecture allows it, else ``model``'s ``predict``."""
    if network is not None:
        return network(x)
    space = getattr(model, "observation_space", None)  # an SB3 model has one
    width = x.shape[1] if space is None else space.shape[0]
    if x.shape[1] < width:  # an asymmetric actor: its privileged inputs are masked anyway
        x = np.concatenate([x, np.zeros((len(x), width - x.shape[1]), dtype=x.dtype)], axis=1)
    action, _ = model.predict(x, deterministic=True)
    return np.clip(np.asarray(action, dtype=np.float64).reshape(len(x), -1), -1.0, 1.0)
