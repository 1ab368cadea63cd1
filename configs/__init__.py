"""Shipped YAML configs and the strict loader that turns YAML into typed dataclasses.

YAML only ever *loads into* a dataclass: unknown keys are errors (with the valid keys listed),
nested dataclasses are built recursively, and :func:`dump` writes the resolved config back so that
every output folder records exactly what produced it.
"""

from __future__ import annotations

import dataclasses
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
    """Build dataclass ``cls`` from a mapping, recursively; unknown keys and wrong types raise
    ``ValueError`` naming ``where`` (a file or section) and the valid keys."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping for {cls.__name__}, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """Check/convert one YAML value against a (simple) type hint."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def load(cls: type[T], source: str | Path | dict[str, Any] | None = None, **overrides: Any) -> T:
    """Load ``cls`` from a YAML path, a shipped config name, a dict or defaults, then override."""
    if source is None:
        data: dict[str, Any] = {}
        where = cls.__name__
    elif isinstance(source, dict):
        data, where = dict(source), cls.__name__
    else:
        path = resolve(source)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: invalid YAML ({exc})") from None
        where = str(path)
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
