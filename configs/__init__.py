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

    ``name`` may include a sub-folder (``"stick/s2"``); a ``.yaml`` suffix is optional.
    """
    rel = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    path = Path(str(resources.files("residual_quad.configs").joinpath(rel)))
    if not path.is_file():
        available = sorted(
            str(p.relative_to(path.parents[len(Path(rel).parts) - 1]).with_suffix(""))
            for p in Path(str(resources.files("residual_quad.configs"))).rglob("*.yaml")
        )
        raise FileNotFoundError(f"no shipped config {name!r}; available: {', '.join(available)}")
    return path


def resolve(name_or_path: str | Path) -> Path:
    """A filesystem path if it exists, else a shipped config of that name."""
    p = Path(name_or_path)
    return p if p.is_file() else shipped(str(name_or_path))


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        for a in args:
            if dataclasses.is_dataclass(a) and isinstance(value, dict):
                return from_dict(a, value, where)
        return value
    if origin in (list, tuple) and isinstance(value, list | tuple):
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys raise ``ValueError``."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {k: _convert(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None


def load(cls: type[T], source: str | Path | dict[str, Any] | None = None, **overrides: Any) -> T:
    """Load ``cls`` from a YAML path, a shipped config name, a dict or defaults, then override."""
    if source is None:
        data: dict[str, Any] = {}
        where = cls.__name__
    elif isinstance(source, dict):
        data, where = dict(source), cls.__name__
    else:
        path = resolve(source)
        data = yaml.safe_load(path.read_text()) or {}
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
