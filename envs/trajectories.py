"""Reference trajectories with analytic derivatives [RES §8].

A trajectory is any object with ``__call__(t) -> Reference``; subclass :class:`Trajectory` to
write your own and pass the instance as ``trajectory=`` to the environment.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from residual_quad.envs.checks import real, vector


@dataclass(frozen=True)
class Reference:
    """Reference state at one time."""

    pos: np.ndarray  # m, world
    vel: np.ndarray  # m/s, world
    acc: np.ndarray  # m/s², world
    yaw: float  # rad
    yaw_rate: float = 0.0  # rad/s


class Trajectory:
    """Base class: implement :meth:`__call__` returning a :class:`Reference` at time ``t`` (s).

    Derivatives must be analytic (controllers use velocity and acceleration as feed-forward).
    Episodes start at rest at ``self(0).pos`` with heading ``self(0).yaw``.
    """

    name: str = "custom"

    def __call__(self, t: float) -> Reference:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Hover(Trajectory):
    """Hold a fixed point: the strictest steady-state test (no motion masks a model bias)."""

    point: tuple[float, float, float] = (0.0, 0.0, 1.5)  # m
    heading: float = 0.0  # rad
    name = "hover"

    def __post_init__(self) -> None:
        vector("hover point", self.point, 3, "m")
        real("hover heading", self.heading, unit="rad")

    def __call__(self, t: float) -> Reference:
        z = np.zeros(3)
        return Reference(np.array(self.point, dtype=float), z, z.copy(), self.heading)


@dataclass(frozen=True)
class Helix(Trajectory):
    """Climbing circle: radius ``radius``, ``turns`` turns of ``period`` s while z goes low → high.

    The climb is a half cosine over ``turns·period`` so the vertical velocity is never constant
    and stays smooth; past the climb the height follows the same cosine back down. The heading
    follows the circle's tangent (initial yaw 90°).
    """

    radius: float = 2.0  # m
    period: float = 8.0  # s per turn
    turns: float = 2.0
    z_low: float = 1.5  # m
    z_high: float = 3.5  # m
    name = "helix"

    def __post_init__(self) -> None:
        real("helix radius", self.radius, low=0.0, unit="m")
        real("helix period", self.period, low=0.0, low_open=True, unit="s")
        real("helix turns", self.turns, low=0.0, low_open=True)
        real("helix z_low", self.z_low, unit="m")
        real("helix z_high", self.z_high, unit="m")

    def __call__(self, t: float) -> Reference:
        w = 2.0 * math.pi / self.period
        c, s = math.cos(w * t), math.sin(w * t)
        r = self.radius
        half = 0.5 * (self.z_high - self.z_low)
        wz = math.pi / (self.turns * self.period)
        cz, sz = math.cos(wz * t), math.sin(wz * t)
        pos = np.array([r * c, r * s, self.z_low + half * (1.0 - cz)])
        vel = np.array([-r * w * s, r * w * c, half * wz * sz])
        acc = np.array([-r * w * w * c, -r * w * w * s, half * wz * wz * cz])
        return Reference(pos, vel, acc, w * t + 0.5 * math.pi, w)


@dataclass(frozen=True)
class Figure8(Trajectory):
    """Gerono lemniscate ``x = a·sin(wt)``, ``y = b·sin(wt)·cos(wt)`` at height ``z``.

    It passes the origin at maximum speed while the curvature changes sign: large accelerations and
    fast attitude reversals.
    """

    a: float = 2.5  # m
    b: float = 1.4  # m
    period: float = 12.0  # s
    z: float = 1.5  # m
    heading: float = 0.0  # rad
    name = "figure8"

    def __post_init__(self) -> None:
        real("figure8 a", self.a, low=0.0, unit="m")
        real("figure8 b", self.b, low=0.0, unit="m")
        real("figure8 period", self.period, low=0.0, low_open=True, unit="s")
        real("figure8 z", self.z, unit="m")
        real("figure8 heading", self.heading, unit="rad")

    def __call__(self, t: float) -> Reference:
        w = 2.0 * math.pi / self.period
        s, c = math.sin(w * t), math.cos(w * t)
        s2, c2 = math.sin(2 * w * t), math.cos(2 * w * t)
        pos = np.array([self.a * s, 0.5 * self.b * s2, self.z])
        vel = np.array([self.a * w * c, self.b * w * c2, 0.0])
        acc = np.array([-self.a * w * w * s, -2.0 * self.b * w * w * s2, 0.0])
        return Reference(pos, vel, acc, self.heading)


TRAJECTORIES: dict[str, type[Trajectory]] = {"hover": Hover, "helix": Helix, "figure8": Figure8}


def make_trajectory(trajectory: str | Trajectory) -> Trajectory:
    """A trajectory from its name or a user object with ``__call__(t) -> Reference``."""
    if isinstance(trajectory, str):
        if trajectory not in TRAJECTORIES:
            raise ValueError(
                f"unknown trajectory {trajectory!r}; valid choices: {', '.join(TRAJECTORIES)} "
                "or a Trajectory instance"
            )
        return TRAJECTORIES[trajectory]()
    if not callable(trajectory):
        raise ValueError(
            f"trajectory must be one of {list(TRAJECTORIES)} or a Trajectory instance, "
            f"got {trajectory!r}"
        )
    return trajectory


def make_named_trajectory(name: str, **params: object) -> Trajectory:
    """A built-in trajectory with parameters (``Helix(period=6.0)``); an unknown name or
    parameter, or a bad value, is a ``ValueError`` that lists the valid choices."""
    if name not in TRAJECTORIES:
        raise ValueError(f"unknown trajectory {name!r}; valid choices: {', '.join(TRAJECTORIES)}")
    cls = TRAJECTORIES[name]
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown {name} trajectory parameter(s) {unknown}; valid: {', '.join(valid)}"
        )
    return cls(**params)


REFERENCE_LIMIT = 1e4
"""Largest magnitude of a reference entry (m, m/s, m/s², rad, rad/s): the observation bounds."""


def check_reference(trajectory: object, ref: object, t: float) -> Reference:
    """``ref`` (what ``trajectory(t)`` returned) if it is a :class:`Reference` with float
    3-vectors ``pos``/``vel``/``acc`` (numpy arrays) and real ``yaw``/``yaw_rate``, all finite
    and within :data:`REFERENCE_LIMIT`; else a ``TypeError`` (wrong type or shape) or
    ``ValueError`` (value) naming the trajectory. Run at reset; the step runs it only when the
    reference cannot be read (a non-finite one there ends the episode as ``non_finite``)."""
    where = f"trajectory {type(trajectory).__name__} at t = {t:g} s"
    if not isinstance(ref, Reference):
        raise TypeError(f"{where} returned {type(ref).__name__} {ref!r}; expected a Reference")
    for field in ("pos", "vel", "acc"):
        value = getattr(ref, field)
        if (
            not isinstance(value, np.ndarray)
            or value.shape != (3,)
            or value.dtype.kind not in "fiu"
        ):
            raise TypeError(
                f"{where}: Reference.{field} must be a numpy float array of shape (3,), "
                f"got {value!r}"
            )
        if not np.all(np.abs(value) <= REFERENCE_LIMIT):  # NaN fails too
            raise ValueError(
                f"{where}: Reference.{field} must be finite and within ±{REFERENCE_LIMIT:g}, "
                f"got {value!r}"
            )
    for field in ("yaw", "yaw_rate"):
        value = getattr(ref, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{where}: Reference.{field} must be a real number, got {value!r}")
        if not abs(value) <= REFERENCE_LIMIT:
            raise ValueError(
                f"{where}: Reference.{field} must be finite and within ±{REFERENCE_LIMIT:g}, "
                f"got {value!r}"
            )
    return ref


def reference_fields(trajectory: Trajectory, t: float) -> list[float]:
    """The reference part of the observation at time ``t`` (s): ``ref_pos``, ``ref_vel``,
    ``ref_acc``, the heading wrapped to ``[-π, π]`` and its rate (11 entries, the order of
    :class:`~residual_quad.envs.observation.ObsLayout`); both envs build it here.

    A reference that cannot be read raises :func:`check_reference`'s clear error."""
    ref = trajectory(t)
    try:
        return [
            *ref.pos.tolist(),
            *ref.vel.tolist(),
            *ref.acc.tolist(),
            math.remainder(ref.yaw, 2.0 * math.pi),
            ref.yaw_rate,
        ]
    except (AttributeError, TypeError, ValueError):
        check_reference(trajectory, ref, t)
        raise
