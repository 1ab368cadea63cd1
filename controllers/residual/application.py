"""How a residual tracker applies its estimate Δâ: along which thrust axis its body-z part acts.

The estimator predicts the residual in the body frame of the current observation and rotates it
to the world frame with the *achieved* attitude ``R`` (the source's rule [RES §5]). Its body-z
component is mostly a thrust-efficiency error — an unmodelled payload makes the same collective
accelerate the vehicle less, along the thrust axis — so next period it acts along the thrust
axis the tracker is about to *command*, not the one the vehicle has now. Applied along the
achieved axis, that component tilts the desired thrust vector toward the current attitude: the
attitude loop's error shrinks by the thrust-efficiency ratio (to 0.56 of itself with the ``extra``
payload's 0.75 kg), which softens the attitude loop as much as a 25 % lower natural frequency.
With the default attitude gains that shows as a slow ring; with softer gains (``wn_rp`` 10 rad/s)
the vehicle orbits its hover point at ≈ 0.3 m, and so does ``geo`` fed the *true* residual of the
previous period the same way — the estimate is not at fault, its application is
(docs/adaptive.md, "Thrust axis").

``thrust_axis = "commanded"`` applies the body-x/y components as before (rotated with ``R``) and
the body-z component ``c`` along ``u``, the direction of the thrust the inner loop will command,
``u = (a_v + g·e_z)/|a_v + g·e_z|`` with ``a_v = a_cmd − R·(b_x, b_y, 0)``: the effective command
``a_cmd − Δâ = a_v − c·u`` then points the thrust exactly where ``a_v`` does, and only its
magnitude (the collective) carries ``c``. When the achieved axis is the commanded one both rules
give the same Δâ.
"""

from __future__ import annotations

import numpy as np

#: where the body-z part of Δâ is applied: ``achieved`` (the current body z axis, the source's
#: rule) or ``commanded`` (the thrust direction the inner loop is about to command)
THRUST_AXES: tuple[str, ...] = ("achieved", "commanded")


#: a commanded specific thrust below this fraction of g has no direction worth following (a
#: command of free fall, up to rounding): the achieved axis is kept
FREE_FALL = 1e-6


def commanded_axis_residual(
    a_cmd: np.ndarray, estimate: np.ndarray, R: np.ndarray, gravity: float
) -> np.ndarray:
    """Δâ to subtract from ``a_cmd`` (world, m/s²) so that the body-z part of ``estimate``
    (world, m/s², rotated with the achieved attitude ``R``, body → world) acts along the
    commanded thrust axis (module docstring). Shapes (3,), (3,), (3, 3) for one vehicle or
    (N, 3), (N, 3), (N, 3, 3) for a batch. A command of free fall (``|a_v + g·e_z|`` below
    :data:`FREE_FALL` g: no thrust direction) keeps the achieved axis."""
    b = np.einsum("...ji,...j->...i", R, estimate)  # Rᵀ Δâ: body components
    horizontal = R[..., :, 0] * b[..., 0:1] + R[..., :, 1] * b[..., 1:2]  # body x/y, world
    thrust = a_cmd - horizontal
    thrust[..., 2] += gravity  # a_v + g·e_z: the specific thrust the inner loop will command
    norm = np.sqrt(np.einsum("...i,...i->...", thrust, thrust))[..., None]
    has_axis = norm > FREE_FALL * gravity
    axis = np.where(has_axis, thrust / np.where(has_axis, norm, 1.0), R[..., :, 2])
    return horizontal + b[..., 2:3] * axis
