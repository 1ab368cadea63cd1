"""Reference trajectories with analytic derivatives [RES §8].

A trajectory is any object with ``__call__(t) -> Reference``; subclass :class:`Trajectory` to
write your own and pass the instance as ``trajectory=`` to the environment.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.envs.checks import real, vector
from residual_quad.envs.xp import ARRAYS, FLOATS, Namespace

Motion = tuple[Any, ...]
"""A built-in trajectory's :meth:`~Helix.motion`: the 11 entries ``x y z`` (m), ``vx vy vz``
(m/s), ``ax ay az`` (m/s², world) and the heading and its rate (rad, rad/s, unwrapped), each a
float (one time) or a float64 array (one element per time; a constant entry may stay a float)."""


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

    def motion(self, t: Any, xp: Namespace = FLOATS) -> Motion:
        """The reference entries at ``t`` (s; a float, or an array with ``xp`` ARRAYS)."""
        x, y, z = (float(v) for v in self.point)
        return x, y, z, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.heading, 0.0

    def __call__(self, t: float) -> Reference:
        return reference_of(self.motion(t))


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

    def motion(self, t: Any, xp: Namespace = FLOATS) -> Motion:
        """The reference entries at ``t`` (s; a float, or an array with ``xp`` ARRAYS)."""
        w = 2.0 * math.pi / self.period
        c, s = xp.cos(w * t), xp.sin(w * t)
        r = self.radius
        half = 0.5 * (self.z_high - self.z_low)
        wz = math.pi / (self.turns * self.period)
        cz, sz = xp.cos(wz * t), xp.sin(wz * t)
        return (
            r * c,
            r * s,
            self.z_low + half * (1.0 - cz),
            -r * w * s,
            r * w * c,
            half * wz * sz,
            -r * w * w * c,
            -r * w * w * s,
            half * wz * wz * cz,
            w * t + 0.5 * math.pi,
            w,
        )

    def __call__(self, t: float) -> Reference:
        return reference_of(self.motion(t))


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

    def motion(self, t: Any, xp: Namespace = FLOATS) -> Motion:
        """The reference entries at ``t`` (s; a float, or an array with ``xp`` ARRAYS)."""
        w = 2.0 * math.pi / self.period
        s, c = xp.sin(w * t), xp.cos(w * t)
        s2, c2 = xp.sin(2 * w * t), xp.cos(2 * w * t)
        return (
            self.a * s,
            0.5 * self.b * s2,
            float(self.z),
            self.a * w * c,
            self.b * w * c2,
            0.0,
            -self.a * w * w * s,
            -2.0 * self.b * w * w * s2,
            0.0,
            self.heading,
            0.0,
        )

    def __call__(self, t: float) -> Reference:
        return reference_of(self.motion(t))


@dataclass(frozen=True)
class Lissajous(Trajectory):
    """A 3-D Lissajous curve around ``(0, 0, z)``: ``x = a·sin(f_x·wt + phase)``,
    ``y = b·sin(f_y·wt)``, ``z = z + c·sin(f_z·wt)`` with ``w = 2π/period``.

    Integer frequency ratios close the curve once per ``period``; the agile tracking task of
    [LEVELING] and a training and tuning family of shapes the evaluation never flies.
    """

    a: float = 2.0  # m
    b: float = 1.5  # m
    c: float = 0.3  # m
    f_x: float = 1.0
    f_y: float = 2.0
    f_z: float = 3.0
    phase: float = 0.5 * math.pi  # rad, of x
    period: float = 12.0  # s
    z: float = 1.5  # m
    heading: float = 0.0  # rad
    name = "lissajous"

    def __post_init__(self) -> None:
        for key in ("a", "b", "c"):
            real(f"lissajous {key}", getattr(self, key), low=0.0, unit="m")
        for key in ("f_x", "f_y", "f_z"):
            real(f"lissajous {key}", getattr(self, key), low=0.0)
        real("lissajous phase", self.phase, unit="rad")
        real("lissajous period", self.period, low=0.0, low_open=True, unit="s")
        real("lissajous z", self.z, unit="m")
        real("lissajous heading", self.heading, unit="rad")

    def motion(self, t: Any, xp: Namespace = FLOATS) -> Motion:
        """The reference entries at ``t`` (s; a float, or an array with ``xp`` ARRAYS)."""
        w = 2.0 * math.pi / self.period
        amps = (self.a, self.b, self.c)
        rates = (self.f_x * w, self.f_y * w, self.f_z * w)
        angles = [rate * t for rate in rates]
        angles[0] = angles[0] + self.phase
        sines = [xp.sin(ang) for ang in angles]
        cosines = [xp.cos(ang) for ang in angles]
        pos = [amp * s for amp, s in zip(amps, sines, strict=True)]
        pos[2] = pos[2] + self.z
        return (
            *pos,
            *(amp * r * c for amp, r, c in zip(amps, rates, cosines, strict=True)),
            *(-amp * r * r * s for amp, r, s in zip(amps, rates, sines, strict=True)),
            self.heading,
            0.0,
        )

    def __call__(self, t: float) -> Reference:
        return reference_of(self.motion(t))


SPLINE_BOX_LIMIT_M = 1000.0  # m, the largest half-width and centre height of a spline's box


@dataclass(frozen=True)
class Spline(Trajectory):
    """A closed, twice continuously differentiable path through ``waypoints`` random points.

    The points are drawn from ``seed`` inside a box of half-widths ``(size, size, height)`` m
    around ``(0, 0, z)`` and joined by a periodic quintic spline (scipy's ``make_interp_spline``:
    continuous to the fourth derivative, so jerk and snap are smooth too), flown once per
    ``period`` s at a uniform parameter speed: position, velocity and acceleration are the
    spline's own, so the feed-forward is exact. A family of random smooth shapes for training
    and tuning, never flown by the evaluation matrix.
    """

    seed: int = 0
    waypoints: int = 6
    size: float = 2.0  # m, horizontal half-width of the box
    height: float = 0.5  # m, vertical half-width of the box
    z: float = 1.5  # m
    period: float = 16.0  # s per loop
    heading: float = 0.0  # rad
    name = "spline"

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"spline seed must be an integer >= 0, got {self.seed!r}")
        count = self.waypoints
        if isinstance(count, bool) or not isinstance(count, int) or not 3 <= count <= 64:
            raise ValueError(f"spline waypoints must be an integer in [3, 64], got {count!r}")
        # the box stays well inside the reference bounds (REFERENCE_LIMIT), so the spline's
        # coefficients are finite
        real("spline size", self.size, low=0.0, high=SPLINE_BOX_LIMIT_M, unit="m")
        real("spline height", self.height, low=0.0, high=SPLINE_BOX_LIMIT_M, unit="m")
        real("spline z", self.z, low=-SPLINE_BOX_LIMIT_M, high=SPLINE_BOX_LIMIT_M, unit="m")
        real("spline period", self.period, low=0.0, low_open=True, unit="s")
        real("spline heading", self.heading, unit="rad")
        from scipy.interpolate import make_interp_spline

        rng = np.random.default_rng([self.seed, 0x5B])
        half = np.array([self.size, self.size, self.height])
        points = rng.uniform(-1.0, 1.0, (count, 3)) * half + np.array([0.0, 0.0, self.z])
        knots = np.linspace(0.0, self.period, count + 1)
        closed = np.vstack([points, points[:1]])
        spline = make_interp_spline(knots, closed, k=5, bc_type="periodic")
        object.__setattr__(self, "_spline", spline)
        object.__setattr__(self, "_d1", spline.derivative(1))
        object.__setattr__(self, "_d2", spline.derivative(2))

    def motion(self, t: Any, xp: Namespace = FLOATS) -> Motion:
        """The reference entries at ``t`` (s; a float, or an array with ``xp`` ARRAYS): scipy
        evaluates the spline point by point, so an array of times gets each time's own bits."""
        if xp is FLOATS:
            tau = math.fmod(t, self.period)
            if tau < 0.0:
                tau += self.period
        else:  # fmod is exact, so numpy's and math's agree
            tau = np.fmod(t, self.period)
            tau[tau < 0.0] += self.period
        pos = np.asarray(self._spline(tau), dtype=float)  # type: ignore[attr-defined]
        vel = np.asarray(self._d1(tau), dtype=float)  # type: ignore[attr-defined]
        acc = np.asarray(self._d2(tau), dtype=float)  # type: ignore[attr-defined]
        return (*pos.T, *vel.T, *acc.T, self.heading, 0.0)

    def __call__(self, t: float) -> Reference:
        return reference_of(self.motion(t))


#: the built-in trajectories by name; the evaluation matrix flies hover, helix and figure-8,
#: lissajous and spline are families for training and tuning
TRAJECTORIES: dict[str, type[Trajectory]] = {
    "hover": Hover,
    "helix": Helix,
    "figure8": Figure8,
    "lissajous": Lissajous,
    "spline": Spline,
}


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
    ``ValueError`` (value) naming the trajectory. Run at every reset (≈ 2 µs: the error's words
    are built only on an error); the step runs it only when the reference cannot be read (a
    non-finite one there ends the episode as ``non_finite``)."""
    if not isinstance(ref, Reference):
        raise TypeError(
            f"{_where(trajectory, t)} returned {type(ref).__name__} {ref!r}; expected a Reference"
        )
    for field in ("pos", "vel", "acc"):
        value = getattr(ref, field)
        if (
            not isinstance(value, np.ndarray)
            or value.shape != (3,)
            or value.dtype.kind not in "fiu"
        ):
            raise TypeError(
                f"{_where(trajectory, t)}: Reference.{field} must be a numpy float array of "
                f"shape (3,), got {value!r}"
            )
        if not all(abs(x) <= REFERENCE_LIMIT for x in value.tolist()):  # NaN fails too
            raise ValueError(
                f"{_where(trajectory, t)}: Reference.{field} must be finite and within "
                f"±{REFERENCE_LIMIT:g}, got {value!r}"
            )
    for field in ("yaw", "yaw_rate"):
        value = getattr(ref, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"{_where(trajectory, t)}: Reference.{field} must be a real number, got {value!r}"
            )
        if not abs(value) <= REFERENCE_LIMIT:
            raise ValueError(
                f"{_where(trajectory, t)}: Reference.{field} must be finite and within "
                f"±{REFERENCE_LIMIT:g}, got {value!r}"
            )
    return ref


def _where(trajectory: object, t: float) -> str:
    return f"trajectory {type(trajectory).__name__} at t = {t:g} s"


def reference_fields(trajectory: Trajectory, t: float) -> list[float]:
    """The reference part of the observation at time ``t`` (s): ``ref_pos``, ``ref_vel``,
    ``ref_acc``, the heading wrapped to ``[-π, π]`` and its rate (11 entries, the order of
    :class:`~residual_quad.envs.observation.ObsLayout`); both envs build it here.

    A reference that cannot be read raises :func:`check_reference`'s clear error."""
    ref = trajectory(t)
    try:
        return fields_of(ref)
    except (AttributeError, TypeError, ValueError):
        check_reference(trajectory, ref, t)
        raise


def reference_of(motion: Motion) -> Reference:
    """The :class:`Reference` of a built-in trajectory's :meth:`~Helix.motion` at one time."""
    return Reference(
        np.array(motion[0:3], dtype=float),
        np.array(motion[3:6], dtype=float),
        np.array(motion[6:9], dtype=float),
        motion[9],
        motion[10],
    )


def fields_at(trajectory: Trajectory, times: np.ndarray) -> np.ndarray:
    """:func:`reference_fields` of a built-in trajectory (one of :data:`TRAJECTORIES`) at each
    of ``times`` (s), shape ``(len(times), 11)``, bit for bit: its :meth:`~Helix.motion` on
    arrays (:class:`~residual_quad.envs.xp.ARRAYS`, the same expressions as on floats) and the
    heading wrapped as :func:`math.remainder` wraps it (:func:`wrap_headings`). A time whose
    reference overflows gets non-finite entries here where the float path may raise; callers
    that must raise there check the rows
    (:class:`~residual_quad.envs.reference_table.BatchReferences`)."""
    with np.errstate(all="ignore"):
        entries = trajectory.motion(times, ARRAYS)  # type: ignore[attr-defined]
    rows = np.empty((len(times), len(entries)))
    for j, entry in enumerate(entries):
        rows[:, j] = entry
    yaw = entries[9]  # a constant heading (a float) is wrapped once
    rows[:, 9] = wrap_headings(yaw) if isinstance(yaw, np.ndarray) else _wrapped(yaw)
    return rows


def wrap_headings(yaw: np.ndarray) -> np.ndarray:
    """:func:`_wrapped` of each element (rad), bit for bit, as array operations: ``fmod`` is
    exact, and moving its result ``r`` by one period when ``|r| > π`` is exact too (Sterbenz:
    ``π < |r| < 2π``); a result of exactly ``±π`` (a tie, which IEEE's remainder breaks to the
    even quotient) is left to :func:`math.remainder`."""
    two_pi = 2.0 * math.pi
    with np.errstate(invalid="ignore"):  # ±inf: NaN, as the float path marks it
        r = np.fmod(yaw, two_pi)
    r = np.where(np.abs(r) > math.pi, r - np.copysign(two_pi, r), r)
    r[np.isnan(r)] = math.nan  # the float path's NaN, whatever the sign bit fmod left
    for i in np.flatnonzero(np.abs(r) == math.pi).tolist():
        r[i] = _wrapped(float(yaw[i]))
    return r


def _wrapped(yaw: float) -> float:
    """The heading wrapped to ``[-π, π]`` as :func:`fields_of` wraps it; NaN where it is not
    finite (the float path raises there)."""
    return math.remainder(yaw, 2.0 * math.pi) if math.isfinite(yaw) else math.nan


def fields_of(ref: Reference) -> list[float]:
    """:func:`reference_fields` of a reference already computed (and checked)."""
    return [
        *ref.pos.tolist(),
        *ref.vel.tolist(),
        *ref.acc.tolist(),
        math.remainder(ref.yaw, 2.0 * math.pi),
        ref.yaw_rate,
    ]
