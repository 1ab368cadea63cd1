"""The correction statistics against known signals, and ``rquad eval`` printing them for
``ppo_res`` only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residual_quad.evaluation.report.correction import correction_stats

DT = 0.02  # s, 50 Hz decisions


def test_bang_bang_at_the_nyquist_rate_is_all_bounds_high_frequency_and_jumps():
    u = np.zeros((500, 3))
    u[:, 0] = np.where(np.arange(500) % 2 == 0, 1.0, -1.0)  # flips every decision: 25 Hz
    s = correction_stats(u, DT)
    assert (s.decisions, s.at_bounds, s.jumps) == (500, 1.0, 1.0)
    assert s.high_freq_power == pytest.approx(1.0)


def test_a_slow_sine_inside_the_bounds_has_none_of_them():
    t = np.arange(1000) * DT
    u = 0.5 * np.sin(2 * np.pi * 0.5 * t)[:, None] * np.ones(3)
    s = correction_stats(u, DT)
    assert s.at_bounds == 0.0 and s.jumps == 0.0
    assert s.high_freq_power < 1e-20  # a 0.5 Hz tone: no power at 5 Hz and above


def test_known_shares_of_a_mixed_signal():
    u = np.zeros((100, 2))
    u[10:30, 1] = 1.0  # 20 of 100 decisions at a bound, two jumps of size 1 (not > 1)
    u[50, 0] = -1.0  # one more saturated decision, jumps of size 1
    u[70, 0], u[71, 0] = 0.8, -0.8  # one jump of 1.6 (> half the range)
    s = correction_stats(u, DT)
    assert s.at_bounds == pytest.approx(21 / 100)
    assert s.jumps == pytest.approx(1 / 99)
    assert 0 < s.high_freq_power < 1


def test_a_constant_correction_has_no_power_and_empty_input_is_zero():
    assert correction_stats(np.full((50, 3), 0.3), DT).high_freq_power == 0.0
    assert correction_stats(np.zeros((0, 3)), DT).decisions == 0


@pytest.mark.parametrize(
    ("u", "dt"),
    [(np.zeros(5), DT), (np.array([[np.nan, 0.0]]), DT), (np.zeros((4, 3)), 0.0)],
)
def test_bad_input_is_a_value_error(u, dt):
    with pytest.raises(ValueError):
        correction_stats(u, dt)


def test_eval_prints_the_correction_of_ppo_res_and_not_of_geo(capsys):
    pytest.importorskip("stable_baselines3")
    from residual_quad.cli import main

    argv = ["eval", "--controller", "ppo_res,geo", "--episode-s", "4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    by = {r["controller"]: r for r in out}
    assert "correction" not in by["geo"]
    c = by["ppo_res"]["correction"]
    assert c["decisions"] == 50  # 4 s − 3 s at 50 Hz
    assert 0.0 <= c["at_bounds"] <= 1.0 and 0.0 <= c["high_freq_power"] <= 1.0
    assert main(argv[:-1]) == 0
    assert "ppo_res correction: at its bounds" in capsys.readouterr().out


def test_the_recorder_keeps_ppo_res_held_correction_each_step():
    """``rquad eval``'s recorder applies to ``ppo_res`` (the law's held correction ``policy.u``)
    and to no controller without one; it keeps one copy per step, renewed once per decision."""
    pytest.importorskip("stable_baselines3")
    from residual_quad.controllers import make_controller
    from residual_quad.envs.residual_quad_env import ResidualQuadEnv
    from residual_quad.evaluation.report.correction import CorrectionRecorder

    ctrl = make_controller("ppo_res")
    assert CorrectionRecorder.applies(ctrl)
    assert not CorrectionRecorder.applies(make_controller("geo"))
    assert not CorrectionRecorder.applies(make_controller("ppo"))
    recorder = CorrectionRecorder(ctrl)
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix", **ctrl.env_kwargs)
    obs, _ = env.reset(seed=0)
    ctrl.reset()
    for step in range(8):
        action = ctrl.policy(obs)
        recorder(step, obs, action, {})
        np.testing.assert_array_equal(recorder.held[-1], ctrl.state.policy.u)
        obs, *_ = env.step(action)
    held = np.array(recorder.held)
    assert np.all(np.abs(held) <= 1.0) and held.any()
    repeat = ctrl.action_repeat
    assert repeat == 2 and all(np.array_equal(held[k], held[k + 1]) for k in range(0, 8, repeat))
    assert recorder.stats(0.0).decisions == 8 // repeat
