"""Where a residual tracker applies the body-z part of its estimate (``thrust_axis``).

Known answers of :func:`commanded_axis_residual` (the thrust points where the command without
that part points; the collective carries it exactly; nothing changes when the achieved axis is the
commanded one), and the closed-loop case it fixes: on the ideal plant with a softer attitude loop
(``wn_rp`` 10 rad/s), the ``extra`` payload and a calm hover, the estimate applied along the
achieved axis makes the adaptive trackers orbit the hover point while ``pid`` holds millimetres."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from residual_quad.controllers import make_controller
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.residual.application import commanded_axis_residual
from residual_quad.envs.airframe import Airframe
from residual_quad.episode import run_episode

G = 9.81
finite = st.floats(-8.0, 8.0, allow_nan=False)


def rotation(rx: float, ry: float, rz: float) -> np.ndarray:
    """Body → world rotation of the rotation vector (rx, ry, rz), rad (Rodrigues)."""
    w = np.array([rx, ry, rz])
    angle = np.linalg.norm(w)
    if angle == 0.0:
        return np.eye(3)
    k = w / angle
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


@given(
    a_cmd=arrays(np.float64, 3, elements=finite),
    estimate=arrays(np.float64, 3, elements=finite),
    angles=arrays(np.float64, 3, elements=st.floats(-0.6, 0.6)),
)
def test_the_thrust_points_where_the_command_does_and_the_collective_carries_the_rest(
    a_cmd, estimate, angles
):
    R = rotation(*angles)
    applied = commanded_axis_residual(a_cmd, estimate, R, G)
    b = R.T @ estimate
    a_v = a_cmd - R[:, :2] @ b[:2]  # the command without the body-z part
    thrust_v = a_v + np.array([0.0, 0.0, G])
    thrust = a_cmd - applied + np.array([0.0, 0.0, G])  # what the inner loop is handed
    norm_v = np.linalg.norm(thrust_v)
    assert np.allclose(np.cross(thrust, thrust_v), 0.0, atol=1e-9 * (1 + norm_v**2))
    assert np.isclose(thrust @ thrust_v / norm_v, norm_v - b[2], atol=1e-9 * (1 + norm_v))
    # the body x/y components are applied as the estimator rotated them
    assert np.allclose(R.T @ applied - b[2] * (R.T @ thrust_v / norm_v), [*b[:2], 0.0], atol=1e-9)


def test_when_the_achieved_axis_is_the_commanded_one_both_rules_agree():
    R = rotation(0.2, -0.1, 0.7)
    estimate = R @ np.array([0.3, -0.2, -4.0])
    a_cmd = R[:, 2] * 11.0 - np.array([0.0, 0.0, G]) + R[:, :2] @ np.array([0.3, -0.2])
    assert np.allclose(commanded_axis_residual(a_cmd, estimate, R, G), estimate, atol=1e-12)


def test_a_batch_is_its_rows():
    rng = np.random.default_rng(0)
    R = np.stack([rotation(*rng.uniform(-0.5, 0.5, 3)) for _ in range(5)])
    a_cmd, estimate = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    batch = commanded_axis_residual(a_cmd, estimate, R, G)
    rows = [commanded_axis_residual(a_cmd[i], estimate[i], R[i], G) for i in range(5)]
    assert np.array_equal(batch, np.stack(rows))


def test_a_free_fall_command_keeps_the_achieved_axis():
    R = rotation(0.1, 0.0, 0.0)
    estimate = R @ np.array([0.0, 0.0, -3.0])
    applied = commanded_axis_residual(np.array([0.0, 0.0, -G]), estimate, R, G)
    assert np.allclose(applied, estimate, rtol=0, atol=1e-15)


def test_an_unknown_thrust_axis_lists_the_choices():
    with pytest.raises(ValueError, match="achieved, commanded"):
        make_controller("geo_rls", thrust_axis="desired")


SOFT = {"wn_rp": 10.0}  # rad/s, a softer attitude loop (the default is 18)


def _hover_rmse(name: str, context: ControlContext | None = None, **options) -> float:
    ctrl = make_controller(name, context, attitude=SOFT, **options)
    result = run_episode(ctrl, payload="extra", wind="calm", trajectory="hover", seed=0)
    assert not result.diverged
    return result.rmse


def test_a_softer_attitude_loop_keeps_the_adaptive_hover_with_the_commanded_axis():
    """Ideal plant, ``extra`` payload, calm hover, ``wn_rp`` 10: along the achieved axis the
    estimate softens the attitude loop and ``geo_rls_dob`` orbits at decimetres; along the
    commanded axis it holds within 2 × ``pid``. ``geo_rls`` (no observer in the attitude loop)
    holds there too once its attitude loop knows the payload's inertia: what is left of its orbit
    with the nominal inertia is the attitude loop's, not the estimate's."""
    pid = _hover_rmse("pid")
    assert pid < 0.01
    assert _hover_rmse("geo_rls_dob") > 10 * pid  # the achieved axis (the source's rule)
    assert _hover_rmse("geo_rls_dob", thrust_axis="commanded") <= 2 * pid
    loaded = ControlContext(airframe=Airframe(inertia=(0.0120, 0.0120, 0.01327)))  # kg·m²
    assert _hover_rmse("geo_rls", loaded) > 10 * pid
    assert _hover_rmse("geo_rls", loaded, thrust_axis="commanded") <= 2 * pid
