"""Trackers against analytic answers: steady-state error Δa/Kp, integral action, registry."""

from __future__ import annotations

import numpy as np
import pytest

from residual_quad.controllers import ControlContext, available_controllers, make_controller
from residual_quad.controllers.attitude import InnerLoop, tilt_of
from residual_quad.envs.airframe import Airframe, wrench
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.episode import run_episode

KP = 20.0  # geo default position gain, 1/s²


@pytest.mark.parametrize("payload", [0.25, 0.50, 0.75])
def test_geo_hover_steady_state_error_is_delta_a_over_kp(payload):
    result = run_episode(
        "geo", payload=payload, wind="calm", trajectory="hover", ground_effect=False
    )
    delta_a = 9.81 * payload / 0.95  # m/s², the nominal model's error in hover
    analytic = delta_a / KP
    final = float(np.linalg.norm(result.pos[-1] - result.ref[-1]))
    assert final == pytest.approx(analytic, rel=0.05)
    assert result.pos[-1, 2] < result.ref[-1, 2]  # sags below the set point


@pytest.mark.parametrize("payload", [0.25, 0.50, 0.75])
def test_pid_removes_the_hover_offset(payload):
    result = run_episode(
        "pid", payload=payload, wind="calm", trajectory="hover", ground_effect=False
    )
    assert float(np.linalg.norm(result.pos[-1] - result.ref[-1])) < 0.01


def test_pid_without_integral_gain_flies_geo_bit_for_bit():
    """``pid:ki=0`` is a PD: geo's command exactly, single and batched (the ``geo`` tracker
    of a ``ppo_res`` correction is this PD)."""
    pd = run_episode("pid:ki=0", payload="heavy", wind="windy", trajectory="helix", episode_s=3)
    geo = run_episode("geo", payload="heavy", wind="windy", trajectory="helix", episode_s=3)
    np.testing.assert_array_equal(pd.thrusts, geo.thrusts)
    from residual_quad.controllers.batch import make_batch_controller

    batch = make_batch_controller("pid", 2, ki=0.0)
    obs = np.stack([_stepped_obs(seed) for seed in (3, 4)])
    np.testing.assert_array_equal(
        batch.policy_batch(obs), make_batch_controller("geo", 2).policy_batch(obs)
    )
    assert not batch.state.integral.any()


def _stepped_obs(seed: int) -> np.ndarray:
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv

    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix")
    obs, _ = env.reset(seed=seed)
    for _ in range(20):
        obs, *_ = env.step(np.full(4, 0.1))
    return obs


def test_hover_thrust_equals_true_weight():
    for payload in (0.0, 0.5):
        r = run_episode("pid", payload=payload, trajectory="hover", ground_effect=False)
        assert r.thrusts[-1].sum() == pytest.approx((0.95 + payload) * 9.81, rel=1e-3)


def test_registry_lists_choices_and_builds_from_env():
    assert {"pid", "geo"} <= set(available_controllers())
    with pytest.raises(ValueError, match="valid choices: .*geo"):
        make_controller("lqr")
    ctrl = make_controller("geo", ControlContext(control_dt=0.005), kp=10.0)
    assert ctrl.kp == 10.0 and ctrl.dt == 0.005


def test_reset_restores_initial_state_exactly():
    ctrl = make_controller("pid")
    obs = np.zeros(36)
    obs[L.rot] = np.eye(3).ravel()
    obs[L.ref_pos] = [0.0, 0.0, 1.0]
    a1 = [ctrl.policy(obs) for _ in range(5)]
    ctrl.reset(0)
    a2 = [ctrl.policy(obs) for _ in range(5)]
    assert np.array_equal(np.array(a1), np.array(a2))


def test_inner_loop_hover_command_gives_weight_and_no_torque():
    frame = Airframe()
    inner = InnerLoop(frame)
    f = inner(np.eye(3), np.zeros(3), np.zeros(3), 0.0)
    assert wrench(frame, f) == pytest.approx([frame.hover_thrust, 0, 0, 0], abs=1e-12)


def test_inner_loop_limits_commanded_tilt():
    frame = Airframe()
    inner = InnerLoop(frame)
    F, saturated = inner.thrust_vector(np.array([50.0, 0.0, 0.0]))
    assert np.degrees(np.arctan2(np.hypot(F[0], F[1]), F[2])) == pytest.approx(35.0)
    assert saturated
    assert not inner.thrust_vector(np.array([1.0, 0.0, 0.0]))[1]


@pytest.mark.parametrize("payload", ["none", "extra"])
def test_attitude_gains_keep_heavy_frames_stable(payload):
    """A 35° attitude step (the source's flip scenario) settles without overshooting past 50°."""
    r = run_episode(
        "geo",
        payload=payload,
        trajectory="hover",
        reset_options={"position_offset": [-3.0, 0.0, 0.0]},
        episode_s=6.0,
    )
    assert not r.diverged
    assert np.degrees(r.tilt.max()) < 50.0
    assert np.linalg.norm(r.pos[-1] - r.ref[-1]) < 0.4


def test_tilt_helper():
    assert tilt_of(np.eye(3)) == 0.0
