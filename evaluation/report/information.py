"""The information audit: what every flown controller sees, and its tuning budget [LEVELING].

A head-to-head comparison is only fair between controllers that see the same information (a
policy without the reference acceleration against a tracker that feeds it forward measures the
information as much as the method). Each controller declares its
:class:`~residual_quad.controllers.base.InformationUse` where it is defined (class attribute
``INFORMATION``); a learned controller's row is completed from its training record:

- a policy file (``learned="policy"``): the record's ``features`` entry
  ``{"preview_k": int, "action_history": int, "error_integral": bool, "estimate": bool}`` and
  ``privileged_critic: bool`` (absent: all off / 0), and its ``budget`` (policy steps, wall
  time);
- the residual network (``learned="residual"``): its weights' metadata (the ``.json`` next to
  the ``.npz``: training samples, epochs, training time).

:func:`information_table` is the report's table, one row per controller label flown;
:func:`equal_information` / :func:`information_notes` mark which head-to-head comparisons are
on equal information.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from residual_quad.controllers.base import InformationUse
from residual_quad.controllers.policy_file import preview_points
from residual_quad.evaluation.report.tables import Table

#: the fields that decide "equal information" (memory and Δâ compared as present / absent)
COMPARED = ("reference", "feedforward_accel", "preview_k", "memory", "residual_estimate")
COMPARED += ("privileged_training",)
FIELD_NAMES = {
    "reference": "current reference",
    "feedforward_accel": "reference acceleration",
    "preview_k": "preview",
    "memory": "history / memory",
    "residual_estimate": "residual estimate Δâ",
    "privileged_training": "privileged training",
}

Record = Callable[[str, dict[str, Any]], dict[str, Any]]


def _options(label: str) -> tuple[str, dict[str, Any]] | None:
    """(target, options) of a controller label, ``None`` when it does not parse."""
    from residual_quad.controllers.specs import parse_spec

    try:
        spec = parse_spec(label)
    except ValueError:
        return None
    return spec.target, dict(spec.options)


def declared_information(target: str) -> InformationUse | None:
    """The ``INFORMATION`` a controller factory declares in its own namespace (``None``: a user
    controller that declares none, or one that cannot be resolved)."""
    from residual_quad.controllers.base import resolve_factory

    try:
        factory = resolve_factory(target)
    except (ValueError, ImportError):
        return None
    info = vars(factory).get("INFORMATION") if isinstance(factory, type) else None
    return info if isinstance(info, InformationUse) else None


def policy_record(target: str, options: dict[str, Any]) -> dict[str, Any]:
    """The ``residual_quad.json`` record of the policy a ``ppo``/``ppo_res``/``ppo_adapt``/
    ``sb3`` label flies (``{}`` when there is none or it cannot be read: a note, never a report
    failure)."""
    from residual_quad.controllers.policy_file import SHIPPED_KINDS, policy_path, read_meta

    try:
        if target in SHIPPED_KINDS:
            path = policy_path(target, options.get("path"), options.get("training_seed"))
        else:
            path = Path(str(options["path"]))
        return read_meta(path)
    except Exception:  # noqa: BLE001 - any unreadable record reads as "nothing recorded"
        return {}


def residual_record(target: str, options: dict[str, Any]) -> dict[str, Any]:
    """The metadata of the residual network a label flies (``weights`` option; ``default``:
    the shipped ``residual_default.json``); ``{}`` for ``none`` or when unreadable."""
    weights = str(options.get("weights", "default"))
    if weights == "none":
        return {}
    if weights == "default":
        folder = resources.files("residual_quad.controllers").joinpath("weights")
        path = Path(str(folder)) / "residual_default.json"
    else:
        path = Path(weights).with_suffix(".json")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _kg_range(payloads: Sequence[Any]) -> str:
    """A training config's payloads (level names or kg) as a mass range."""
    from residual_quad.envs.disturbances import resolve_payload

    try:
        masses = [resolve_payload(p) for p in payloads]
    except ValueError:
        return "payloads " + "/".join(map(str, payloads))
    low, high = min(masses), max(masses)
    return f"payload {low:g}–{high:g} kg"


def training_scenarios_of(config: dict[str, Any]) -> str:
    """What a policy record's training config flew: payload range, winds, trajectories (the
    matrix's shapes, or randomized families) and where its env seeds start."""
    if not config:
        return "not recorded"
    parts = []
    if config.get("payloads"):
        parts.append(_kg_range(config["payloads"]))
    if config.get("winds"):
        parts.append("/".join(map(str, config["winds"])))
    trajectories = "/".join(map(str, config.get("trajectories") or ()))
    if config.get("trajectory_draw") == "randomized":
        ranges = _ranges_text(config.get("trajectory_ranges"))
        parts.append(f"randomized {trajectories}{ranges} (seeds off the matrix's)")
        focus = config.get("focus") or {}
        for one in focus if isinstance(focus, list) else [focus]:
            if one.get("fraction"):
                parts.append(_focus_of(one, config))
        if config.get("rotor_efficiency"):
            effs = [float(e) for e in config["rotor_efficiency"]]
            parts.append(f"rotor efficiency {min(effs):g}–{max(effs):g} (weaker motors)")
    elif trajectories:
        parts.append(f"{trajectories} (the matrix's shapes)")
    return ", ".join(parts) or "not recorded"


def _focus_of(focus: dict[str, Any], config: dict[str, Any]) -> str:
    """A recorded focus draw: its share of the episodes and what it draws (its lists, the main
    ones where it leaves them null; the parameter ranges it replaces)."""
    payloads = focus.get("payloads") or config.get("payloads") or ()
    winds = "/".join(map(str, focus.get("winds") or config.get("winds") or ()))
    trajectories = "/".join(map(str, focus.get("trajectories") or config.get("trajectories") or ()))
    what = [_kg_range(payloads)] if payloads else []
    what += [winds] if winds else []
    what.append(trajectories + _ranges_text(focus.get("trajectory_ranges")))
    return f"{100 * focus['fraction']:g} % of episodes: {', '.join(what)}"


def _ranges_text(ranges: dict[str, dict[str, list[float]]] | None) -> str:
    """Replaced parameter ranges as the training column lists them (", helix period 4–12")."""
    return "".join(
        f", {name} {param} {lo:g}–{hi:g}"
        for name, params in (ranges or {}).items()
        for param, (lo, hi) in params.items()
    )


def objective_of(config: dict[str, Any]) -> str:
    """The reward a policy record's training config maximized."""
    if not config:
        return "not recorded"
    if config.get("reward") == "precision":
        return "precision reward (a kernel on the position error × action smoothness)"
    shaping = []
    log_cost = config.get("position_log") or 0.0  # a weight, or (weight, scale)
    if log_cost[0] if isinstance(log_cost, list | tuple) else log_cost:
        shaping.append("log-shaped position cost")
    if config.get("action_smooth") or config.get("action_magnitude"):
        shaping.append("action costs")
    return "env reward (alive − tracking, rate and smoothness costs)" + "".join(
        f" + {s}" for s in shaping
    )


def recorded_preview_k(record: dict[str, Any]) -> int:
    """The preview points a policy record was trained with: its ``env_kwargs.preview`` (where
    a file records the width once), or a ``features.preview_k`` of a file written before."""
    env_kwargs = record.get("env_kwargs") or {}
    from_env = preview_points(env_kwargs) if isinstance(env_kwargs, dict) else 0
    features = record.get("features") or {}
    return max(from_env, int(features.get("preview_k", 0) or 0), 0)


def with_policy_record(info: InformationUse, record: dict[str, Any]) -> InformationUse:
    """``info`` completed by a policy record's ``features``, privileged critic, decision rate,
    reward and training scenarios."""
    features = record.get("features") or {}
    config = record.get("config") or {}
    repeat = record.get("action_repeat") or config.get("action_repeat") or 1
    control_hz = (record.get("env_kwargs") or {}).get("control_hz", 100.0)
    memory = [info.memory] if info.memory else []
    if int(features.get("action_history", 0) or 0) > 0:
        memory.append(f"last {int(features['action_history'])} actions")
    if features.get("error_integral"):
        memory.append("position-error integral")
    if record.get("tracker") == "pid":  # a ppo_res correction of pid: the tracker integrates
        memory.append("pid's position-error integral")
    estimate = info.residual_estimate
    if features.get("estimate"):
        estimate = "; ".join(filter(None, (estimate, "a disturbance estimate input")))
    algo = str(record.get("algo", "ppo"))
    if algo != "ppo" and info.tuning_trials:  # a PPO kind's file learned off-policy: the
        # declared tries were PPO's, not this learner's
        info = replace(
            info,
            tuning=f"{algo.upper()} (the file's learner), its settings in the file's config; "
            "no tries documented",
            tuning_trials=0,
        )
    return replace(
        info,
        preview_k=max(info.preview_k, recorded_preview_k(record)),
        memory="; ".join(memory),
        residual_estimate=estimate,
        privileged_training=info.privileged_training
        or bool(record.get("privileged_critic"))
        or bool(record.get("privileged_columns"))
        or bool(config.get("privileged_critic")),
        decision_hz=float(control_hz) / float(repeat) if record else info.decision_hz,
        objective=objective_of(config) if record else info.objective,
        training_scenarios=training_scenarios_of(config) if record else info.training_scenarios,
    )


def samples_and_wall(info: InformationUse, record: dict[str, Any]) -> tuple[str, str]:
    """The training samples and wall time a learned row's record gives ("–" for none)."""
    if info.learned == "policy" and record.get("budget"):
        budget = record["budget"]
        steps = budget.get("steps")
        wall = budget.get("train_wall_s", budget.get("wall_s"))
        return (
            f"{steps / 1e6:.2f} M policy steps" if steps else "–",
            f"{wall / 60:.1f} min" if wall else "–",
        )
    if info.learned == "residual" and record:
        samples, wall = record.get("train_samples"), record.get("train_time_s")
        return (
            f"{samples:,} samples" if samples else "–",
            f"{wall:.0f} s" if wall is not None else "–",
        )
    return "–", "–"


def budget_of(info: InformationUse, record: dict[str, Any]) -> str:
    """The tuning budget cell: the declared tuning, plus what the training record says."""
    from residual_quad.evaluation.report.rl_seeds import budget_text

    if info.learned == "policy" and record.get("budget"):
        return f"{budget_text(record['budget'])}; {info.tuning}"
    if info.learned == "residual" and record:
        return (
            f"network: {record.get('train_samples', '?'):,} samples, "
            f"{record.get('epochs_run', '?')} epochs (best {record.get('best_epoch', '?')}), "
            f"{record.get('train_time_s', float('nan')):.0f} s training; {info.tuning}"
        )
    return info.tuning


def information_of(
    label: str,
    read_policy: Record = policy_record,
    read_residual: Record = residual_record,
) -> tuple[InformationUse | None, str]:
    """(information use, tuning budget) of a controller label; ``(None, "undeclared")`` for a
    controller that declares none. ``read_policy``/``read_residual`` read the training records
    (replaceable in tests)."""
    info, record = _info_and_record(label, read_policy, read_residual)
    return (None, "undeclared") if info is None else (info, budget_of(info, record))


def _info_and_record(
    label: str, read_policy: Record, read_residual: Record
) -> tuple[InformationUse | None, dict[str, Any]]:
    parsed = _options(label)
    if parsed is None:
        return None, {}
    target, options = parsed
    info = declared_information(target)
    if info is None:
        return None, {}
    record: dict[str, Any] = {}
    if info.learned == "policy":
        record = read_policy(target, options)
        info = with_policy_record(info, record)
    elif info.learned == "residual":
        record = read_residual(target, options)
    return info, record


def _key(info: InformationUse) -> tuple[Any, ...]:
    return tuple(bool(v) if isinstance(v, str) else v for v in (getattr(info, f) for f in COMPARED))


def equal_information(a: InformationUse, b: InformationUse) -> bool:
    """Whether two controllers see the same information: the same reference, feed-forward,
    preview and privileged training, and each with or each without memory and Δâ."""
    return _key(a) == _key(b)


def differences(a: InformationUse, b: InformationUse) -> list[str]:
    """The audit fields on which ``a`` and ``b`` differ (their :data:`FIELD_NAMES`)."""
    return [FIELD_NAMES[f] for f, x, y in zip(COMPARED, _key(a), _key(b), strict=True) if x != y]


def _yes(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v} samples" if v else "none"
    return v or "none"


#: the audit's columns on how a controller was made, after those on what it sees
MADE_COLUMNS = (
    "action",
    "decisions",
    "objective",
    "tuning trials",
    "training scenarios",
    "samples",
    "wall time",
)


def information_table(
    labels: Sequence[str],
    read_policy: Record = policy_record,
    read_residual: Record = residual_record,
) -> Table:
    """The audit table: one row per label (the pooled RL labels: the shipped training seed 0's
    record) — what it sees, how it was made (action level, decision rate, objective, tuning
    trials, training scenarios, samples, wall time) and its tuning budget in words."""
    body = []
    for label in labels:
        info, record = _info_and_record(label, read_policy, read_residual)
        if info is None:
            body.append([label, *["undeclared"] * (len(COMPARED) + len(MADE_COLUMNS) + 1)])
            continue
        samples, wall = samples_and_wall(info, record)
        made = [
            info.action,
            f"{info.decision_hz:g} Hz",
            info.objective,
            str(info.tuning_trials),
            info.training_scenarios,
            samples,
            wall,
        ]
        body.append(
            [label, *(_yes(getattr(info, f)) for f in COMPARED), *made, budget_of(info, record)]
        )
    return Table(
        "information",
        "Information audit: what each controller sees, how it was made, and its tuning budget "
        "[LEVELING]",
        ["controller", *(FIELD_NAMES[f] for f in COMPARED), *MADE_COLUMNS, "tuning budget"],
        body,
        "Declared by each controller (`INFORMATION`, controllers/base.py `InformationUse`); "
        "learned controllers completed from their training records (policy file: features, "
        "privileged critic, decision rate, reward, training scenarios, budget; residual network: "
        "its weights' metadata). Two controllers are on equal information when they agree on "
        "every column of what they see (history and Δâ compared as present or absent). Tuning "
        "trials: configuration tries of the design as documented (docs/rl.md, docs/adaptive.md); "
        "`rquad tune` counts a study's trials (docs/tuning.md). Pooled RL rows show training "
        "seed 0's record; the RL section lists every seed's budget.",
    )


def information_notes(pairs: Sequence[tuple[str, str]], **readers: Record) -> list[str]:
    """One line stating, for each compared pair, whether it is on equal information (and if
    not, on which fields it differs); empty without pairs."""
    if not pairs:
        return []
    infos: dict[str, InformationUse | None] = {}
    for label in dict.fromkeys(x for p in pairs for x in p):
        infos[label] = information_of(label, **readers)[0]
    equal, unequal, unknown = [], [], []
    for a, b in pairs:
        ia, ib = infos[a], infos[b]
        if ia is None or ib is None:
            unknown.append(f"{a}–{b}")
        elif equal_information(ia, ib):
            equal.append(f"{a}–{b}")
        else:
            unequal.append(f"{a}–{b} ({', '.join(differences(ia, ib))})")
    parts = []
    if equal:
        parts.append("equal information: " + ", ".join(equal))
    if unequal:
        parts.append("unequal: " + "; ".join(unequal))
    if unknown:
        parts.append("undeclared: " + ", ".join(unknown))
    return ["Information (audit table): " + ". ".join(parts) + "."]


def information_groups(labels: Sequence[str], **readers: Record) -> list[str]:
    """One line grouping ``labels`` (a head-to-head table's columns) into sets of equal
    information, e.g. ``geo = ppo = ppo_res``; empty for fewer than two labels."""
    if len(labels) < 2:
        return []
    groups: dict[tuple[Any, ...] | str, list[str]] = {}
    for label in labels:
        info = information_of(label, **readers)[0]
        groups.setdefault("undeclared" if info is None else _key(info), []).append(label)
    parts = [" = ".join(g) for k, g in groups.items() if k != "undeclared"]
    if "undeclared" in groups:
        parts.append("undeclared: " + ", ".join(groups["undeclared"]))
    return ["Equal information (audit table): " + "; ".join(parts) + "."]
