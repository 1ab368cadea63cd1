"""Settings of the residual trackers and their estimator (``configs/residual.yaml``, strict).

:func:`residual_config` is what the trackers' keyword arguments go through: it loads the YAML with
:func:`residual_quad.configs.load` and merges keyword overrides into it, section by section, so
that ``make_controller("geo_rls", p0=0.05, measurement={"source": "velocity"})`` changes exactly
those two values and keeps the rest of the file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residual_quad import configs
from residual_quad.controllers.rls import RLSConfig

MEASUREMENT_SOURCES = ("velocity", "imu")
#: m/s², default plausibility bound on a measured residual: the offline training data reject
#: samples above the same norm (``CollectConfig.reject_accel``)
MAX_RESIDUAL = 25.0


@dataclass(frozen=True)
class MeasurementConfig:
    """How the online learner measures the residual (see :mod:`.features`)."""

    source: str = "imu"  # "imu" (accelerometer sample) or "velocity" (period average)
    lowpass_tau: float = 0.0  # s, same first-order low-pass on RLS target and regressor; 0 = off
    # m/s², a measured residual of larger norm (or non-finite) is rejected, not learned from
    max_residual: float = MAX_RESIDUAL

    def __post_init__(self) -> None:
        if self.source not in MEASUREMENT_SOURCES:
            raise ValueError(
                f"measurement.source {self.source!r}; valid choices: "
                f"{', '.join(MEASUREMENT_SOURCES)}"
            )
        if not (self.lowpass_tau >= 0.0 and math.isfinite(self.lowpass_tau)):
            raise ValueError(f"measurement.lowpass_tau must be >= 0 s, got {self.lowpass_tau}")
        if not (self.max_residual > 0.0 and math.isfinite(self.max_residual)):
            raise ValueError(
                f"measurement.max_residual must be a finite number of m/s² > 0, "
                f"got {self.max_residual}"
            )


@dataclass(frozen=True)
class ResidualConfig:
    """Settings of ``geo_res``/``geo_rls``/``hnewton_rls`` (``configs/residual.yaml``)."""

    weights: str = "default"  # "default", "none" (untrained) or a path
    kp: float = 20.0  # 1/s², outer-loop position gain
    kd: float = 8.0  # 1/s, outer-loop velocity gain
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)
    rls: RLSConfig = field(default_factory=RLSConfig)


_SECTIONS: dict[str, type] = {"measurement": MeasurementConfig, "rls": RLSConfig}


def residual_config(
    config: str | Path | ResidualConfig | None = None, **overrides: Any
) -> ResidualConfig:
    """The packaged ``configs/residual.yaml`` (or ``config``: a path, a shipped config name or a
    :class:`ResidualConfig`), with keyword overrides.

    Overrides are top-level keys (``weights``, ``kp``, ``kd``) or, for the sections, mappings
    merged into them (``rls={"p0": 0.1}``) — also given flat (``p0=0.1``) when unambiguous.
    """
    if not isinstance(config, ResidualConfig):
        config = configs.load(ResidualConfig, config or configs.shipped("residual"))
    data = configs.to_dict(config)
    for key, value in overrides.items():
        if key in _SECTIONS:
            data[key].update(value if isinstance(value, dict) else configs.to_dict(value))
        elif key in data:
            data[key] = value
        else:
            owner = [s for s, cls in _SECTIONS.items() if key in _field_names(cls)]
            if len(owner) != 1:
                valid = sorted(set(data).union(*(_field_names(c) for c in _SECTIONS.values())))
                raise ValueError(f"unknown residual-tracker setting {key!r}; valid: {valid}")
            data[owner[0]][key] = value
    return configs.load(ResidualConfig, data)


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
