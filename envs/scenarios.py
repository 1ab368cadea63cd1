"""Scenarios and seeds of the vector env's envs: what each env flies and how it is seeded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from residual_quad.envs.checks import seed_value

SCENARIO_KEYS: tuple[str, ...] = ("payload", "wind", "trajectory", "events", "options")
"""The keys of a scenario: ``payload``, ``wind``, ``trajectory``, ``events`` (as the single env
takes them) and ``options`` (its reset options)."""

Scenario = Mapping[str, Any]
Sampler = Callable[[np.random.Generator], Scenario]


def check_scenario(index: int, scenario: Any) -> dict[str, Any]:
    """A scenario as a dict; anything but a mapping with keys among :data:`SCENARIO_KEYS` is a
    ``ValueError`` naming the env index and the valid keys."""
    if not isinstance(scenario, Mapping):
        raise ValueError(
            f"scenario of env {index} must be a dict with keys among {', '.join(SCENARIO_KEYS)}, "
            f"got {scenario!r}"
        )
    unknown = sorted(str(k) for k in scenario if k not in SCENARIO_KEYS)
    if unknown:
        raise ValueError(
            f"scenario of env {index}: unknown keys {unknown}; valid: {', '.join(SCENARIO_KEYS)}"
        )
    return dict(scenario)


def scenario_list(scenarios: Scenario | Sequence[Scenario] | None, n: int) -> list[Scenario]:
    """``n`` scenarios from ``None`` (every env from the keyword arguments), one scenario
    (broadcast) or a list of ``n``; anything else is a ``ValueError``."""
    if scenarios is None:
        return [{}] * n
    if isinstance(scenarios, Mapping):
        return [scenarios] * n
    if not isinstance(scenarios, Sequence) or isinstance(scenarios, str):
        raise ValueError(
            f"scenarios must be None, one scenario dict or a list of {n}, got {scenarios!r}"
        )
    if len(scenarios) != n:
        raise ValueError(
            f"scenarios has {len(scenarios)} entries; give one per env ({n}) or a "
            f"single scenario dict to broadcast"
        )
    return list(scenarios)


def env_seeds(seed: Any, n: int) -> list[int | None]:
    """The seed of every env for ``reset(seed=...)``: ``None``, an integer ``s >= 0`` (env
    ``i`` gets ``s + i``) or a sequence of ``n`` entries, each an integer ``>= 0`` or ``None``;
    numpy integers are accepted, anything else is a ``ValueError`` naming ``seed`` and what it
    accepts."""
    if seed is None:
        return [None] * n
    if isinstance(seed, Sequence | np.ndarray) and not isinstance(seed, str | bytes):
        seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(
                f"seed list has {len(seeds)} entries, num_envs is {n}: give one seed per env"
            )
        return [seed_value(s, f"seed[{i}]") for i, s in enumerate(seeds)]
    try:
        first = seed_value(seed)
    except ValueError:
        raise ValueError(
            f"seed must be an integer >= 0 (env i gets seed + i), a list of {n} integers "
            f">= 0 or None (one per env), or None; got {seed!r}"
        ) from None
    assert first is not None
    return [first + i for i in range(n)]
