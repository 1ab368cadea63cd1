"""Shipped YAML configs and the strict loader that turns YAML into typed dataclasses.

YAML only ever *loads into* a dataclass: unknown keys are errors (with the valid keys listed),
nested dataclasses are built recursively, and :func:`dump` writes the resolved config back so that
every output folder records exactly what produced it.

Numbers are read as Python and YAML 1.2 read them: ``1e9``, ``1.0e9`` and ``1E-3`` are floats
(PyYAML's YAML 1.1 resolver alone wants a dot and a signed exponent and makes them strings).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def shipped(name: str) -> Path:
    """Path of a shipped config: ``shipped("sweep")`` → ``.../configs/sweep.yaml``.

    ``name`` is a plain file name (no folder); a ``.yaml`` suffix is optional.
    """
    rel = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    folder = Path(str(resources.files("residual_quad.configs")))
    path = folder / rel
    if Path(rel).name != rel or not path.is_file():
        available = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
        raise FileNotFoundError(
            f"no config file {name!r} and no shipped config of that name; shipped: {available}"
        )
    return path


def resolve(name_or_path: str | Path) -> Path:
    """A filesystem path if it exists, else a shipped config of that name."""
    p = Path(name_or_path)
    return p if p.is_file() else shipped(str(name_or_path))


def from_dict(cls: type[T], data: Any, where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping, recursively.

    Unknown or missing keys, wrong types (including non-finite numbers where a ``float`` is
    expected) and the dataclass's own validation errors raise ``ValueError`` naming ``where`` (a
    file or section), the key path (``file.yaml: scenarios[0].trajectory.params``) and, for
    keys, the valid ones.
    """
    return _build(cls, data, where, "")


def _at(where: str, path: str) -> str:
    """``where`` plus a key path, as error messages show it."""
    return f"{where}: {path}" if path else where


def _key(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _build(cls: type[T], data: Any, where: str, path: str) -> T:
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{_at(where, path)}: expected a mapping for {cls.__name__}, "
            f"got {type(data).__name__} {_short(data)}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(map(str, data)) - set(fields))
    if unknown or not all(isinstance(k, str) for k in data):
        raise ValueError(
            f"{_at(where, path)}: unknown key(s) {unknown}; valid keys: {sorted(fields)}"
        )
    required = [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [n for n in required if n not in data]
    if missing:
        raise ValueError(f"{_at(where, path)}: missing required key(s) {missing} of {cls.__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {
        name: _coerce(hints[name], value, where, _key(path, name)) for name, value in data.items()
    }
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ValueError(f"{_at(where, path)}: {exc}") from None


def _short(value: Any, limit: int = 80) -> str:
    """``repr`` of a value, cut to ``limit`` characters (error messages stay one short line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(tp: Any) -> type | None:
    """The YAML node type a hint expects (``dict``, ``list``, ``str``, a number...), if simple."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) or origin is dict or tp is dict:
        return dict
    if origin in (list, tuple) or tp in (list, tuple):
        return list
    if tp in (float, int):
        return float
    if tp in (str, bool):
        return tp
    return None


def _value_kind(value: Any) -> type:
    if isinstance(value, dict):
        return dict
    if isinstance(value, list | tuple):
        return list
    if isinstance(value, bool):
        return bool
    if isinstance(value, int | float):
        return float
    return type(value)


def _coerce(tp: Any, value: Any, where: str, path: str) -> Any:
    """Check/convert one YAML value against a (simple) type hint."""
    origin = typing.get_origin(tp)
    at = _at(where, path)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where, path)  # type: ignore[arg-type]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return None
        errors = []
        for arg in args:
            try:
                return _coerce(arg, value, where, path)
            except ValueError as exc:
                errors.append((arg, str(exc)))
        # report the alternative of the value's own shape (a mapping's error for a mapping)
        for arg, msg in errors:
            if _kind(arg) is _value_kind(value):
                raise ValueError(msg)
        names = " or ".join(getattr(a, "__name__", None) or str(a) for a in args)
        raise ValueError(f"{at}: expected {names}, got {_short(value)}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{at}: expected a list, got {_short(value)}")
        args = typing.get_args(tp) or (Any,)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):  # a fixed-size tuple, e.g. a point (x, y, z)
                raise ValueError(f"{at}: expected {len(args)} values, got {_short(value)}")
            return tuple(
                _coerce(a, v, where, f"{path}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        items = [_coerce(args[0], v, where, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{at}: expected a mapping, got {_short(value)}")
        key_tp, val_tp = typing.get_args(tp) or (Any, Any)
        out = {}
        for k, v in value.items():
            if key_tp is str and not isinstance(k, str):
                raise ValueError(f"{at}: keys must be strings, got {_short(k)}")
            out[k] = _coerce(val_tp, v, where, _key(path, k))
        return out
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{at}: expected a number, got {_short(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ValueError(f"{at}: expected a finite number, got {_short(value)}")
        return number
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{at}: expected an integer, got {_short(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{at}: expected true/false, got {_short(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{at}: expected a string, got {_short(value)}")
        return value
    return value


FLOAT_PATTERN = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
"""The plain scalars read as floats: PyYAML's YAML 1.1 float pattern, with the exponent's sign
optional and the dot optional before an exponent (``1e9``, ``1.0e9``, ``1E-3``, ``.5e3`` — floats
in YAML 1.2 and in Python — which PyYAML alone reads as strings)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error (PyYAML
    silently keeps the last one, so a duplicated key would hide the first value), and that
    ``1e9``, ``1.0e9`` and ``1E-3`` are floats (:data:`FLOAT_PATTERN`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


# the float resolver replaced in this loader's own copy of the table (yaml.SafeLoader unchanged)
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_PATTERN, list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parse YAML text with the config loader (duplicate keys are errors, ``1e9`` is a float);
    PyYAML's errors propagate."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: str | Path) -> Any:
    """Parse one YAML file strictly (duplicate keys are errors); ``ValueError`` names the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a YAML file") from None
    try:
        return parse_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = " ".join(f"{exc.context or ''} {exc.problem or ''}".split())
        raise ValueError(f"{path}: invalid YAML{line} ({detail})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid YAML (nested too deeply)") from None


def load(cls: type[T], source: str | Path | dict[str, Any] | None = None, **overrides: Any) -> T:
    """Load ``cls`` from a YAML path, a shipped config name, a dict or defaults, then override.

    A YAML file must hold a mapping at its top level: an empty file or a list/scalar document is
    a ``ValueError`` naming the file (an empty file would otherwise silently mean "defaults").
    """
    if source is None:
        data: dict[str, Any] = {}
        where = cls.__name__
    elif isinstance(source, dict):
        data, where = dict(source), cls.__name__
    else:
        path = resolve(source)
        where = str(path)
        parsed = read_yaml(path)
        if parsed is None:
            raise ValueError(
                f"{where}: empty config file; expected a mapping of {cls.__name__} keys"
            )
        if not isinstance(parsed, dict):
            raise ValueError(
                f"{where}: the top level must be a mapping of {cls.__name__} keys, "
                f"got {type(parsed).__name__} {_short(parsed)}"
            )
        data = parsed
    data.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(cls, data, where)


def to_dict(obj: Any) -> Any:
    """A dataclass (recursively) as plain YAML-friendly Python data."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dump(obj: Any, path: str | Path) -> Path:
    """Write the resolved config ``obj`` as YAML to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(obj), sort_keys=False))
    return path


class _Unset:
    """The value of a key one config lacks (:func:`first_difference`)."""

    def __repr__(self) -> str:
        return "(not set)"


#: what :func:`first_difference` reports for a key one side does not have
UNSET: Any = _Unset()


def field_defaults(cls: type) -> dict[str, Any]:
    """The default of every field of the dataclass ``cls`` that has one, as plain data
    (:func:`to_dict`), without building ``cls`` (no validation)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = to_dict(f.default_factory())
        elif f.default is not dataclasses.MISSING:
            out[f.name] = to_dict(f.default)
    return out


def first_difference(
    theirs: Any, ours: Any, ignore: typing.Iterable[str] = ()
) -> tuple[str, Any, Any] | None:
    """The first key where two configs as plain data (:func:`to_dict`, or a saved YAML) differ:
    ``(key, their value, our value)``, the key a dotted path into nested mappings
    (``env.preset``) and :data:`UNSET` for a side that lacks it; ``None`` when they agree.

    Keys are visited in ``ours``' order, then those only ``theirs`` has; top-level keys in
    ``ignore`` are not compared. Lists and scalars compare whole (``1 == 1.0``)."""
    skip = set(ignore)

    def walk(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return None if a == b else (path, a, b)
        for key in [*b, *(k for k in a if k not in b)]:
            if not path and key in skip:
                continue
            found = walk(
                a.get(key, UNSET), b.get(key, UNSET), f"{path}.{key}" if path else str(key)
            )
            if found is not None:
                return found
        return None

    return walk(theirs, ours, "")
