"""Named plant presets: sets of off-by-default plant options under one name.

``ResidualQuad-v0(preset="realistic")`` turns on what a real F450-class airframe has and the
default plant leaves out: rotor dynamics, latency and an IMU whose biases walk (values and sources
in docs/environment.md and docs/references.md). The rule: a preset gives the *defaults* of its
options; an option passed explicitly (not ``None``) overrides the preset's value, so
``preset="realistic", rotor_tau_s=0.0`` is the realistic plant with ideal rotors.
``preset=None`` (or ``"ideal"``) is the plant of every committed row.

A preset is a :class:`PlantOptions` row of :data:`PRESETS`; a new plant option is a new field
(default: off) and a value in the presets that turn it on.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from residual_quad.envs.actuators import check_rotor_tau
from residual_quad.envs.imu_bias import IMU_BIAS_LEVELS
from residual_quad.envs.latency import check_delay


@dataclass(frozen=True)
class PlantOptions:
    """The plant options a preset sets (every default: off, the committed rows' plant)."""

    rotor_tau_s: float = 0.0  # s, first-order rotor lag (0: ideal rotors)
    action_delay_steps: int = 0  # control periods, command latency
    obs_delay_steps: int = 0  # control periods, sensor latency (sensed fields only)
    imu_bias: str | None = None  # a named IMU-bias level (None: no bias); the env's ``imu_bias``

    def __post_init__(self) -> None:
        check_rotor_tau(self.rotor_tau_s)
        if self.imu_bias is not None and self.imu_bias not in IMU_BIAS_LEVELS:
            raise ValueError(
                f"imu_bias must be None or one of {', '.join(IMU_BIAS_LEVELS)}, "
                f"got {self.imu_bias!r}"
            )
        check_delay("action_delay_steps", self.action_delay_steps)
        check_delay("obs_delay_steps", self.obs_delay_steps)


#: the plant options a controller is told (``ControlContext``): its rotors and latencies
CONTROL_OPTIONS = ("rotor_tau_s", "action_delay_steps", "obs_delay_steps")

PRESETS: dict[str, PlantOptions] = {
    "ideal": PlantOptions(),
    # F450-class rotors (≈ 60 ms, [LAG]), one control period (10 ms at 100 Hz) of command and
    # of sensor latency each ([LAT]) and the bias random walks of a tactical-grade MEMS IMU
    # ([EUROC]); docs/environment.md, "Plant presets". Dryden turbulence is not part of it: it
    # replaces the gust model of the scenario's wind, the matrix's own axis.
    "realistic": PlantOptions(
        rotor_tau_s=0.06, action_delay_steps=1, obs_delay_steps=1, imu_bias="adis16448"
    ),
}
"""The named presets (``ideal``: every option off)."""


def plant_options(preset: str | None = None, **explicit: float | int | None) -> PlantOptions:
    """The plant options of ``preset`` with every ``explicit`` option that is not ``None`` on top.

    An unknown preset name is a ``ValueError`` listing the valid ones; an unknown option, a value
    out of its range, NaN or inf a ``ValueError`` naming it."""
    if preset is None:
        base = PRESETS["ideal"]
    elif isinstance(preset, str) and preset in PRESETS:
        base = PRESETS[preset]
    else:
        raise ValueError(f"unknown preset {preset!r}; valid choices: None, {', '.join(PRESETS)}")
    names = {f.name for f in fields(PlantOptions)}
    unknown = sorted(set(explicit) - names)
    if unknown:
        raise ValueError(f"unknown plant options {unknown}; valid: {', '.join(sorted(names))}")
    return replace(base, **{k: v for k, v in explicit.items() if v is not None})


#: the keywords of a plant given as env settings: a preset and the options it sets
PLANT_KEYS = ("preset", *(f.name for f in fields(PlantOptions)))


def plant_of(env: dict[str, object]) -> PlantOptions:
    """The plant a mapping of plant keywords names (``{"preset": "realistic"}``, or the options
    themselves; ``{}``: the ideal plant). Anything else — a scenario setting such as
    ``payload`` included — is a one-line ``ValueError``, as is a bad value."""
    if not isinstance(env, dict):
        raise ValueError(f"env must be a mapping of plant keywords, got {env!r}")
    unknown = sorted(set(env) - set(PLANT_KEYS))
    if unknown:
        raise ValueError(f"env: unknown plant keywords {unknown}; valid: {', '.join(PLANT_KEYS)}")
    return plant_options(env.get("preset"), **{k: v for k, v in env.items() if k != "preset"})
