"""The MuJoCo model: the MJCF airframe, edited through ``MjSpec`` for parameters and payloads.

Payloads are added as a welded child body, so MuJoCo's compiler computes the composite mass and
inertia itself; writing ``model.body_mass`` directly would leave the inertia (and the cached
subtree quantities) inconsistent with the mass.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources

import mujoco
import numpy as np

from residual_quad.envs.actuators import add_rotor_lag
from residual_quad.envs.airframe import Airframe

BODY = "quad"
PAYLOAD_BODY = "payload"
ROTOR_SITES = ("rotor0", "rotor1", "rotor2", "rotor3")


def model_xml() -> str:
    """The MJCF text of the airframe and scene shipped with the package."""
    return resources.files("residual_quad.envs").joinpath("assets/quadrotor.xml").read_text()


def build_spec(
    airframe: Airframe | None = None,
    payload_kg: float = 0.0,
    physics_hz: float = 500.0,
    payload_offset: float = 0.10,  # m below the frame centre (extra: inertia ×1.6)
    payload_radius: float = 0.03,  # m, drawn size; the inertia is that of a solid sphere
    rotor_tau_s: float = 0.0,  # s, first-order rotor lag (0: ideal rotors)
    payload_body: bool = False,  # add the payload body even at 0 kg (payload events set its mass)
) -> mujoco.MjSpec:
    """An ``MjSpec`` of the quadrotor with ``airframe`` parameters, an optional payload and
    optional rotor dynamics (:mod:`residual_quad.envs.actuators`)."""
    frame = airframe or Airframe()
    if payload_kg < 0:
        raise ValueError(f"payload must be >= 0 kg, got {payload_kg}")
    if physics_hz <= 0:
        raise ValueError(f"physics_hz must be > 0, got {physics_hz}")
    spec = mujoco.MjSpec.from_string(model_xml())
    spec.option.timestep = 1.0 / physics_hz
    spec.option.gravity = [0.0, 0.0, -frame.gravity]

    body = spec.body(BODY)
    body.mass = frame.mass
    body.inertia = list(frame.inertia)
    body.explicitinertial = True
    for i, (name, p) in enumerate(zip(ROTOR_SITES, frame.rotor_positions, strict=True)):
        site = spec.site(name)
        site.pos = [p[0], p[1], site.pos[2]]
        site.size = [frame.rotor_radius, site.size[1], 0.0]
        act = spec.actuator(f"thrust{i}")
        act.gear = [0.0, 0.0, 1.0, 0.0, 0.0, frame.k_yaw * frame.yaw_sign[i]]
        act.ctrlrange = [0.0, frame.max_rotor_thrust]
    add_rotor_lag(spec, [f"thrust{i}" for i in range(len(ROTOR_SITES))], rotor_tau_s)
    for name in ("arm_a", "arm_b"):
        geom = spec.geom(name)
        sign = 1.0 if name == "arm_a" else -1.0
        a = frame.arm_length / np.sqrt(2.0)
        geom.fromto = [-a, -sign * a, 0.0, a, sign * a, 0.0]

    if payload_kg > 0.0 or payload_body:
        load = body.add_body(name=PAYLOAD_BODY, pos=[0.0, 0.0, -payload_offset])
        load.add_geom(
            name="payload",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[payload_radius, 0.0, 0.0],
            mass=payload_kg,
            rgba=[0.9, 0.75, 0.1, 1.0],
        )
    return spec


def build_model(
    airframe: Airframe | None = None,
    payload_kg: float = 0.0,
    physics_hz: float = 500.0,
    **spec_kwargs: float | bool,
) -> mujoco.MjModel:
    """Compile :func:`build_spec`: once per process for each set of arguments, then a copy of
    that model (``copy.copy`` of an ``MjModel`` copies every field and array: the same model,
    independent of the first) — a sweep builds one plant per run, most of them alike, and the
    copy costs a sixth of the compile."""
    spec = tuple(sorted(spec_kwargs.items()))
    return copy.copy(_compiled(airframe or Airframe(), payload_kg, physics_hz, spec))


@functools.lru_cache(maxsize=64)  # the compiled models of a process, least recently used dropped
def _compiled(
    airframe: Airframe, payload_kg: float, physics_hz: float, spec: tuple[tuple[str, float], ...]
) -> mujoco.MjModel:
    """The model :func:`build_model` copies (never handed out itself)."""
    return build_spec(airframe, payload_kg, physics_hz, **dict(spec)).compile()
