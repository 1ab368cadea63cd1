"""Ablation of the RL policies' design at equal budget: variants × training seeds, resumable.

An ablation names a set of *variants* — each a shipped training config (``ppo``, ``ppo_res``,
``tqc``…) with some keys changed (``overrides``: a preview, an action history, the residual
estimate, a privileged critic, an action cost, another learner) — and trains every variant with
every seed for the same number of policy steps (``configs/ablation.yaml``). Each (variant, seed)
is an ordinary training run in ``out/<variant>/seed<k>/`` (config.yaml, TensorBoard, checkpoints,
best.zip, summary.json: :func:`residual_quad.training.ppo.train`), so any of them can be flown,
exported or resumed on its own.

Running an ablation again trains only what is missing: a finished run (``summary.json``) is kept,
an interrupted PPO run resumes from its last checkpoint, and a folder holding a run of another
config is an error naming the first key that differs (nothing is overwritten). The training's
tracking evaluations of every finished run (``summary.json``'s ``evals``) become the rows
``out/ablation_rows.json``, which the table and figure of
:mod:`residual_quad.evaluation.studies.ablation_report` read.

Several ``rquad ablate`` processes may share one folder (one per core): each run is trained under
a lock on its folder (:class:`~residual_quad.evaluation.sweep.rows.FolderLock`), and a process
skips the runs another one holds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.evaluation.sweep.rows import FolderLock
from residual_quad.training.ppo_config import PPOTrainConfig

#: a variant's folder name
VARIANT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
ROWS_FILE = "ablation_rows.json"  # one JSON list (a small file, replaced whole)
#: settings that change a run's speed, not its numbers (a run may have used other values)
SPEED_KEYS = ("env_threads",)
CONFIG_FILE = "ablation_config.yaml"


@dataclass
class AblationVariant:
    """One design point: a training config and the keys it changes."""

    name: str  # folder name and table key: lower case, digits, ``_``
    base: str = "ppo_memoryless"  # training config: a shipped name (``ppo_res``…) or a YAML path
    overrides: dict[str, Any] = field(default_factory=dict)  # merged into base (mappings by key)
    seeds: list[int] | None = None  # training seeds of this variant (default: the ablation's)
    label: str = ""  # the table's row label (default: name)
    note: str = ""  # one line: what this variant adds

    def __post_init__(self) -> None:
        if not VARIANT_NAME_RE.match(self.name):
            raise ValueError(
                f"variant name must be lower case letters, digits and '_' (a folder name), "
                f"got {self.name!r}"
            )
        if self.seeds is not None:
            check_seeds(self.seeds, f"variant {self.name!r}: seeds")
        for key in ("seed", "total_steps"):
            if key in self.overrides:
                raise ValueError(
                    f"variant {self.name!r}: overrides may not set {key!r}: the ablation's "
                    "seeds and steps give every variant the same budget"
                )

    def shown(self) -> str:
        """The table's label."""
        return self.label or self.name


@dataclass
class AblationConfig:
    """``rquad ablate`` settings (``configs/ablation.yaml``)."""

    steps: int = 3_000_000  # policy steps of every run (the equal budget)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # training seeds of every variant
    variants: list[AblationVariant] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise ValueError(f"steps must be positive, got {self.steps}")
        if (
            not self.seeds
            or any(s < 0 for s in self.seeds)
            or len(set(self.seeds)) != len(self.seeds)
        ):
            raise ValueError(f"seeds must be distinct non-negative integers, got {self.seeds}")
        names = [v.name for v in self.variants]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"variant names must be unique; repeated: {repeated}")
        for v in self.variants:  # every variant's config is valid before anything trains
            self.run_config(v, self.seeds[0])

    def seeds_of(self, variant: AblationVariant) -> list[int]:
        """The training seeds of ``variant``."""
        return self.seeds if variant.seeds is None else variant.seeds

    def variant(self, name: str) -> AblationVariant:
        """The variant called ``name``; ``ValueError`` listing the valid names."""
        for v in self.variants:
            if v.name == name:
                return v
        raise ValueError(
            f"no variant {name!r}; variants: {', '.join(x.name for x in self.variants)}"
        )

    def run_config(self, variant: AblationVariant, seed: int) -> PPOTrainConfig:
        """The training config of one run: ``base`` with ``overrides`` merged, this seed, the
        ablation's steps; a ``ValueError`` names the variant and the bad key."""
        path = configs.resolve(variant.base)
        data = configs.read_yaml(path)
        if not isinstance(data, dict):
            raise ValueError(f"variant {variant.name!r}: {path} does not hold a training config")
        data = merged(data, variant.overrides)
        data.update(seed=seed, total_steps=self.steps)
        return configs.from_dict(PPOTrainConfig, data, f"variant {variant.name!r} ({path.name})")


def check_seeds(seeds: list[int], what: str) -> None:
    """``ValueError`` unless ``seeds`` are distinct non-negative integers (at least one)."""
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"{what} must be distinct non-negative integers, got {seeds}")


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied: a mapping merges key by key (``ppo: {n_steps: 64}``
    keeps the base's other PPO settings), anything else replaces."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def load(
    source: str | Path | dict[str, Any] | None = "ablation", **overrides: Any
) -> AblationConfig:
    """An :class:`AblationConfig` from a YAML path, a shipped name or a dict (strict keys)."""
    return configs.load(AblationConfig, source, **overrides)


def run_dir(out: str | Path, variant: AblationVariant | str, seed: int) -> Path:
    """Where one run of the ablation lives."""
    name = variant if isinstance(variant, str) else variant.name
    return Path(out) / name / f"seed{seed}"


def run_status(folder: Path, cfg: PPOTrainConfig) -> str:
    """``done`` (summary.json), ``resume`` (an interrupted run with checkpoints), ``new``
    (nothing trained yet); a folder holding a run of another config is a ``ValueError``."""
    saved = folder / "config.yaml"
    if not saved.is_file():
        return "new"
    theirs = configs.to_dict(configs.load(PPOTrainConfig, saved))
    differs = configs.first_difference(theirs, configs.to_dict(cfg), ignore=SPEED_KEYS)
    if differs is not None:
        key, there, here = differs
        raise ValueError(
            f"{folder} holds a run of another config ({key}: {there!r} there, "
            f"{here!r} in the ablation); move it away or use another --out"
        )
    if (folder / "summary.json").is_file():
        return "done"
    ckpt = folder / "checkpoints"
    if ckpt.is_dir() and any(ckpt.glob("ppo_*.zip")):
        if cfg.algo != "ppo":
            raise ValueError(
                f"{folder} holds an interrupted {cfg.algo} run, which cannot resume (its "
                "checkpoints hold no replay buffer); delete that folder to train it again"
            )
        return "resume"
    return "new"


def plan(cfg: AblationConfig, out: str | Path) -> list[tuple[AblationVariant, int, str]]:
    """Every (variant, seed) with its :func:`run_status`, in training order (seed-major: the
    first seed of every variant first, so a partial ablation compares all variants; seeds in
    increasing order)."""
    if not cfg.variants:
        raise ValueError("the ablation has no variants: list them under `variants:`")
    return [
        (v, seed, run_status(run_dir(out, v, seed), cfg.run_config(v, seed)))
        for seed in sorted({s for v in cfg.variants for s in cfg.seeds_of(v)})
        for v in cfg.variants
        if seed in cfg.seeds_of(v)
    ]


def run_ablation(
    cfg: AblationConfig,
    out: str | Path,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    only: Iterable[str] | None = None,
    seeds: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """Train every missing run of ``cfg`` into ``out``; write and return the rows of every
    finished run (all variants, also those ``only`` leaves out).

    ``only``: the names of the variants to train (default: all; an unknown name is a
    ``ValueError`` listing the variants); ``seeds``: the training seeds to train (default: each
    variant's), also seeds a variant does not list. ``log`` gets one line per run (default:
    stderr). The resolved ablation config is saved as ``out/ablation_config.yaml``.
    """
    from residual_quad.training.ppo import train

    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    out = Path(out)
    chosen = {cfg.variant(name).name for name in only} if only is not None else None
    if seeds is not None:
        wanted = list(dict.fromkeys(int(s) for s in seeds))
        check_seeds(wanted, "seeds")
        cfg = dataclasses.replace(
            cfg,
            variants=[
                dataclasses.replace(v, seeds=sorted({*cfg.seeds_of(v), *wanted}))
                for v in cfg.variants
            ],
        )
    todo = [
        t
        for t in plan(cfg, out)
        if (chosen is None or t[0].name in chosen) and (seeds is None or t[1] in wanted)
    ]
    # ↑ every folder checked before the first (long) run starts
    out.mkdir(parents=True, exist_ok=True)
    configs.dump(cfg, out / CONFIG_FILE)
    for i, (v, seed, _) in enumerate(todo, 1):
        head = f"[{i}/{len(todo)}] {v.name} seed {seed}"
        folder = run_dir(out, v, seed)
        folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(folder)
        try:
            lock.acquire()
        except ValueError:
            say(f"{head}: being trained by another process, skipped")
            continue
        try:
            run_cfg = cfg.run_config(v, seed)
            status = run_status(folder, run_cfg)  # again: another process may have finished it
            if status == "done":
                say(f"{head}: done")
                continue
            verb = "resuming" if status == "resume" else "training"
            say(f"{head}: {verb} ({cfg.steps} steps)")
            s = train(run_cfg, folder, progress, resume=status == "resume")
        finally:
            lock.release()
        fe = s["final_eval"]
        rmse = _finite(fe["rmse_mean"])
        shown = "every flight crashed" if rmse is None else f"mean RMSE {rmse:.3f} m"
        say(f"{head}: {fe['crashes']} crash(es), {shown}, {s['train_wall_s']:.0f} s")
    return write_rows(cfg, out)


def rows_of_run(
    variant: AblationVariant,
    seed: int,
    summary: dict[str, Any],
    eval_freq: int,
    baseline: str,
) -> list[dict[str, Any]]:
    """One row per tracking evaluation of a finished run (its ``summary.json``); ``checkpoint``
    k is the evaluation after k × ``eval_freq`` steps, ``None`` for the final one; ``baseline``
    names the variant the others are compared with (the config's first)."""
    best = summary.get("best_steps")
    last = len(summary["evals"]) - 1
    return [
        {
            "variant": variant.name,
            "label": variant.shown(),
            "baseline": baseline,
            "seed": seed,
            "steps": int(e["steps"]),
            "crashes": int(e["crashes"]),
            "rmse_mean": _finite(e["rmse_mean"]),
            "final": i == last,
            "checkpoint": None if i == last or eval_freq <= 0 else int(e["steps"]) // eval_freq,
            "best": int(e["steps"]) == best,
            "train_wall_s": summary.get("train_wall_s"),
            "total_steps": summary.get("steps"),
        }
        for i, e in enumerate(summary["evals"])
    ]


def _finite(x: Any) -> float | None:
    """A finite RMSE, else ``None`` (a run whose every evaluation flight crashed)."""
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def collect_rows(
    cfg: AblationConfig, out: str | Path, kept: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The rows of every finished run of ``cfg``'s variants in ``out`` — the config's seeds and
    any other seed trained there (``--seeds``) —, in the config's order; a run without a folder
    keeps its rows from ``kept`` (the rows file's: a folder moved away or never copied, as in
    the committed results, loses nothing); an unfinished run has none."""
    old: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in kept or []:
        old.setdefault((r["variant"], r["seed"]), []).append(r)
    rows: list[dict[str, Any]] = []
    for v in cfg.variants:
        on_disk = {
            int(m.group(1))
            for p in (Path(out) / v.name).glob("seed*")
            if (m := re.fullmatch(r"seed(\d+)", p.name))
        }
        in_file = {seed for name, seed in old if name == v.name}
        for seed in sorted({*cfg.seeds_of(v), *on_disk, *in_file}):
            folder = run_dir(out, v, seed)
            path = folder / "summary.json"
            if path.is_file():
                try:
                    summary = json.loads(path.read_text(encoding="utf-8"))
                    freq = cfg.run_config(v, seed).eval_freq
                    rows += rows_of_run(v, seed, summary, freq, cfg.variants[0].name)
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}: not a training summary ({exc})") from None
            elif not folder.is_dir():
                rows += [{**r, "label": v.shown()} for r in old.get((v.name, seed), [])]
    return rows


def write_rows(cfg: AblationConfig, out: str | Path) -> list[dict[str, Any]]:
    """:func:`collect_rows` written to ``out/ablation_rows.json`` (replaced whole, keeping
    the rows of runs whose folders are not there)."""
    path = Path(out) / ROWS_FILE
    kept = read_rows(path) if path.is_file() else []
    rows = collect_rows(cfg, out, kept)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rows, indent=0) + "\n", encoding="utf-8")
    tmp.replace(path)
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an ``ablation_rows.json`` (a folder: the file in it)."""
    path = Path(path)
    if path.is_dir():
        path = path / ROWS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no ablation rows at {path}: run `rquad ablate` first")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: not ablation rows ({exc})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: not ablation rows (expected a JSON list of objects)")
    return rows
