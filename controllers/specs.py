"""Controller specs: the one grammar that names a controller everywhere a name is accepted.

A spec is a registered name (``geo``), a registered name with a positional value and/or options
(``hnewton:lm``, ``geo:kp=15,kd=8``, ``sb3:runs/sac.zip,algo=SAC``) or an import path of a
factory (``my_pkg.ctrl:Make``, ``my_ctrl:PD:kp=4``), optionally with a label and options given as
a YAML mapping (:class:`ControllerEntry`). The spec *string* is what travels to worker processes;
each worker imports the factory itself, so a user module must be importable from every worker
(on ``PYTHONPATH`` or installed). The grammar and its rules are in ``docs/controllers.md``.
"""

from __future__ import annotations

import inspect
import json
import keyword
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from residual_quad import configs
from residual_quad.controllers.base import (
    BUILTIN_CONTROLLERS,
    ControlContext,
    Controller,
    available_controllers,
    controller_context,
    resolve_factory,
)
from residual_quad.controllers.driver import LawController
from residual_quad.controllers.law import Law
from residual_quad.controllers.options import check_options, options_of
from residual_quad.envs.actions import ACTION_MODES

#: registered names whose first bare value after the colon is a keyword option
POSITIONAL_OPTION: dict[str, str] = {
    "hnewton": "method",
    "hnewton_rls": "method",
    "sb3": "path",
}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_dotted(text: str) -> bool:
    """Whether ``text`` is ``ident(.ident)*`` (a module or attribute path)."""
    parts = text.split(".")
    return all(_IDENT.match(p) and not keyword.iskeyword(p) for p in parts)


def _compact(value: Any) -> str:
    """An option value as the compact form writes it (labels, error messages)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _check_finite(spec: str, key: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"controller spec {spec!r}: option {key}={value} is not a finite number")
    if isinstance(value, list | tuple):
        for v in value:
            _check_finite(spec, key, v)
    if isinstance(value, dict):
        for v in value.values():
            _check_finite(spec, key, v)


@dataclass(frozen=True)
class ControllerSpec:
    """A parsed spec: the factory's ``target`` (registered name or ``module:attr``), its options
    and the run label used in rows, tables, figures and the report."""

    target: str
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def is_import_path(self) -> bool:
        return ":" in self.target

    def build(self, context: ControlContext | None = None, **overrides: Any) -> Controller:
        """Build the controller (``overrides`` win over the spec's options, and are checked as
        they are: :func:`check_spec_options`) and check it; a law flies through
        :class:`~residual_quad.controllers.driver.LawController`."""
        obj = self.make(context, **overrides)
        return LawController(obj) if isinstance(obj, Law) else obj

    def make(self, context: ControlContext | None = None, **overrides: Any) -> Law | Controller:
        """What the factory makes from the spec: a :class:`~residual_quad.controllers.law.Law`
        (flown by the driver, for one vehicle or a batch) or a checked controller."""
        opts = check_spec_options(self.target, {**self.options, **overrides}, self.label)
        factory = resolve_factory(self.target)
        try:
            obj = factory(context or ControlContext(), **opts)
        except TypeError as exc:
            valid = keyword_options(factory)
            hint = f"; valid options: {', '.join(valid)}" if valid is not None else ""
            raise ValueError(f"controller {self.label!r} ({self.target}): {exc}{hint}") from None
        if isinstance(obj, Law):  # the driver supplies reset and policy; the mode is the law's
            check_action_mode(obj.action_mode, self.label or self.target)
        else:
            check_controller(obj, self.label or self.target)
        return obj


def check_spec_options(
    target: str, options: Mapping[str, Any], spec: str | None = None
) -> dict[str, Any]:
    """The options of a built-in controller checked against its ``OPTIONS`` table (unknown
    options and values outside their domain are ``ValueError``s naming the controller and the
    option: :func:`~residual_quad.controllers.options.check_options`), numeric strings
    converted; the options of any other controller (import paths, plugins, registered user
    factories) unchanged — their factories check their own."""
    if target not in BUILTIN_CONTROLLERS:
        return dict(options)
    factory = resolve_factory(target)
    table = options_of(factory)
    if table is None or not getattr(factory, "__module__", "").startswith("residual_quad."):
        return dict(options)
    return check_options(target, table, options, spec)


def keyword_options(factory: Any) -> list[str] | None:
    """The keyword options a factory accepts (None if it takes ``**kwargs`` or is opaque)."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    names = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [n for n in names if n not in ("self", "context")]


def check_controller(obj: Any, spec: str) -> None:
    """``ValueError`` naming ``spec`` and what is missing unless ``obj`` is a :class:`Controller`
    whose ``action_mode`` is one of the env's."""
    missing = [m for m in ("reset", "policy") if not callable(getattr(obj, m, None))]
    mode = getattr(obj, "action_mode", None)
    if not isinstance(mode, str):
        missing.append("action_mode")
    if missing:
        raise ValueError(
            f"controller {spec!r} built {type(obj).__name__}, which is not a Controller: missing "
            f"{', '.join(missing)} (a Controller has reset(seed), policy(obs) -> action and an "
            f"action_mode in {', '.join(ACTION_MODES)})"
        )
    check_action_mode(mode, spec)


def check_action_mode(mode: Any, spec: str) -> None:
    """``ValueError`` naming ``spec`` unless ``mode`` is one of the env's action modes."""
    if mode not in ACTION_MODES:
        raise ValueError(
            f"controller {spec!r}: action_mode {mode!r} is not an env action mode; valid "
            f"choices: {', '.join(ACTION_MODES)}"
        )


def _parse_value(spec: str, key: str, text: str) -> Any:
    if text == "":
        raise ValueError(f"controller spec {spec!r}: option {key!r} has no value (key=value)")
    try:
        value = configs.parse_yaml(text)  # the config loader's scalars: 1e3 is a float
    except yaml.YAMLError:
        raise ValueError(
            f"controller spec {spec!r}: option {key}={text!r} is not a YAML scalar"
        ) from None
    if isinstance(value, list | dict) or not isinstance(value, str | int | float | bool):
        if value is not None:
            raise ValueError(
                f"controller spec {spec!r}: option {key}={text!r} is not a scalar (write lists "
                "and mappings in the YAML mapping form)"
            )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"controller spec {spec!r}: option {key}={text} is not a finite number")
    return value


def _parse_items(spec: str, items: str, positional: str | None) -> dict[str, Any]:
    """``a,k=v,k2=v2`` → options; the first bare value goes to ``positional`` if given."""
    if items == "":
        raise ValueError(f"controller spec {spec!r}: nothing after ':'")
    opts: dict[str, Any] = {}
    for i, item in enumerate(items.split(",")):
        if "=" not in item:
            if i == 0 and positional is not None and item.strip():
                opts[positional] = item.strip()
                continue
            what = "an empty item" if not item.strip() else f"the bare value {item!r}"
            raise ValueError(
                f"controller spec {spec!r}: {what} where key=value was expected"
                + (
                    ""
                    if positional is None
                    else f" (only the first value may be bare: {positional})"
                )
            )
        key, _, text = item.partition("=")
        key = key.strip()
        if not _IDENT.match(key):
            raise ValueError(f"controller spec {spec!r}: {key!r} is not an option name")
        if key in opts:
            raise ValueError(f"controller spec {spec!r}: option {key!r} is given twice")
        opts[key] = _parse_value(spec, key, text.strip())
    return opts


def _unknown(name: str, spec: str) -> ValueError:
    where = "" if name == spec else f" in spec {spec!r}"
    return ValueError(
        f"unknown controller {name!r}{where}; valid choices: "
        f"{', '.join(available_controllers())}, or an import path module:Factory"
    )


def parse_spec(text: str) -> ControllerSpec:
    """Parse a compact spec string (``geo``, ``hnewton:lm``, ``geo:kp=15``, ``pkg.mod:Make``,
    ``pkg.mod:Make:gain=2``) without importing user code; ``ValueError`` if it is malformed or
    a built-in's option is unknown or outside its domain (:func:`check_spec_options`, which
    imports that built-in's module for its ``OPTIONS`` table)."""
    if not isinstance(text, str):
        raise ValueError(f"a controller spec must be a string, got {text!r}")
    spec = text.strip()
    if not spec:
        raise ValueError(
            "empty controller spec; valid choices: " + ", ".join(available_controllers())
        )
    head, colon, rest = spec.partition(":")
    first = re.split(r"[:,]", rest, maxsplit=1)[0]
    registered = available_controllers()
    is_import = "." in head or (
        head not in registered and colon and "=" not in first and _is_dotted(first)
    )
    if is_import:
        attr, colon2, items = rest.partition(":")
        if not _is_dotted(head):
            raise ValueError(f"controller spec {spec!r}: {head!r} is not a module path")
        if not colon or not _is_dotted(attr):
            raise ValueError(
                f"controller spec {spec!r}: an import path is module:Factory (options after a "
                "second ':', e.g. my_pkg.ctrl:Make:gain=2)"
            )
        opts = _parse_items(spec, items, None) if colon2 else {}
        return ControllerSpec(f"{head}:{attr}", opts, spec)
    if head not in registered:
        raise _unknown(head, spec)
    opts = _parse_items(spec, rest, POSITIONAL_OPTION.get(head)) if colon else {}
    check_spec_options(head, opts, spec)  # a built-in's options against their domains, now
    return ControllerSpec(head, opts, spec)


@dataclass
class ControllerEntry:
    """A controller in a sweep/stress YAML written as a mapping: a spec, options and a label."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    label: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ValueError(
                f"controller entry: spec must be a non-empty string, got {self.spec!r}"
            )
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ValueError(f"controller {self.spec!r}: options must be a mapping of names")
        if self.label is not None and (not isinstance(self.label, str) or not self.label.strip()):
            raise ValueError(f"controller {self.spec!r}: label must be a non-empty string")


def default_label(target: str, options: Mapping[str, Any], text: str | None = None) -> str:
    """The label of a spec without ``label:``: a registered spec's own text, else the factory's
    ``label`` attribute or its name, with the options compactly (``PD:kp=4``)."""
    if ":" not in target:
        if text is not None:
            return text
        base = target
    else:
        factory = resolve_factory(target)
        own = getattr(factory, "label", None)
        base = own.strip() if isinstance(own, str) and own.strip() else ""
        base = base or target.rpartition(":")[2].rpartition(".")[2]
    if not options:
        return base
    return base + ":" + ",".join(f"{k}={_compact(v)}" for k, v in options.items())


def resolve_entry(entry: str | ControllerEntry | Mapping[str, Any]) -> ControllerSpec:
    """The spec of a config entry (a compact string or a mapping), its label resolved."""
    if isinstance(entry, Mapping):
        entry = ControllerEntry(**entry)
    if isinstance(entry, str):
        parsed = parse_spec(entry)
        label = (
            default_label(parsed.target, parsed.options) if parsed.is_import_path else parsed.label
        )
        return ControllerSpec(parsed.target, parsed.options, label)
    if not isinstance(entry, ControllerEntry):
        raise ValueError(f"a controller is a spec string or a mapping, got {entry!r}")
    parsed = parse_spec(entry.spec)
    both = sorted(set(parsed.options) & set(entry.options))
    if both:
        raise ValueError(f"controller {entry.spec!r}: option(s) {both} given twice")
    for k, v in entry.options.items():
        _check_finite(entry.spec, k, v)
    opts = {**parsed.options, **entry.options}
    if not parsed.is_import_path:
        check_spec_options(parsed.target, opts, entry.spec)
    if entry.label is not None:
        label = entry.label.strip()
    elif parsed.is_import_path or entry.options:
        label = default_label(parsed.target, opts, None if entry.options else parsed.label)
    else:
        label = parsed.label
    if parsed.is_import_path:
        resolve_factory(parsed.target)  # importable now, or a clear error
    return ControllerSpec(parsed.target, opts, label)


def entry_label(entry: Any) -> str | None:
    """The label of an entry of a *saved* config without importing anything (report ordering):
    a string is its own label unless it is an import path; a mapping carries ``label``."""
    if isinstance(entry, ControllerEntry):
        return entry.label
    if isinstance(entry, Mapping):
        label = entry.get("label")
        return label if isinstance(label, str) else None
    return entry if isinstance(entry, str) else None


def resolve_entries(entries: list[Any]) -> list[ControllerSpec]:
    """Resolve every entry; a label used twice is a ``ValueError`` naming it."""
    specs = [resolve_entry(e) for e in entries]
    seen: set[str] = set()
    for s in specs:
        if s.label in seen:
            raise ValueError(
                f"controllers: {s.label!r} is listed twice; every entry must be unique (two "
                "controllers need two labels: label: in the YAML mapping form)"
            )
        seen.add(s.label)
    return specs


def normalized_entries(entries: list[Any], specs: list[ControllerSpec]) -> list[Any]:
    """Entries as a saved config records them: registered compact strings stay as written, every
    other entry becomes a mapping with its resolved label (so a report reads labels without
    importing user code, and ``--resume`` gets the same labels)."""
    out: list[Any] = []
    for e, s in zip(entries, specs, strict=True):
        if isinstance(e, str) and not s.is_import_path and s.label == e.strip():
            out.append(e)
            continue
        if isinstance(e, ControllerEntry) and e.label is not None:
            out.append(e)
            continue
        text = e if isinstance(e, str) else e.spec
        opts = {} if isinstance(e, str) else dict(e.options)
        out.append(ControllerEntry(text, opts, s.label))
    return out


def split_specs(text: str) -> list[str]:
    """A CLI comma list of specs → the specs: an item ``key=value`` (an ``=`` with no ``:``
    before it) continues the previous spec's options, so ``geo:kp=15,kd=8,pid`` is two specs."""
    out: list[str] = []
    for item in text.split(","):
        stripped = item.strip()
        eq, colon = stripped.find("="), stripped.find(":")
        if eq > 0 and (colon < 0 or colon > eq):
            if not out:
                raise ValueError(f"controller list {text!r}: option {stripped!r} before any spec")
            out[-1] += "," + stripped
        else:
            out.append(stripped)
    if not all(out):
        raise ValueError(f"controller list {text!r} has an empty entry")
    return out


def make_controller(name: str, env_or_context: Any = None, **overrides: Any) -> Controller:
    """Build a controller from a name or a spec.

    Args:
        name: one of :func:`~residual_quad.controllers.base.available_controllers`, or a spec
            (``hnewton:lm``, ``geo:kp=15``, ``my_pkg.ctrl:Factory``; grammar in
            ``docs/controllers.md``).
        env_or_context: a ``ResidualQuad-v0`` env (its nominal airframe and control period are
            used), a :class:`~residual_quad.controllers.base.ControlContext`, or ``None`` for the
            defaults.
        **overrides: controller-specific settings (gains, weight files, ...); they win over the
            spec's options.
    """
    return parse_spec(name).build(controller_context(env_or_context), **overrides)


def controller_listing() -> str:
    """Every name :func:`make_controller` accepts, and where it
    comes from (built-in or the plugin's distribution); nothing is imported."""
    from residual_quad.controllers import base

    lines = []
    for name, factory in base._REGISTRY.items():
        where = factory if isinstance(factory, str) else getattr(factory, "__qualname__", "")
        arg = POSITIONAL_OPTION.get(name)
        usage = f"{name}[:{arg.upper()}][,key=value...]" if arg else f"{name}[:key=value,...]"
        lines.append(f"{name:<14} registered  {usage}  ({where})")
    for name, ep in base.plugin_entry_points().items():
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        lines.append(f"{name:<14} plugin      from distribution {dist}  ({ep.value})")
    lines.append("or an import path: module:Factory[:key=value,...] (see docs/controllers.md)")
    return "\n".join(lines)
