"""Events during an episode: a payload pickup or drop, a wind step, a partial rotor failure.

A scenario declares its events (``events=(...)`` of the env, the sweep's ``env:``); each is a
frozen dataclass (:class:`PayloadEvent`, :class:`WindEvent`, :class:`RotorEvent`) or the same as
a plain dict with a ``kind`` key (:func:`parse_events`, for YAML). An event fires at the start of
the first control period that begins at or after its time ``t_s`` (a time on a period boundary,
within 1e-6 of a period, fires on that step). Events default to none, and an env without events
flies exactly as before.

Every effect is written once, over a batch of envs, and both the single env (a batch of one) and
the vector env call it: :func:`fire_due` (what changes at a period's start), :func:`wind_offsets`
(the mean-wind change per physics substep), :func:`rotor_gains` (rotor efficiency composed with
the ground-effect gain) and :func:`event_truth` (what ``info`` reports).

- **payload**: the payload becomes a point-like solid sphere of ``mass_kg`` at the payload body
  (0.10 m below the frame centre, radius 0.03 m, :func:`~residual_quad.envs.model.build_spec`):
  its body mass is set, its inertia about its own centre to ``2/5·m·r²``, and ``mj_setConst``
  recomputes what depends on them (subtree mass, inverse weights). The composite inertia about
  the frame follows from MuJoCo's tree (the parallel-axis term ``m·d²``), exactly as if the model
  had been built with that payload.
- **wind**: the mean wind goes from its value before the event, A, to ``mean_mps``, B, along a
  1-cosine ramp ``A + (B − A)·(1 − cos(π·u))/2``, ``u = (t − t_fire)/rise_s`` clipped to [0, 1]
  (the discrete gust shape of MIL-F-8785C), on top of the gusts; ``rise_s = 0`` is a step.
- **rotor**: rotor ``rotor``'s thrust *and* reaction torque are scaled by ``efficiency``, in
  (0, 1] (its actuator gain, composed with the ground-effect gain).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Protocol

import mujoco
import numpy as np

from residual_quad.envs.checks import integer, real, vector
from residual_quad.envs.disturbances import MAX_PAYLOAD_KG
from residual_quad.envs.model import PAYLOAD_BODY

NUM_ROTORS = 4
FIRE_TOLERANCE = 1e-6
"""Fraction of a control period by which an event time may pass a period start and still fire
there (float round-off of ``t_s / control_dt``)."""


@dataclass(frozen=True)
class PayloadEvent:
    """The payload's mass becomes ``mass_kg`` at ``t_s`` (0: dropped)."""

    t_s: float  # s, event time since reset
    mass_kg: float  # kg, the payload's new mass, in [0, MAX_PAYLOAD_KG]
    kind: ClassVar[str] = "payload"

    def __post_init__(self) -> None:
        _time(self.t_s)
        real("payload event mass_kg", self.mass_kg, low=0.0, high=MAX_PAYLOAD_KG, unit="kg")


@dataclass(frozen=True)
class WindEvent:
    """The mean wind ramps to ``mean_mps`` over ``rise_s`` from ``t_s`` (gusts stay on top)."""

    t_s: float  # s, event time since reset
    mean_mps: tuple[float, float, float]  # m/s, world, the new mean wind B
    rise_s: float = 1.0  # s, duration of the 1-cosine ramp A → B (0: a step)
    kind: ClassVar[str] = "wind"

    def __post_init__(self) -> None:
        _time(self.t_s)
        mean = vector("wind event mean_mps", self.mean_mps, 3, "m/s")
        object.__setattr__(self, "mean_mps", tuple(mean.tolist()))
        real("wind event rise_s", self.rise_s, low=0.0, unit="s")


@dataclass(frozen=True)
class RotorEvent:
    """Rotor ``rotor``'s efficiency (thrust and reaction torque) becomes ``efficiency`` at
    ``t_s``."""

    t_s: float  # s, event time since reset
    rotor: int  # index in the airframe's rotor order, 0..3
    efficiency: float  # fraction of the commanded thrust the rotor delivers, in (0, 1]
    kind: ClassVar[str] = "rotor"

    def __post_init__(self) -> None:
        _time(self.t_s)
        integer("rotor event rotor", self.rotor, low=0, high=NUM_ROTORS - 1)
        real("rotor event efficiency", self.efficiency, low=0.0, high=1.0, low_open=True)


Event = PayloadEvent | WindEvent | RotorEvent
EVENT_TYPES: dict[str, type] = {c.kind: c for c in (PayloadEvent, WindEvent, RotorEvent)}
EVENT_KINDS: tuple[str, ...] = tuple(EVENT_TYPES)
"""The event kinds, the ``kind`` of a dict event."""


def _time(t_s: Any) -> None:
    real("event t_s", t_s, low=0.0, unit="s")


def parse_event(spec: Any) -> Event:
    """One event from a dataclass or a dict ``{"kind": ..., field: value}``; an unknown kind or
    field, or a bad value, is a ``ValueError`` listing the valid ones."""
    if isinstance(spec, PayloadEvent | WindEvent | RotorEvent):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"an event must be a PayloadEvent, WindEvent, RotorEvent or a dict with a 'kind' "
            f"among {', '.join(EVENT_KINDS)}, got {spec!r}"
        )
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise ValueError(f"unknown event kind {kind!r}; valid choices: {', '.join(EVENT_KINDS)}")
    cls = EVENT_TYPES[kind]
    names = [f.name for f in fields(cls)]
    unknown = sorted(str(k) for k in spec if k != "kind" and k not in names)
    if unknown:
        raise ValueError(f"{kind} event: unknown field(s) {unknown}; valid fields: {names}")
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [n for n in required if n not in spec]
    if missing:
        raise ValueError(f"{kind} event: missing field(s) {missing}; fields: {names}")
    return cls(**{k: v for k, v in spec.items() if k != "kind"})


def _iterable(x: Any) -> bool:
    return isinstance(x, Sequence | np.ndarray) and not isinstance(x, str)


def parse_events(events: Any, episode_s: float) -> tuple[Event, ...]:
    """The scenario's events sorted by time (stable), each checked, every ``t_s`` before
    ``episode_s``; ``None`` or an empty sequence: no events."""
    if events is None:
        return ()
    if not _iterable(events):
        raise ValueError(f"events must be a list of events (dicts or dataclasses), got {events!r}")
    out = [parse_event(e) for e in events]
    for e in out:
        if not e.t_s < episode_s:
            raise ValueError(
                f"{e.kind} event t_s = {e.t_s:g} s is outside the episode: it must be in "
                f"[0, episode_s = {episode_s:g}) s"
            )
    return tuple(sorted(out, key=lambda e: e.t_s))


def fire_step(t_s: float, control_dt: float) -> int:
    """Index of the control period an event at ``t_s`` (s) fires at the start of: the first
    period that starts at or after ``t_s`` (within :data:`FIRE_TOLERANCE` of a period)."""
    return max(0, math.ceil(t_s / control_dt - FIRE_TOLERANCE))


class EventRun:
    """One env's events and what they have done so far in the episode.

    Args:
        events: the parsed events (:func:`parse_events`), sorted by time.
        control_dt: control period, s.
        substeps: physics substeps per control period.
        payload_kg: the payload at reset, kg.
        mean_wind: the mean wind at reset, m/s, world (A of the first wind event).
    """

    def __init__(
        self,
        events: tuple[Event, ...],
        control_dt: float,
        substeps: int,
        payload_kg: float,
        mean_wind: np.ndarray,
    ):
        self.events = events
        self.substeps = int(substeps)
        self.fire_step = np.array(
            [fire_step(e.t_s, control_dt) for e in events], dtype=np.int64
        )  # index of the control period each event fires at the start of
        self.base_payload_kg = float(payload_kg)
        self.base_mean_wind = np.array(mean_wind, dtype=float)
        physics_dt = control_dt / substeps
        starts, rises, deltas = [], [], []
        before = self.base_mean_wind
        for e, k in zip(events, self.fire_step.tolist(), strict=True):
            if isinstance(e, WindEvent):
                b = np.array(e.mean_mps)
                starts.append(k * self.substeps)
                rises.append(e.rise_s / physics_dt)
                deltas.append(b - before)
                before = b
        self.wind_start = np.array(starts, dtype=np.int64)  # substep index the ramp starts at
        self.wind_rise = np.array(rises, dtype=float)  # substeps the ramp lasts
        self.wind_delta = np.array(deltas, dtype=float).reshape(-1, 3)  # m/s, B − A, world
        self.has_payload = any(isinstance(e, PayloadEvent) for e in events)
        self.reset()

    def reset(self) -> None:
        """Back to the start of an episode: nothing fired."""
        self.fired = 0  # events fired so far (the first ``fired`` of ``events``)
        self.step = 0  # index of the current control period
        self.payload_kg = self.base_payload_kg  # kg
        self.efficiency = np.ones(NUM_ROTORS)  # per rotor, thrust and reaction torque factor
        self.mean_wind = self.base_mean_wind.copy()  # m/s, world, at the last substep


class EventPlant(Protocol):
    """What :func:`fire_due` needs of a plant: its :class:`EventRun` (or ``None``) and a way to
    set the payload mass (:func:`set_payload_mass`, nothing recompiled)."""

    events: EventRun | None

    def set_payload(self, mass_kg: float) -> None: ...


def fire_due(plants: Sequence[EventPlant], steps: Sequence[int] | np.ndarray) -> list[int]:
    """Fire the events due at the start of control period ``steps[k]`` of ``plants[k]`` (each an
    :class:`EventPlant`); returns the ``k`` whose payload changed (their models changed)."""
    changed = []
    for k, (plant, step) in enumerate(zip(plants, np.asarray(steps).tolist(), strict=True)):
        run = plant.events
        if run is None:
            continue
        run.step = step
        payload = run.payload_kg
        while run.fired < len(run.events) and run.fire_step[run.fired] <= step:
            e = run.events[run.fired]
            if isinstance(e, PayloadEvent):
                run.payload_kg = float(e.mass_kg)
            elif isinstance(e, RotorEvent):
                run.efficiency[e.rotor] = float(e.efficiency)
            run.fired += 1  # a wind event acts through wind_offsets from its fire step on
        if run.payload_kg != payload:
            plant.set_payload(run.payload_kg)
            changed.append(k)
    return changed


def ramp(u: np.ndarray) -> np.ndarray:
    """The 1-cosine ramp ``(1 − cos(π·u))/2`` of ``u`` clipped to [0, 1]: 0 before, 1 after."""
    c = np.clip(u, 0.0, 1.0)
    return 0.5 * (1.0 - np.cos(np.pi * c))


def wind_offsets(runs: Sequence[EventRun]) -> np.ndarray:
    """Mean-wind change (m/s, world) over the substeps of each run's current period, ``(n,
    substeps, 3)``: the sum of every wind event's ``(B − A)·ramp(u)``, ``u`` the substeps since
    its start over its rise (a rise of 0: a step at the start)."""
    n, s = len(runs), runs[0].substeps if runs else 0
    out = np.zeros((n, s, 3))
    for k, run in enumerate(runs):
        g = run.step * s + np.arange(s, dtype=float)  # substep index since reset
        for start, rise, delta in zip(run.wind_start, run.wind_rise, run.wind_delta, strict=True):
            if rise > 0.0:
                frac = ramp((g - start) / rise)
            else:
                frac = (g >= start).astype(float)
            out[k] += frac[:, None] * delta
        run.mean_wind = run.base_mean_wind + out[k, -1]
    return out


def rotor_gains(ground_gain: Any, efficiency: np.ndarray) -> np.ndarray:
    """Actuator gains of the rotors: the ground-effect gain (a float, or ``(n, 1)``) times each
    rotor's efficiency (``(4,)`` or ``(n, 4)``); thrust per unit command."""
    return ground_gain * efficiency


def event_truth(runs: Sequence[EventRun]) -> dict[str, np.ndarray]:
    """Ground truth of the events for ``info``, one row per run: ``payload_kg`` (kg),
    ``mean_wind`` (m/s, world, last substep), ``rotor_efficiency`` (4 per env) and
    ``events_fired`` (how many of the env's events, in time order, have fired). An env without
    events reports its payload, its wind model's mean, efficiencies 1 and 0 events."""
    return {
        "payload_kg": np.array([run.payload_kg for run in runs], dtype=float),
        "mean_wind": np.array([run.mean_wind for run in runs], dtype=float).reshape(-1, 3),
        "rotor_efficiency": np.array([run.efficiency for run in runs]).reshape(-1, NUM_ROTORS),
        "events_fired": np.array([run.fired for run in runs], dtype=np.int64),
    }


def set_payload_mass(model: mujoco.MjModel, mass_kg: float, scratch: mujoco.MjData) -> None:
    """Make the payload body of ``model`` a solid sphere of ``mass_kg`` (its geom's radius) at
    the body's origin, then recompute the model's constants (``mj_setConst`` on ``scratch``, so
    no flight state is touched). The model must have a payload body
    (``build_model(..., payload_body=True)``)."""
    body = model.body(PAYLOAD_BODY).id
    radius = float(model.geom(PAYLOAD_BODY).size[0])
    model.body_mass[body] = mass_kg
    # kg·m², solid sphere, in the order of MuJoCo's compiler: the same bits as a built model
    model.body_inertia[body] = 2.0 * mass_kg * radius * radius / 5.0
    model.body_ipos[body] = 0.0
    mujoco.mj_setConst(model, scratch)
