"""The disturbance plant: drag assigned every substep, decelerating at the formula rate; ground
effect."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.envs.disturbances import GroundEffect
from residual_quad.envs.plant import QuadrotorPlant


# ------------------------------------------------------------------------------------ drag
def _plant(**kw):
    plant = QuadrotorPlant(**kw)
    plant.reset(np.random.default_rng(0), np.array([0.0, 0.0, 5.0]), 0.3)
    return plant


def test_plant_assigns_drag_in_world_frame_every_substep():
    """The applied force equals the formula for the last substep's state (not a sum)."""
    plant = _plant(ground_effect=None)
    plant.data.qvel[0:3] = [10.0, -3.0, 1.0]
    plant.step(np.full(4, 2.33))
    d = plant.data
    # recompute for the state at the start of the last substep from the stored force
    f = d.xfrc_applied[plant.body_id, 0:3]
    assert np.array_equal(f, plant.drag_force)
    # formula check on the current state (one substep later, so only approximately equal)
    R = d.xmat[plant.body_id].reshape(3, 3)
    expected = R @ plant.drag.body_force(R.T @ d.qvel[0:3])
    assert f == pytest.approx(expected, rel=0.02)
    assert np.linalg.norm(f) < 7.0  # one substep's worth, ~5.7 N, not five accumulated


def test_plant_drag_on_a_velocity_step_decelerates_at_formula_rate():
    plant = _plant(ground_effect=None)
    plant.data.qvel[0:3] = [10.0, 0.0, 0.0]
    hover = np.full(4, plant.airframe.hover_thrust / 4)
    v0 = plant.data.qvel[0]
    plant.step(hover)
    decel = (plant.data.qvel[0] - v0) / plant.control_dt
    assert decel == pytest.approx(-(0.055 * 100 + 0.2) / 0.95, rel=0.02)


# ------------------------------------------------------------------------------------ ground
def test_ground_effect_raises_thrust_near_floor():
    plant = QuadrotorPlant(ground_effect=GroundEffect())
    plant.reset(np.random.default_rng(0), np.array([0.0, 0.0, 0.12]), 0.0)
    hover = np.full(4, plant.airframe.hover_thrust / 4)
    plant.step(hover)
    assert plant.ground_gain > 1.05
    assert plant.data.qvel[2] > 0.0  # nominal hover thrust climbs in ground effect
