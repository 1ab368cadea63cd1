"""Could one control period be one engine call? The plant's forces against MuJoCo's own.

Today both envs recompute the drag (on the air-relative velocity, wind drawn per substep) and the
ground-effect gain before every 500 Hz substep in Python/numpy, so a period is five engine calls
(``mj_step`` or ``rollout(nstep=1)``). This study measures the two ways out:

* :func:`fluid_fit`: MuJoCo's passive fluid forces (``opt.density``, ``opt.viscosity``,
  ``opt.wind``; the inertia-box model and the ellipsoid model of a geom with
  ``fluidshape="ellipsoid"``) fitted by least squares to :class:`DragModel` over body-frame
  air-relative velocities up to 12 m/s — the best any choice of their coefficients can do;
* :func:`frozen_rows`: the bound of a one-call period that keeps the plant's formulas: the drag
  of every substep computed *before* the period from its start state (and each substep's own wind
  sample), the ground-effect gain from its start height — committed rows re-flown that way and
  compared with the committed metrics. The time side is ``rquad bench --sections period``.

``python -m residual_quad.evaluation.studies.engine_period`` prints both (about a minute).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mujoco
import numpy as np

from residual_quad.envs.disturbances import DragModel, drag_world_force
from residual_quad.envs.model import BODY, build_spec
from residual_quad.envs.plant import QuadrotorPlant
from residual_quad.envs.rotations import quat_to_rot

#: committed sweep rows re-flown with the frozen period (wind, payload and controller spread)
FROZEN_SAMPLE = (
    "geo|extra|breezy|helix|2",
    "geo_rls|extra|windy|helix|0",
    "geo_res|heavy|windy|helix|0",
    "pid|light|windy|figure8|1",
    "geo_rls|none|calm|hover|1",
)
#: the row metrics compared
METRICS = ("rmse", "max_error", "control_cost", "residual_bias")


def _velocity_grid(v_max: float = 12.0, n: int = 13) -> np.ndarray:
    """Body-frame air-relative velocities (m/s): a cube grid, the zero row left out."""
    axis = np.linspace(-v_max, v_max, n)
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    return grid[np.linalg.norm(grid, axis=1) > 0]


def _fluid_forces(spec: mujoco.MjSpec, velocities: np.ndarray) -> np.ndarray:
    """MuJoCo's passive force on the frame (N, world = body: level, at rest in still air)
    for each linear velocity, with the spec's fluid settings."""
    model = spec.compile()
    data = mujoco.MjData(model)
    out = np.empty_like(velocities)
    for i, v in enumerate(velocities):
        mujoco.mj_resetData(model, data)
        data.qpos[2] = 5.0
        data.qvel[0:3] = v
        mujoco.mj_forward(model, data)
        out[i] = data.qfrc_passive[0:3]
    return out


def _basis(kind: str, velocities: np.ndarray, aspect: float = 1.0) -> list[np.ndarray]:
    """The fluid force is linear in its coefficients at zero angular velocity: one force field
    per coefficient (the others zero). ``aspect``: the ellipsoid's vertical over horizontal
    semi-axis."""
    fields = []
    if kind == "inertia_box":
        for density, viscosity in ((1.0, 0.0), (0.0, 1.0)):
            spec = build_spec()
            spec.option.density, spec.option.viscosity = density, viscosity
            fields.append(_fluid_forces(spec, velocities))
        return fields
    # ellipsoid: blunt drag, slender drag, Kutta lift (×density) and the viscous term
    for k, (density, viscosity) in enumerate(((1.0, 0.0),) * 3 + ((0.0, 1.0),)):
        spec = build_spec()
        spec.option.density, spec.option.viscosity = density, viscosity
        for g in spec.body(BODY).geoms:
            g.fluid_ellipsoid = 0.0
        hub = spec.geom("hub")
        hub.type = mujoco.mjtGeom.mjGEOM_ELLIPSOID
        hub.size = [0.2, 0.2, 0.2 * aspect]
        hub.fluid_ellipsoid = 1.0
        coefs = [0.0] * 5
        if k < 3:
            coefs[(0, 1, 3)[k]] = 1.0  # C_blunt, C_slender, C_K
        hub.fluid_coefs = coefs
        fields.append(_fluid_forces(spec, velocities))
    return fields


def _fit(fields: list[np.ndarray], target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares coefficients of ``fields`` for ``target`` (each row weighted by
    1 / |target|, so slow and fast flight count alike) and the fitted forces."""
    w = 1.0 / np.linalg.norm(target, axis=1, keepdims=True)
    a = np.stack([(f * w).ravel() for f in fields], axis=1)
    coef, *_ = np.linalg.lstsq(a, (target * w).ravel(), rcond=None)
    return coef, sum(c * f for c, f in zip(coef, fields, strict=True))


def fluid_fit(drag: DragModel | None = None) -> dict[str, dict[str, Any]]:
    """Per fluid model: the best-fitting coefficients and the relative force error against the
    plant's drag (``|F_fit − F| / |F|``: max and RMS over the velocity grid, and at one point,
    ``(8, 0, 4)`` m/s, climbing forward flight)."""
    drag = drag or DragModel()
    vel = _velocity_grid()
    target = np.array([drag.body_force(v) for v in vel])
    probe = np.array([8.0, 0.0, 4.0])
    i_probe = int(np.argmin(np.linalg.norm(vel - probe, axis=1)))
    out: dict[str, dict[str, Any]] = {}
    candidates = [("inertia_box", 1.0)] + [
        ("ellipsoid", a) for a in (0.25, 0.5, 0.61, 1.0, 2.0, 4.0)
    ]
    for kind, aspect in candidates:
        coef, fitted = _fit(_basis(kind, vel, aspect), target)
        err = np.linalg.norm(fitted - target, axis=1) / np.linalg.norm(target, axis=1)
        res = {
            "coefficients": coef.round(6).tolist(),
            "max_rel_error": float(err.max()),
            "rms_rel_error": float(np.sqrt(np.mean(err**2))),
            "probe_rel_error": float(err[i_probe]),
        }
        best = out.get(kind)
        if best is None or res["rms_rel_error"] < best["rms_rel_error"]:
            out[kind] = {**res, "aspect": aspect}
    return out


def frozen_period_step(self: QuadrotorPlant, rotor_thrusts: Any) -> None:
    """:meth:`QuadrotorPlant.step` with every substep's wrench fixed before the period (what one
    ``rollout(nstep=substeps)`` call per period could take): the drag on the start velocity
    minus each substep's wind, the ground-effect gain at the start height."""
    fmax = self.airframe.max_rotor_thrust
    f = [min(max(float(x), 0.0), fmax) for x in rotor_thrusts]
    self.thrusts = np.array(f)
    self.thrust_sum = f[0] + f[1] + f[2] + f[3]
    d, m, xf = self.data, self.model, self._xfrc
    d.ctrl[:] = f
    self._update_contact_flag()
    drag, gain = self.drag, self._gain
    pz, qw, qx, qy, qz = d.qpos[2:7].tolist()
    vx, vy, vz = d.qvel[0:3].tolist()
    rot = quat_to_rot(qw, qx, qy, qz)
    winds = self._wind_proc.take(self.substeps)
    if self.ground_effect is not None:
        gain[:] = self.ground_effect.gain(pz)
    fx = fy = fz = 0.0
    for wx, wy, wz in winds.tolist():
        fx, fy, fz = drag_world_force(
            rot, vx - wx, vy - wy, vz - wz, drag.k_h, drag.k_v, drag.c_lin
        )
        xf[0], xf[1], xf[2] = fx, fy, fz
        mujoco.mj_step(m, d)
    self.ground_gain = float(gain[0])
    self.wind = winds[-1]
    self.drag_force = np.array((fx, fy, fz))


@contextmanager
def frozen_periods() -> Iterator[None]:
    """Fly with :func:`frozen_period_step` in this process while the context is open."""
    real = QuadrotorPlant.step
    QuadrotorPlant.step = frozen_period_step  # type: ignore[method-assign]
    try:
        yield
    finally:
        QuadrotorPlant.step = real  # type: ignore[method-assign]


def frozen_rows(sample: tuple[str, ...] = FROZEN_SAMPLE) -> list[dict[str, Any]]:
    """Each sampled committed row re-flown with frozen periods: the metrics' relative change
    and whether the discrete outcome (diverged, steps) moved."""
    from residual_quad.evaluation.studies import reproduce

    out = []
    for run_id in sample:
        committed = reproduce.committed_row("sweep", run_id)
        with frozen_periods():
            row = reproduce.refly("sweep", run_id)
        change = {}
        for k in METRICS:
            a, b = committed.get(k), row.get(k)
            if isinstance(a, float) and isinstance(b, float) and a:
                change[k] = (b - a) / abs(a)
        out.append(
            {
                "run_id": run_id,
                "rel_change": change,
                "outcome_moved": (row["diverged"], row["steps"])
                != (committed["diverged"], committed["steps"]),
            }
        )
    return out


def main() -> None:
    """Print :func:`fluid_fit` and :func:`frozen_rows`."""
    for kind, res in fluid_fit().items():
        print(
            f"{kind:<12} aspect {res['aspect']:<5} max {res['max_rel_error']:.1%}  "
            f"rms {res['rms_rel_error']:.1%}  at (8, 0, 4) m/s {res['probe_rel_error']:.1%}  "
            f"coefficients {res['coefficients']}"
        )
    for r in frozen_rows():
        ch = "  ".join(f"{k} {v:+.2e}" for k, v in r["rel_change"].items())
        moved = "  OUTCOME MOVED" if r["outcome_moved"] else ""
        print(f"{r['run_id']:<28} {ch}{moved}")
    print(f"(relative changes; math.ulp(1.0) = {math.ulp(1.0):.1e})")


if __name__ == "__main__":
    main()
