"""Recovery metrics of a run with events: how far the vehicle strays after the first event and how
soon it is back.

Measured on the position error ``‖p − p_ref‖`` sampled at every control step, from the moment
the scenario's first event fires (the start of its control period, ``event_t_s``):

- ``recovery_peak_m``: the largest error from the event to the end of the episode (or the crash);
- ``recovery_time_s``: the time from the event until the error is inside the band
  (``recovery_band_m``, default 5 cm) and stays there to the end of the episode; 0 when it never
  leaves the band. "Never" (still outside at the end, or a crash) is ``None`` (JSON ``null``,
  read as NaN) with ``recovered = False``;
- ``recovery_iae_m_s``: the error integrated over the :data:`RECOVERY_WINDOW_S` (5 s) after the
  event (rectangle rule on the control steps); ``None`` if the episode ends before the window
  does (a crash, or an event too close to the end).

A run without events has none of these columns (readers take an absent column as NaN/None), so
the rows of scenarios without events are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from residual_quad.envs.checks import real
from residual_quad.envs.events import fire_step, parse_events
from residual_quad.episode import control_dt

RECOVERY_WINDOW_S = 5.0  # s, window of the integrated error after the event
DEFAULT_BAND_M = 0.05  # m, band of the recovery time
RECOVERY_COLUMNS: tuple[str, ...] = (
    "events",
    "event_t_s",
    "recovery_band_m",
    "recovery_peak_m",
    "recovery_time_s",
    "recovered",
    "recovery_iae_m_s",
)
"""The row columns of a run with events (absent from a run without)."""


@dataclass(frozen=True)
class RecoverySpec:
    """What the recovery metrics of a scenario's runs need."""

    events: str  # the scenario's events, compact (events_label)
    event_t_s: float  # s, start of the control period the first event fires at
    band_m: float = DEFAULT_BAND_M  # m, band of the recovery time


def events_label(events: Any, episode_s: float) -> str:
    """A compact, stable description of a scenario's events (a row column and a table key):
    ``kind@t_s:field=value,...`` per event, joined by ``; ``."""
    parts = []
    for e in parse_events(events, episode_s):
        fields = {k: v for k, v in vars(e).items() if k != "t_s"}
        text = ",".join(
            f"{k}={'/'.join(f'{x:g}' for x in v) if isinstance(v, tuple) else f'{v:g}'}"
            for k, v in fields.items()
        )
        parts.append(f"{e.kind}@{e.t_s:g}s:{text}")
    return "; ".join(parts)


def recovery_spec(
    env_kwargs: dict[str, Any], episode_s: float, band_m: float = DEFAULT_BAND_M
) -> RecoverySpec | None:
    """The recovery spec of runs with the env settings ``env_kwargs`` (``None``: no events)."""
    band_m = real("recovery_band_m", band_m, low=0.0, low_open=True, unit="m")
    events = parse_events(env_kwargs.get("events"), episode_s)
    if not events:
        return None
    dt = control_dt(env_kwargs)
    t_fire = fire_step(events[0].t_s, dt) * dt
    return RecoverySpec(events_label(events, episode_s), t_fire, band_m)


def recovery_metrics(
    t: np.ndarray, error: np.ndarray, spec: RecoverySpec, diverged: bool
) -> dict[str, Any]:
    """The recovery columns (:data:`RECOVERY_COLUMNS`) of one run from its time stamps ``t``
    (s, ``(N,)``) and position errors ``error`` (m, ``(N,)``); JSON-ready (``None`` for never
    or not measurable)."""
    t0 = spec.event_t_s
    after = t >= t0 - 1e-9
    row: dict[str, Any] = {
        "events": spec.events,
        "event_t_s": t0,
        "recovery_band_m": spec.band_m,
        "recovery_peak_m": None,
        "recovery_time_s": None,
        "recovered": False,
        "recovery_iae_m_s": None,
    }
    if not after.any():  # the run ended before the event
        return row
    e, te = error[after], t[after]
    peak = float(e.max())
    row["recovery_peak_m"] = peak if math.isfinite(peak) else None
    outside = np.flatnonzero(~(e <= spec.band_m))
    if not diverged:
        if outside.size == 0:
            row["recovery_time_s"], row["recovered"] = 0.0, True
        elif outside[-1] < len(e) - 1:
            row["recovery_time_s"], row["recovered"] = float(te[outside[-1] + 1] - t0), True
    if t[-1] >= t0 + RECOVERY_WINDOW_S - 1e-9 and not diverged:
        window = (t > t0 + 1e-9) & (t <= t0 + RECOVERY_WINDOW_S + 1e-9)
        k = np.flatnonzero(window)
        iae = float(np.sum(error[k] * (t[k] - t[k - 1])))
        row["recovery_iae_m_s"] = iae if math.isfinite(iae) else None
    return row
