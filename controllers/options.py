"""Domains of controller options, checked when a spec is parsed.

Every built-in controller declares one table, ``OPTIONS: dict[str, Domain]``, next to its class
(the option name → what values it accepts: a finite number with bounds, an integer, a choice, a
flag, a path, an object). :func:`check_options` checks a spec's options against it — at
``make_controller``, ``rquad eval --controller`` and sweep/stress config loading — so that a bad
value is a one-line ``ValueError`` naming the controller, the option and its domain
(``geo: option kp must be a finite number > 0, got -5``) instead of a failure mid-flight.

A spec's option values come from YAML scalars, so a number may arrive as a string (``1e5`` is a
string to YAML 1.1): :class:`Number` accepts numeric strings, and refuses what ``float()`` turns
into a non-finite number (``nan``, ``inf``, ``1e400``). :func:`check_options` returns the options
with such strings converted, which is what the factory is given.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class _Refused(Exception):
    """A value outside a domain (the caller words the error)."""


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


class Domain:
    """What one option accepts: :meth:`check` returns the value to use or raises."""

    def describe(self) -> str:
        """The domain in words, completing "option X must be ..."."""
        raise NotImplementedError

    def check(self, value: Any) -> Any:
        raise NotImplementedError


def _real(value: Any) -> float:
    """``value`` as a float: a real number or a numeric string (not a bool); else refused."""
    if isinstance(value, bool):
        raise _Refused
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise _Refused from None
    raise _Refused


@dataclass(frozen=True)
class Number(Domain):
    """A finite real number within optional bounds (``gt``/``ge`` below, ``lt``/``le`` above)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def describe(self) -> str:
        return "a finite number" + _bounds(self.gt, self.ge, self.lt, self.le)

    def check(self, value: Any) -> Any:
        x = _real(value)
        if not math.isfinite(x) or not _within(x, self.gt, self.ge, self.lt, self.le):
            raise _Refused
        return x if isinstance(value, str) else value


@dataclass(frozen=True)
class Integer(Domain):
    """A whole number (an integral float or numeric string is accepted) within bounds."""

    ge: int | None = None
    le: int | None = None

    def describe(self) -> str:
        return "an integer" + _bounds(None, self.ge, None, self.le)

    def check(self, value: Any) -> int:
        x = _real(value)
        if not math.isfinite(x) or x != int(x) or not _within(x, None, self.ge, None, self.le):
            raise _Refused
        return int(x)


@dataclass(frozen=True)
class Choice(Domain):
    """One of a fixed set of strings (``fold``: compared case-insensitively, given as listed)."""

    values: tuple[str, ...]
    fold: bool = False

    def describe(self) -> str:
        return "one of " + ", ".join(self.values)

    def check(self, value: Any) -> str:
        if isinstance(value, str):
            for v in self.values:
                if value == v or (self.fold and value.upper() == v.upper()):
                    return v
        raise _Refused


_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


@dataclass(frozen=True)
class Flag(Domain):
    """``true`` or ``false`` (a bool, or one of the usual spellings as a string)."""

    def describe(self) -> str:
        return "true or false"

    def check(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _Refused


@dataclass(frozen=True)
class Text(Domain):
    """A non-empty string (a path, a device name); ``objects``: other accepted types (``Path``)."""

    what: str = "a non-empty string"
    objects: tuple[type, ...] = ()

    def describe(self) -> str:
        return self.what

    def check(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            return value
        if self.objects and isinstance(value, self.objects):
            return value
        raise _Refused


@dataclass(frozen=True)
class Items(Domain):
    """A non-empty list of values of one domain (a YAML sequence)."""

    item: Domain

    def describe(self) -> str:
        return f"a non-empty list of {self.item.describe()}"

    def check(self, value: Any) -> Any:
        if not isinstance(value, list | tuple) or not value:
            raise _Refused
        return type(value)(self.item.check(v) for v in value)


@dataclass(frozen=True)
class Section(Domain):
    """A mapping of settings, each checked against ``table`` (a config section given whole:
    ``rls={"p0": 0.1}``); an object of one of ``objects`` passes as it is."""

    name: str
    table: Mapping[str, Domain]
    objects: tuple[type, ...] = ()

    def describe(self) -> str:
        return f"a mapping of {self.name} settings ({', '.join(self.table)})"

    def check(self, value: Any) -> Any:
        if self.objects and isinstance(value, self.objects):
            return value
        if not isinstance(value, Mapping):
            raise _Refused
        return value  # entries are checked by check_options, which can name them


@dataclass(frozen=True)
class Instance(Domain):
    """An object the factory takes as it is (a network, a config, gains); ``coerce`` may accept
    other forms (e.g. a mapping of the dataclass's fields)."""

    types: tuple[type, ...]
    what: str
    coerce: Callable[[Any], Any] | None = None

    def describe(self) -> str:
        return self.what

    def check(self, value: Any) -> Any:
        if isinstance(value, self.types):
            return value
        if self.coerce is not None:
            try:
                return self.coerce(value)
            except (TypeError, ValueError):
                raise _Refused from None
        raise _Refused


@dataclass(frozen=True)
class Optional(Domain):
    """``None`` (``null``: the default behaviour) or a value of ``domain``."""

    domain: Domain

    def describe(self) -> str:
        return f"{self.domain.describe()} or null"

    def check(self, value: Any) -> Any:
        return None if value is None else self.domain.check(value)


def _bounds(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    lo = f"> {gt:g}" if gt is not None else f">= {ge:g}" if ge is not None else ""
    hi = f"< {lt:g}" if lt is not None else f"<= {le:g}" if le is not None else ""
    if lo and hi:
        left = "(" if gt is not None else "["
        right = ")" if lt is not None else "]"
        a = gt if gt is not None else ge
        b = lt if lt is not None else le
        return f" in {left}{a:g}, {b:g}{right}"
    return f" {lo or hi}" if lo or hi else ""


def _within(x: float, gt: Any, ge: Any, lt: Any, le: Any) -> bool:
    return (
        (gt is None or x > gt)
        and (ge is None or x >= ge)
        and (lt is None or x < lt)
        and (le is None or x <= le)
    )


#: the domains most options share
POSITIVE = Number(gt=0.0)
NON_NEGATIVE = Number(ge=0.0)


@dataclass(frozen=True)
class Range:
    """The search range of a tunable option (``rquad tune``): ``[low, high]``, log-uniform when
    ``log``. A controller declares its ranges in ``TUNABLE`` next to its ``OPTIONS`` table,
    keyed by option path (``kp``, ``attitude.wn_rp``: a field of a mapping option)."""

    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        for name in ("low", "high"):
            x = getattr(self, name)
            if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
                raise ValueError(f"range {name} must be a finite number, got {_shown(x)}")
        if not self.low < self.high:
            raise ValueError(f"range needs low < high, got [{self.low}, {self.high}]")
        if not isinstance(self.log, bool):
            raise ValueError(f"range log must be true or false, got {_shown(self.log)}")
        if self.log and self.low <= 0.0:
            raise ValueError(f"a log range needs low > 0, got [{self.low}, {self.high}]")


def tunable_of(factory: Any) -> Mapping[str, Range]:
    """The search ranges a factory declares (its ``TUNABLE`` attribute; empty without one)."""
    table = getattr(factory, "TUNABLE", None)
    return table if isinstance(table, Mapping) else {}


def nested_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """Option paths → options: ``{"kp": 3, "attitude.wn_rp": 12}`` → ``{"kp": 3, "attitude":
    {"wn_rp": 12}}``."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        head, dot, field_name = path.partition(".")
        if dot:
            out.setdefault(head, {})[field_name] = value
        else:
            out[head] = value
    return out


def check_options(
    controller: str,
    table: Mapping[str, Domain],
    options: Mapping[str, Any],
    spec: str | None = None,
) -> dict[str, Any]:
    """``options`` checked against ``table`` (option → :class:`Domain`), returned with numeric
    strings converted; a ``ValueError`` naming ``controller`` (and the ``spec`` text, if given),
    the option and its domain for an unknown option (the valid ones listed) or a value outside
    its domain. The entries of a :class:`Section` mapping are checked against its table (named
    ``section.key``)."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        domain = table.get(key)
        if domain is None:
            where = f" in spec {spec!r}" if spec and spec != controller else ""
            raise ValueError(
                f"{controller}: unknown option {key!r}{where}; valid options: {', '.join(table)}"
            )
        out[key] = _check_one(controller, key, domain, value)
        if isinstance(domain, Section) and isinstance(value, Mapping):
            out[key] = {
                k: _check_section_entry(controller, key, domain, k, v) for k, v in value.items()
            }
    return out


def _check_section_entry(controller: str, section: str, domain: Section, key: Any, value: Any):
    inner = domain.table.get(key) if isinstance(key, str) else None
    if inner is None:
        raise ValueError(
            f"{controller}: unknown option {section}.{key}; valid options of {section}: "
            f"{', '.join(domain.table)}"
        )
    return _check_one(controller, f"{section}.{key}", inner, value)


def _check_one(controller: str, key: str, domain: Domain, value: Any) -> Any:
    try:
        return domain.check(value)
    except _Refused:
        raise ValueError(
            f"{controller}: option {key} must be {domain.describe()}, got {_shown(value)}"
        ) from None


def options_of(factory: Any) -> Mapping[str, Domain] | None:
    """The option table a factory declares (its ``OPTIONS`` attribute), or ``None``."""
    table = getattr(factory, "OPTIONS", None)
    return table if isinstance(table, Mapping) else None
