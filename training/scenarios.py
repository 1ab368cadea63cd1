"""Scenarios off the evaluation matrix: the random trajectories ``rquad tune`` and training draw.

The evaluation matrix flies hover, helix and figure-8 with their default parameters, from env
seeds 0–19. :func:`draw_trajectory` draws one trajectory the matrix never flies — helix,
figure-8, Lissajous or a random spline with a random size and period (:data:`TRAJECTORY_RANGES`),
or a hover from a random start offset (±:data:`HOVER_OFFSET_M` per axis) — from a seeded
generator; ``rquad tune`` (:func:`~residual_quad.training.tune.tuning_scenarios`) and training
with ``trajectory_draw: randomized`` (:class:`OffMatrixSampler`) both draw with it, so the two
see one family of shapes. Their env seeds start at :data:`FIRST_OFF_MATRIX_SEED`, far above the
matrix's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residual_quad.envs.checks import real
from residual_quad.envs.disturbances import WIND_LEVELS
from residual_quad.envs.events import NUM_ROTORS, RotorEvent
from residual_quad.envs.trajectories import Trajectory, make_named_trajectory
from residual_quad.training.blas import blas_threads

#: the trajectory families drawn, with the ranges of their random parameters (uniform)
TRAJECTORY_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "hover": {},  # from a random start offset (±HOVER_OFFSET_M per axis)
    "helix": {"radius": (1.0, 3.0), "period": (6.0, 12.0)},  # m, s per turn
    "figure8": {"a": (1.5, 3.5), "b": (0.8, 2.0), "period": (8.0, 16.0)},  # m, m, s
    "lissajous": {"a": (1.0, 3.0), "b": (0.8, 2.0), "c": (0.0, 0.5), "period": (10.0, 20.0)},
    "spline": {"size": (1.0, 3.0), "period": (12.0, 24.0)},  # m, s; and a random seed
}
HOVER_OFFSET_M = 0.5  # m, the largest start offset per axis of a hover scenario
#: the first env seed of tuning and off-matrix training scenarios: far above the matrix's (0–19)
FIRST_OFF_MATRIX_SEED = 10_000
_DIGITS = 6  # decimals a drawn parameter or offset keeps (readable, and exact in a record)
_SPLINE_SEEDS = 2**31  # a spline's waypoint seed is drawn below this


@dataclass(frozen=True)
class TrajectoryDraw:
    """One drawn trajectory: its family ``name``, its parameters (name, value) and the start
    offset (m) of a hover (zero for the others)."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def build(self) -> Trajectory:
        """The trajectory object (:func:`~residual_quad.envs.trajectories.
        make_named_trajectory` with the parameters)."""
        return make_named_trajectory(self.name, **dict(self.params))


def check_families(key: str, families: Sequence[str]) -> None:
    """``families`` a non-empty list of :data:`TRAJECTORY_RANGES`'s names; else a
    ``ValueError`` naming ``key`` and the valid choices."""
    if not families:
        raise ValueError(f"{key} must list at least one of {', '.join(TRAJECTORY_RANGES)}")
    unknown = [f for f in families if f not in TRAJECTORY_RANGES]
    if unknown:
        raise ValueError(f"{key}: unknown {unknown}; valid choices: {', '.join(TRAJECTORY_RANGES)}")


def trajectory_ranges(
    overrides: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    key: str = "trajectory_ranges",
) -> dict[str, dict[str, tuple[float, float]]]:
    """:data:`TRAJECTORY_RANGES` with some families' parameter ranges replaced (``{"helix":
    {"period": [4.0, 12.0]}}``): the parameters keep their order, so a generator state draws the
    same parameters in the same order. An unknown family or parameter, a range that is not two
    finite numbers ``lo < hi`` (one value could be the matrix's own), or one whose ends make no
    valid trajectory, is a ``ValueError`` naming ``key`` and the valid choices."""
    ranges = {name: dict(params) for name, params in TRAJECTORY_RANGES.items()}
    for name, params in (overrides or {}).items():
        if name not in ranges:
            raise ValueError(
                f"{key}: unknown family {name!r}; valid choices: {', '.join(TRAJECTORY_RANGES)}"
            )
        if not isinstance(params, Mapping):
            raise ValueError(f"{key}.{name} must map parameters to [low, high], got {params!r}")
        for param, bounds in params.items():
            if param not in ranges[name]:
                valid = ", ".join(ranges[name]) or "none (a hover draws only its start offset)"
                raise ValueError(f"{key}.{name}: unknown parameter {param!r}; valid: {valid}")
            where = f"{key}.{name}.{param}"
            if isinstance(bounds, str) or not isinstance(bounds, Sequence) or len(bounds) != 2:
                raise ValueError(f"{where} must be [low, high], got {bounds!r}")
            lo, hi = (real(where, b) for b in bounds)
            if not lo < hi:  # a range, not one value (which could be the matrix's own)
                raise ValueError(f"{where} must have low < high, got [{lo:g}, {hi:g}]")
            # both ends, as a draw rounds them, make a valid trajectory (a period > 0, …)
            for end in (round(lo, _DIGITS), round(hi, _DIGITS)):
                try:
                    make_named_trajectory(name, **{param: end})
                except ValueError as err:
                    raise ValueError(f"{where}: {err}") from None
            ranges[name][param] = (lo, hi)
    return ranges


def check_drawn(
    key: str, ranges: Mapping[str, Any], families: Sequence[str], label: str = "trajectories"
) -> None:
    """Every family ``ranges`` names is one of ``families``; else a ``ValueError`` naming
    ``key`` and the families drawn (a range of a family never drawn would do nothing)."""
    undrawn = sorted(set(ranges) - set(families))
    if undrawn:
        raise ValueError(f"{key}: {undrawn} not drawn ({label}: {', '.join(families)})")


def draw_trajectory(
    rng: np.random.Generator,
    families: Sequence[str],
    ranges: Mapping[str, Mapping[str, tuple[float, float]]] = TRAJECTORY_RANGES,
) -> TrajectoryDraw:
    """One trajectory off the matrix from ``rng``: a family uniform over ``families`` (an entry
    listed k times is drawn k times as often), each parameter uniform in its range (``ranges``:
    :data:`TRAJECTORY_RANGES`, or :func:`trajectory_ranges`'s; rounded to 6 decimals), a
    spline's waypoint seed, and a hover's start offset uniform in ±:data:`HOVER_OFFSET_M` per
    axis. The draws come in this order, so one generator state gives one trajectory."""
    name = families[int(rng.integers(len(families)))]
    params: tuple[tuple[str, Any], ...] = tuple(
        (key, round(float(rng.uniform(lo, hi)), _DIGITS)) for key, (lo, hi) in ranges[name].items()
    )
    if name == "spline":  # its own random waypoints
        params = (*params, ("seed", int(rng.integers(_SPLINE_SEEDS))))
    offset = (0.0, 0.0, 0.0)
    if name == "hover":
        x, y, z = (round(float(v), _DIGITS) for v in rng.uniform(-1, 1, 3) * HOVER_OFFSET_M)
        offset = (x, y, z)
    return TrajectoryDraw(name, params, offset)


@dataclass
class FocusDraw:
    """A training config's ``focus`` section (``trajectory_draw: randomized`` only): a share of
    the episodes drawn from lists of their own — a rare hard case made common (a heavy vehicle
    from rest behind a fast reference) without changing the mix of the other episodes. A list
    left null is the main one; ``trajectory_ranges`` replaces ranges on top of the main ones."""

    fraction: float = 0.0  # of episodes, in [0, 1); 0: no focus draw (the main lists only)
    payloads: list[Any] | None = None  # kg or level names, all lighter than the held-out ones
    winds: list[str] | None = None
    trajectories: list[str] | None = None  # families of the randomized draw
    trajectory_ranges: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def active(self) -> bool:
        """Whether any episode is drawn from the focus."""
        return self.fraction > 0

    def lists(
        self,
        payloads: list[Any],
        winds: list[str],
        families: list[str],
        ranges: Mapping[str, Mapping[str, Sequence[float]]],
    ) -> dict[str, Any]:
        """The focus's payloads, winds, families and range overrides, the main ones given here
        where the section leaves them null (its ranges on top of the main ones, per parameter)."""
        merged = {name: dict(params) for name, params in ranges.items()}
        for name, params in self.trajectory_ranges.items():
            merged[name] = {**merged.get(name, {}), **params}
        return {
            "payloads": payloads if self.payloads is None else self.payloads,
            "winds": winds if self.winds is None else self.winds,
            "families": families if self.trajectories is None else self.trajectories,
            "ranges": merged,
        }

    def check(
        self,
        draw: str,
        families: list[str],
        ranges: Mapping[str, Mapping[str, Sequence[float]]],
        key: str = "focus",
    ) -> bool:
        """A ``ValueError`` naming ``key.`` (``focus.``; ``focus[i].`` in a list) and the field
        for a fraction outside [0, 1), lists beside a zero fraction (they would draw nothing), a
        draw other than ``randomized``, empty or unknown winds, unknown families, or ranges that
        are bad or of a family not drawn (``families`` and ``ranges``: the main config's).
        Whether the focus is active: its payloads are then the caller's to check (the main
        payloads' rules)."""
        real(f"{key}.fraction", self.fraction, low=0.0, high=1.0, high_open=True)
        if not self.active():
            keys = ("payloads", "winds", "trajectories", "trajectory_ranges")
            given = [k for k in keys if getattr(self, k)]
            if given:
                raise ValueError(
                    f"{key}.fraction is 0, so {key}.{f', {key}.'.join(given)} would draw nothing: "
                    "give the fraction of episodes to draw from them"
                )
            return False
        if draw != "randomized":
            raise ValueError(
                f"{key} mixes in a second randomized draw; it needs trajectory_draw: randomized, "
                f"not {draw!r}"
            )
        if self.winds is not None:
            if not self.winds:
                raise ValueError(f"{key}.winds must not be empty (null: the main winds)")
            bad = [w for w in self.winds if w not in WIND_LEVELS]
            if bad:
                raise ValueError(f"{key}.winds: unknown {bad}; valid: {', '.join(WIND_LEVELS)}")
        drawn = families if self.trajectories is None else self.trajectories
        check_families(f"{key}.trajectories", drawn)
        # the focus's ranges on top of the main ones (valid already): the focus's own checked
        trajectory_ranges(self.lists([], [], drawn, ranges)["ranges"], f"{key}.trajectory_ranges")
        check_drawn(
            f"{key}.trajectory_ranges", self.trajectory_ranges, drawn, f"{key} trajectories"
        )
        return True


def check_randomized_draw(
    draw: str,
    families: Sequence[str],
    ranges: Mapping[str, Any],
    efficiencies: Sequence[float],
) -> None:
    """A training config's draw settings: with ``draw`` ``randomized`` every family in
    :data:`TRAJECTORY_RANGES`; replaced ``ranges`` (of drawn families) and rotor
    ``efficiencies`` change the randomized draw, so another draw beside them is an error."""
    if draw == "randomized":
        check_families("trajectories", families)
    for key, value in (("trajectory_ranges", ranges), ("rotor_efficiency", efficiencies)):
        if value and draw != "randomized":
            raise ValueError(
                f"{key} changes the randomized draw of training scenarios; it needs "
                f"trajectory_draw: randomized, not {draw!r}"
            )
    if ranges:
        trajectory_ranges(ranges)
        check_drawn("trajectory_ranges", ranges, families)
    check_efficiencies(efficiencies)


def check_efficiencies(
    efficiencies: Sequence[float], key: str = "rotor_efficiency"
) -> tuple[float, ...]:
    """``efficiencies`` as a tuple of floats, each in (0, 1]; else a ``ValueError`` naming
    ``key`` and the entry."""
    if isinstance(efficiencies, (str, bytes)) or not isinstance(efficiencies, Sequence):
        raise ValueError(
            f"{key} must be a list of rotor efficiencies in (0, 1], got {efficiencies!r}"
        )
    return tuple(
        real(f"{key}[{i}]", e, low=0.0, high=1.0, low_open=True) for i, e in enumerate(efficiencies)
    )


def focus_draws(focus: FocusDraw | list[FocusDraw]) -> list[FocusDraw]:
    """A training config's ``focus`` as a list: one section, or the list of them."""
    return focus if isinstance(focus, list) else [focus]


def check_focus(
    focus: FocusDraw | list[FocusDraw],
    draw: str,
    families: list[str],
    ranges: Mapping[str, Mapping[str, Sequence[float]]],
    check_payloads: Callable[[list[Any], str], None],
) -> None:
    """A training config's ``focus``: one :class:`FocusDraw` or a non-empty list of active ones
    (``focus[i].`` in their errors), each by :meth:`FocusDraw.check`, its payloads by
    ``check_payloads(payloads, key)``; the fractions must sum below 1."""
    draws = focus_draws(focus)
    if not draws or not all(isinstance(d, FocusDraw) for d in draws):
        raise ValueError(
            "focus must be a mapping of FocusDraw's fields (fraction, payloads, winds, "
            f"trajectories, trajectory_ranges) or a non-empty list of them, got {focus!r}"
        )
    for i, one in enumerate(draws):
        key = f"focus[{i}]" if isinstance(focus, list) else "focus"
        if one.check(draw, families, ranges, key):
            if one.payloads is not None:
                check_payloads(one.payloads, f"{key}.payloads")
        elif isinstance(focus, list):
            raise ValueError(f"{key}.fraction must be > 0 in a list of focus draws")
    if (total := sum(d.fraction for d in draws)) >= 1:
        raise ValueError(f"the focus fractions sum to {total:g}: they must stay below 1")


class OffMatrixSampler:
    """Training's domain randomization off the matrix (``trajectory_draw: randomized``):
    ``sampler(rng) -> scenario`` for the vector env (picklable).

    Each episode draws payload and wind uniformly from the lists (as
    :class:`~residual_quad.training.ppo_vec.ScenarioSampler`; an entry listed k times is drawn
    k times as often), then a trajectory with :func:`draw_trajectory` from ``families``: the
    scenario's ``trajectory`` is the trajectory object, a hover's start offset its
    ``position_offset``. With ``start_pos_noise > 0`` every scenario also gets
    ``ScenarioSampler``'s uniform start offset (m; the vertical one not below
    ``-start_pos_noise / 2``), added to a hover's. ``ranges`` replaces some families'
    parameter ranges (:func:`trajectory_ranges`).

    ``focus`` (other samplers) and ``focus_fraction`` (their shares, each in (0, 1), summing
    below 1) mix in further draws: each episode first draws ``u`` uniform in [0, 1) and takes the
    first focus whose share's interval holds it (the first focus ``u`` below its fraction, the
    second the next interval, ...), else the main lists — a share of rare hard episodes (a heavy
    vehicle from rest behind a fast reference) without changing the others' mix. Without a
    focus no ``u`` is drawn, so a generator state draws what it drew before focus existed.

    ``efficiencies`` (a list in (0, 1], drawn uniformly after the rest, focus episodes
    included) weakens every rotor alike for the whole episode: thrust and reaction torque
    scaled by the drawn value (four rotor events at t = 0; 1: none) — weaker motors, a lower
    thrust-to-weight ratio without another mass. Without it nothing more is drawn.
    """

    def __init__(
        self,
        payloads: Sequence[Any],
        winds: Sequence[str],
        families: Sequence[str],
        start_pos_noise: float = 0.0,  # m
        ranges: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
        focus: Sequence[OffMatrixSampler] = (),
        focus_fraction: Sequence[float] = (),
        efficiencies: Sequence[float] = (),
    ):
        check_families("trajectories", families)
        self.efficiencies = check_efficiencies(efficiencies)
        self.conditions = [(p, w) for p in payloads for w in winds]
        self.families = tuple(families)
        self.start_pos_noise = float(start_pos_noise)
        self.ranges = trajectory_ranges(ranges)
        if len(focus) != len(focus_fraction):
            raise ValueError(
                "every focus draw needs its focus_fraction, and every fraction a focus"
            )
        self.focus_bounds: list[tuple[float, OffMatrixSampler]] = []  # (u's upper bound, focus)
        bound = 0.0
        for i, (sampler, share) in enumerate(zip(focus, focus_fraction, strict=True)):
            share = real(f"focus_fraction[{i}]", share, low=0.0, high=1.0, high_open=True)
            if share == 0.0:
                raise ValueError(f"focus_fraction[{i}] is 0: a focus draw needs a share above 0")
            bound += share
            if bound >= 1.0:
                raise ValueError(f"the focus fractions sum to {bound:g}: they must stay below 1")
            self.focus_bounds.append((bound, sampler))

    def draw(self, rng: np.random.Generator) -> tuple[Any, str, TrajectoryDraw, np.ndarray]:
        """One episode's payload, wind, trajectory draw and start offset (m)."""
        if self.focus_bounds:
            u = rng.random()
            for bound, focus in self.focus_bounds:
                if u < bound:
                    return focus.draw(rng)
        payload, wind = self.conditions[int(rng.integers(len(self.conditions)))]
        trajectory = draw_trajectory(rng, self.families, self.ranges)
        offset = np.array(trajectory.offset_m, dtype=float)
        if self.start_pos_noise > 0:
            n = self.start_pos_noise
            noise = rng.uniform(-n, n, 3)
            noise[2] = max(noise[2], -0.5 * n)  # not into the floor
            offset += noise
        return payload, wind, trajectory, offset

    def __call__(self, rng: np.random.Generator) -> dict[str, Any]:
        payload, wind, trajectory, offset = self.draw(rng)
        with blas_threads(1, "scipy"):  # a spline's solve: OpenBLAS's threads only contend
            built = trajectory.build()
        scenario: dict[str, Any] = {"payload": payload, "wind": wind, "trajectory": built}
        if offset.any():
            scenario["options"] = {"position_offset": offset}
        if self.efficiencies:
            efficiency = self.efficiencies[int(rng.integers(len(self.efficiencies)))]
            if efficiency < 1.0:
                scenario["events"] = tuple(
                    RotorEvent(0.0, rotor, efficiency) for rotor in range(NUM_ROTORS)
                )
        return scenario
