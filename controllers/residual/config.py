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
from residual_quad.controllers.options import (
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Domain,
    Flag,
    Integer,
    Items,
    Number,
    Section,
    Text,
)
from residual_quad.controllers.residual.application import THRUST_AXES
from residual_quad.controllers.residual.features import FEATURE_NAMES
from residual_quad.controllers.rls import (
    COVARIANCE_SCHEMES,
    MAX_TRACE_CAP,
    MIN_FORGETTING,
    RLSConfig,
)

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


OOD_FALLBACKS = ("hold", "zero")


@dataclass(frozen=True)
class OODGuardConfig:
    """Out-of-distribution guard of the learned residual (``docs/adaptive.md``).

    Each step the guarded features are standardized with the network's own training statistics,
    ``z = (x − x_mean)/x_std``, giving ``w_z = clip((z_off − max|z|)/(z_off − z_on), 0, 1)``, and
    the heading error gives ``w_ψ = clip((heading_off − |ψ − ψ_ref|)/(heading_off −
    heading_on), 0, 1)``. The network's weight ``w = min(w_z, w_ψ)`` rises back by at most
    ``Δt/recover_s`` per step, and the estimate is ``w·Δâ_net + (1 − w)·Δâ_fallback``: ``hold``
    is the last estimate made fully inside the envelope (world frame: a payload estimate
    survives a yaw turn), ``zero`` no compensation. While ``w < 1`` the RLS does not learn from
    the sample (the network's regressor is meaningless out there).
    """

    enabled: bool = False
    z_on: float = 4.0  # standardized |z| where the blend toward the fallback starts
    z_off: float = 6.0  # standardized |z| where the network's estimate is fully replaced
    # guarded features (names of features.FEATURE_NAMES): the body rates, which a yaw manoeuvre
    # drives outside the training data; the velocity and drag features leave it by far more in
    # the matrix's own helix and figure-8 starts, harmlessly (measured in docs/adaptive.md)
    features: tuple[str, ...] = ("omega_x", "omega_y", "omega_z")
    fallback: str = "hold"  # "hold" (last in-envelope estimate) or "zero"
    # s, after the guard acted the network's weight returns to 1 no faster than 1/recover_s per
    # second (the states right after a manoeuvre are still unlike the data); 0 = at once
    recover_s: float = 1.0
    # rad, heading error |ψ − ψ_ref| where the blend starts / is complete: the training data are
    # flown by geo tracking its heading, so a large heading error (a yaw manoeuvre) is a state the
    # network never saw, whatever the marginals of its features say (docs/adaptive.md)
    heading_on: float = 0.35
    heading_off: float = 0.5

    def __post_init__(self) -> None:
        from residual_quad.controllers.residual.features import FEATURE_NAMES

        if not isinstance(self.enabled, bool):
            raise ValueError(f"ood.enabled must be true or false, got {self.enabled!r}")
        if not (0.0 < self.z_on < self.z_off and math.isfinite(self.z_off)):
            raise ValueError(
                f"ood needs finite 0 < z_on < z_off, got z_on={self.z_on}, z_off={self.z_off}"
            )
        unknown = [f for f in self.features if f not in FEATURE_NAMES]
        if unknown or not self.features:
            raise ValueError(
                f"ood.features must name at least one of {', '.join(FEATURE_NAMES)}; "
                f"unknown: {unknown}"
            )
        if not (0.0 < self.heading_on < self.heading_off <= math.pi):
            raise ValueError(
                "ood needs 0 < heading_on < heading_off <= π rad, got "
                f"heading_on={self.heading_on}, heading_off={self.heading_off}"
            )
        if not (self.recover_s >= 0.0 and math.isfinite(self.recover_s)):
            raise ValueError(f"ood.recover_s must be >= 0 s and finite, got {self.recover_s}")
        if self.fallback not in OOD_FALLBACKS:
            raise ValueError(
                f"ood.fallback {self.fallback!r}; valid choices: {', '.join(OOD_FALLBACKS)}"
            )


@dataclass(frozen=True)
class OutputFilterConfig:
    """First-order low-pass on the applied estimate Δâ (world frame) before the feed-forward.

    Prediction jitter of the network turns into thrust jitter, hence control cost ∫ΣT² dt; a
    filter of ``tau`` s removes it at the cost of ``tau`` s of lag on a changing residual.
    """

    tau: float = 0.0  # s, 0 = off

    def __post_init__(self) -> None:
        if not (self.tau >= 0.0 and math.isfinite(self.tau)):
            raise ValueError(f"output_filter.tau must be >= 0 s and finite, got {self.tau}")


@dataclass(frozen=True)
class ResidualConfig:
    """Settings of ``geo_res``/``geo_rls``/``hnewton_rls`` (``configs/residual.yaml``)."""

    weights: str = "default"  # "default", "none" (untrained) or a path
    kp: float = 20.0  # 1/s², outer-loop position gain
    kd: float = 8.0  # 1/s, outer-loop velocity gain
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)
    rls: RLSConfig = field(default_factory=RLSConfig)
    ood: OODGuardConfig = field(default_factory=OODGuardConfig)
    output_filter: OutputFilterConfig = field(default_factory=OutputFilterConfig)
    # where the body-z part of Δâ acts: "achieved" (the current body z axis, the source's rule)
    # or "commanded" (the thrust axis about to be commanded; controllers/residual/application.py)
    thrust_axis: str = "achieved"

    def __post_init__(self) -> None:
        if self.thrust_axis not in THRUST_AXES:
            raise ValueError(
                f"thrust_axis {self.thrust_axis!r}; valid choices: {', '.join(THRUST_AXES)}"
            )


_SECTIONS: dict[str, type] = {
    "measurement": MeasurementConfig,
    "rls": RLSConfig,
    "ood": OODGuardConfig,
    "output_filter": OutputFilterConfig,
}


#: the domain of every setting of each section, checked when a spec is parsed (the rules between
#: settings — ``p0 <= trace_cap``, ``z_on < z_off``, ``heading_on < heading_off`` — are checked
#: by the dataclasses when the controller is built)
SECTION_OPTIONS: dict[str, dict[str, Domain]] = {
    "measurement": {
        "source": Choice(MEASUREMENT_SOURCES),
        "lowpass_tau": NON_NEGATIVE,  # s, 0 = off
        "max_residual": POSITIVE,  # m/s²
    },
    "rls": {
        "p0": Number(gt=0.0, le=MAX_TRACE_CAP),
        "forgetting": Number(ge=MIN_FORGETTING, le=1.0),
        "trace_cap": Number(gt=0.0, le=MAX_TRACE_CAP),
        "warmup_steps": Integer(ge=0),
        "leak": Number(ge=0.0, lt=1.0),
        "covariance": Choice(COVARIANCE_SCHEMES),
        "efra_alpha": Number(gt=0.0, le=1.0),
        "efra_beta": Number(gt=0.0, lt=1.0),
        "efra_delta": Number(gt=0.0, lt=1.0),
    },
    "ood": {
        "enabled": Flag(),
        "z_on": POSITIVE,
        "z_off": POSITIVE,
        "features": Items(Choice(FEATURE_NAMES)),
        "fallback": Choice(OOD_FALLBACKS),
        "recover_s": NON_NEGATIVE,  # s
        "heading_on": Number(gt=0.0, le=math.pi),  # rad
        "heading_off": Number(gt=0.0, le=math.pi),  # rad
    },
    "output_filter": {"tau": NON_NEGATIVE},  # s, 0 = off
}

#: every keyword setting of the residual trackers (``geo_res``, ``geo_rls``, ``geo_rls_dob``,
#: ``hnewton_rls``): the top-level keys, each section as a mapping, and each section's settings
#: given flat (``geo_rls:p0=0.05``)
RESIDUAL_OPTIONS: dict[str, Domain] = {
    "weights": Text("'default', 'none' or a weight file path", (Path,)),
    "kp": POSITIVE,  # 1/s²
    "kd": POSITIVE,  # 1/s
    "thrust_axis": Choice(THRUST_AXES),
    **{
        name: Section(name, table, (cls,))
        for (name, table), cls in zip(
            SECTION_OPTIONS.items(),
            (MeasurementConfig, RLSConfig, OODGuardConfig, OutputFilterConfig),
            strict=True,
        )
    },
    **{k: d for table in SECTION_OPTIONS.values() for k, d in table.items()},
}


def residual_config(
    config: str | Path | ResidualConfig | None = None, **overrides: Any
) -> ResidualConfig:
    """The packaged ``configs/residual.yaml`` (or ``config``: a path, a shipped config name or a
    :class:`ResidualConfig`), with keyword overrides.

    Overrides are top-level keys (``weights``, ``kp``, ``kd``, ``thrust_axis``) or, for the
    sections, mappings merged into them (``rls={"p0": 0.1}``) — also given flat (``p0=0.1``) when
    unambiguous.
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
