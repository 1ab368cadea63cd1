"""Checkpoints of a PPO training run: writing them, finding them, resuming from them.

``out/checkpoints/ppo_<steps>.zip`` is a loadable policy whose record also holds what a resume
needs (:class:`RunState`: steps, control periods, wall time, evaluation history, best score),
next to ``ppo_<steps>.vecnormalize.pkl`` (the full ``VecNormalize`` state). Both appear
atomically (:func:`save_checkpoint`). A resume takes the newest checkpoint that loads
(:func:`load_newest_good`: a corrupt newest one is skipped, named on stderr) and refuses one
written by another config (:func:`load_checkpoint`); a fresh run refuses a folder that already
holds a run (:func:`refuse_existing_run`).
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.controllers.policy_file import PolicyFileError, read_meta
from residual_quad.training.export import save_policy
from residual_quad.training.ppo_config import PPOTrainConfig
from residual_quad.training.ppo_model import learner_class, prepare_learner


@dataclass
class RunState:
    """What a resumed run carries over from its checkpoint (fresh run: the zeros)."""

    steps: int = 0
    control_steps: int = 0
    train_wall_s: float = 0.0
    evals: list[dict[str, Any]] = field(default_factory=list)  # without the per-flight rows
    best: tuple[int, float] | None = None


CHECKPOINT_RE = re.compile(r"^ppo_(\d+)\.zip$")
VECNORM_SUFFIX = ".vecnormalize.pkl"


def save_checkpoint(
    model: Any, folder: Path, cfg: PPOTrainConfig, vec_env: Any, state: RunState
) -> Path:
    """Write ``folder/ppo_<steps>.zip`` (+ the ``VecNormalize`` pickle next to it) atomically:
    the zip appears last, under its final name, so a run killed mid-write leaves no checkpoint
    that looks complete."""
    from stable_baselines3.common.vec_env import VecNormalize

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ppo_{state.steps}.zip"
    if isinstance(vec_env, VecNormalize):
        tmp = folder / f".ppo_{state.steps}{VECNORM_SUFFIX}.tmp"
        vec_env.save(tmp)
        os.replace(tmp, path.with_suffix(VECNORM_SUFFIX))
    tmp_zip = save_policy(
        model,
        folder / f".ppo_{state.steps}.tmp.zip",
        cfg,
        vec_env,
        steps=state.steps,
        resume={
            "control_steps": state.control_steps,
            "train_wall_s": state.train_wall_s,
            "evals": state.evals,
            "best": list(state.best) if state.best is not None else None,
        },
    )
    os.replace(tmp_zip, path)
    return path


def checkpoints(out: str | Path) -> list[Path]:
    """The checkpoints in ``out/checkpoints``, the most steps first; ``FileNotFoundError``
    naming the folder when there is none."""
    folder = Path(out) / "checkpoints"
    found = []
    if folder.is_dir():
        for p in folder.iterdir():
            m = CHECKPOINT_RE.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
    if not found:
        raise FileNotFoundError(f"no checkpoint (ppo_<steps>.zip) in {folder} to resume from")
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(out: str | Path) -> Path:
    """The checkpoint with the most steps in ``out/checkpoints``; ``FileNotFoundError`` naming
    the folder when there is none."""
    return checkpoints(out)[0]


def load_newest_good(
    paths: list[Path], venv: Any, cfg: PPOTrainConfig
) -> tuple[Any, Any, RunState]:
    """:func:`load_checkpoint` of the newest of ``paths`` that loads: a corrupt newest
    checkpoint (a run killed while its disk filled, a damaged file) costs the steps since the
    one before, not the run. Each skipped file is named on stderr; when none loads, the error
    of the only one, or one line naming every file and why."""
    errors: list[tuple[Path, Exception]] = []
    for path in paths:
        try:
            loaded = load_checkpoint(path, venv, cfg)
        except (PolicyFileError, FileNotFoundError) as err:
            errors.append((path, err))
            continue
        for bad, err in errors:
            print(
                f"resume: skipped the checkpoint {bad}, which does not load ({err}); "
                f"resuming from {path.name}",
                file=sys.stderr,
            )
        return loaded
    if len(errors) == 1:
        raise errors[0][1]
    reasons = "; ".join(f"{p.name}: {err}" for p, err in errors)
    raise PolicyFileError(
        f"no checkpoint in {paths[0].parent} loads, nothing to resume from ({reasons})"
    )


#: what a run folder holds once a training has written into it
RUN_FILES = ("final.zip", "best.zip", "summary.json")


def refuse_existing_run(out: Path) -> None:
    """A fresh training never writes over another run's policies: ``ValueError`` naming what
    ``out`` holds and what to do instead."""
    held = [name for name in RUN_FILES if (out / name).exists()]
    ckpt = out / "checkpoints"
    if ckpt.is_dir() and any(CHECKPOINT_RE.match(p.name) for p in ckpt.iterdir()):
        held.append("checkpoints/")
    if not held:
        return
    if (out / "final.zip").exists():
        raise ValueError(
            f"{out} already holds a finished training run ({', '.join(held)}); choose a new "
            "--out (or delete that folder) to train again"
        )
    raise ValueError(
        f"{out} already holds an interrupted training run ({', '.join(held)}); --resume "
        "continues it, or choose a new --out"
    )


def load_checkpoint(path: Path, venv: Any, cfg: PPOTrainConfig) -> tuple[Any, Any, RunState]:
    """The model, the normalized env and the run state of checkpoint ``path``; every problem a
    :class:`~residual_quad.controllers.policy_file.PolicyFileError` or ``FileNotFoundError``
    naming the file."""
    import pickle

    from stable_baselines3.common.vec_env import VecNormalize

    meta = read_meta(path)  # missing, corrupt or foreign zip: an error naming it
    record = meta.get("resume")
    if not isinstance(record, dict) or not isinstance(meta.get("steps"), int):
        raise PolicyFileError(
            f"{path} is a policy but not a training checkpoint (no resume record)"
        )
    saved = dict(meta["config"]) if isinstance(meta.get("config"), dict) else {}
    try:  # keys added to the config after the checkpoint load as their defaults
        saved = configs.to_dict(configs.load(PPOTrainConfig, saved))
    except ValueError:
        pass  # compared as written: the difference names the keys
    now = configs.to_dict(cfg)
    saved.pop("total_steps", None), now.pop("total_steps")
    if saved != now:
        diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        raise PolicyFileError(
            f"{path} was written by another training config (differs in {diff}) than the one "
            f"given; resume with the run's own {path.parent.parent / 'config.yaml'}"
        )
    if cfg.normalize_obs or cfg.normalize_reward:
        pkl = path.with_suffix(VECNORM_SUFFIX)
        if not pkl.is_file():
            raise FileNotFoundError(f"normalization state of {path.name} not found: {pkl}")
        try:
            venv = VecNormalize.load(str(pkl), venv)
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
            raise PolicyFileError(f"cannot load the normalization state {pkl}: {err}") from None
    try:
        model = learner_class(cfg).load(path, env=venv, device="cpu")
    except Exception as err:  # SB3 raises many kinds on a damaged archive
        raise PolicyFileError(f"cannot load checkpoint {path}: {err}") from None
    prepare_learner(model, cfg)
    best = record.get("best")
    state = RunState(
        steps=int(meta["steps"]),
        control_steps=int(record.get("control_steps", 0)),
        train_wall_s=float(record.get("train_wall_s", 0.0)),
        evals=[  # JSON wrote a crashed-out mean (inf) as null
            {**e, "rmse_mean": math.inf if e.get("rmse_mean") is None else e["rmse_mean"]}
            for e in record.get("evals") or []
        ],
        best=(int(best[0]), math.inf if best[1] is None else float(best[1])) if best else None,
    )
    return model, venv, state
