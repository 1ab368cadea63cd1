"""geo_res / geo_rls: equivalence with geo, run isolation, configuration, TensorBoard curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residual_quad.controllers import available_controllers, make_controller
from residual_quad.controllers.driver import LawController
from residual_quad.controllers.residual.config import residual_config
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.episode import run_episode


def _actions(controller, **scenario) -> tuple[np.ndarray, object]:
    acts = []
    res = run_episode(controller, callback=lambda k, o, a, i: acts.append(a.copy()), **scenario)
    return np.array(acts), res


def test_registered():
    assert {"geo_res", "geo_rls"} <= set(available_controllers())
    ctrl = make_controller("geo_rls")
    assert isinstance(ctrl, LawController) and isinstance(ctrl.law, RLSGeoTracker)


def test_untrained_network_geo_res_is_bit_identical_to_geo():
    scenario = dict(payload="heavy", wind="windy", trajectory="helix", seed=1, episode_s=8.0)
    a_geo, r_geo = _actions(make_controller("geo"), **scenario)
    a_res, r_res = _actions(make_controller("geo_res", weights="none"), **scenario)
    assert np.array_equal(a_geo, a_res)
    assert np.array_equal(r_geo.pos, r_res.pos)
    assert r_geo.rmse == r_res.rmse


def test_geo_rls_repeatable_and_uncontaminated_by_other_runs():
    scenario = dict(payload="extra", wind="windy", trajectory="figure8", seed=2, episode_s=5.0)
    ctrl = make_controller("geo_rls")
    theta0 = ctrl.estimator.net.theta0.copy()
    a1, r1 = _actions(ctrl, **scenario)
    assert not np.array_equal(ctrl.state.estimator.rls.theta, theta0)  # it did adapt
    a2, r2 = _actions(ctrl, **scenario)
    _actions(ctrl, payload="light", wind="calm", trajectory="hover", seed=9, episode_s=3.0)
    a3, r3 = _actions(ctrl, **scenario)
    a4, _ = _actions(make_controller("geo_rls"), **scenario)  # a fresh controller
    for other in (a2, a3, a4):
        assert np.array_equal(a1, other)
    assert r1.rmse == r2.rmse == r3.rmse
    # the offline layer is never written, neither the network's nor the RLS's prior
    assert np.array_equal(ctrl.estimator.net.theta0, theta0)
    assert np.array_equal(ctrl.estimator.rls.theta0, theta0)


def test_reset_restores_offline_weights_from_private_copy():
    from residual_quad.controllers.residual.network import load_network

    net = load_network("default")
    ctrl = make_controller("geo_rls", network=net)
    net.flat[...] = 0.0  # the caller's network is not the controller's
    run_episode(ctrl, payload="extra", trajectory="hover", episode_s=2.0)
    rls, theta0 = ctrl.estimator.rls, ctrl.estimator.net.theta0
    assert ctrl.state.estimator.rls.steps > 0
    assert not np.array_equal(ctrl.state.estimator.rls.theta, theta0)
    ctrl.reset()
    assert ctrl.state.estimator.rls.steps == 0
    assert np.array_equal(ctrl.state.estimator.rls.theta, theta0)
    offline = load_network("default").last_layer()
    assert np.array_equal(rls.applied_one(ctrl.state.estimator.rls), offline)


def test_geo_rls_identifies_an_unseen_payload_in_hover():
    """``extra`` (0.75 kg) is outside the training data; RLS measures it within seconds."""
    est = []
    ctrl = make_controller("geo_rls")
    res = run_episode(
        ctrl,
        payload="extra",
        trajectory="hover",
        episode_s=6.0,
        callback=lambda k, o, a, i: est.append(ctrl.state.estimator.last_estimate[2]),
    )
    geo = run_episode("geo", payload="extra", trajectory="hover", episode_s=6.0)
    late = res.t[1:] >= 3.0
    assert abs(np.mean(np.array(est)[late] - res.residual_true[1:][late, 2])) < 0.2  # m/s²
    assert res.rmse < 0.03 < geo.rmse / 10  # geo sits at Δa/kp ≈ 0.39 m
    # policy call k (0-based) has made k updates: call 100 is the first to apply the estimate
    assert ctrl.state.estimator.warmup_end_step == ctrl.config.rls.warmup_steps


@pytest.mark.parametrize("source", ["velocity", "imu"])
def test_measurement_sources(source):
    ctrl = make_controller("geo_rls", measurement={"source": source})
    res = run_episode(ctrl, payload="extra", trajectory="hover", episode_s=5.0)
    assert not res.diverged and res.rmse < 0.03


def test_config_loading_is_strict(tmp_path: Path):
    cfg = residual_config()
    assert cfg.kp == 20.0 and cfg.rls.warmup_steps == 100
    assert residual_config(p0=0.5).rls.p0 == 0.5  # flat override, unambiguous
    assert residual_config(rls={"leak": 0.01}).rls.leak == 0.01
    with pytest.raises(ValueError, match="unknown residual-tracker setting 'gain'"):
        residual_config(gain=3.0)
    bad = tmp_path / "r.yaml"
    bad.write_text("weights: none\nrls:\n  p0: 0.1\n  forgeting: 0.9\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['forgeting'\]"):
        residual_config(bad)
    bad.write_text("weights: none\nkp: fast\n")
    with pytest.raises(ValueError, match="expected a number"):
        residual_config(bad)
    with pytest.raises(ValueError, match="measurement.source"):
        make_controller("geo_rls", measurement={"source": "gps"})
    with pytest.raises(ValueError, match="does not exist"):
        make_controller("geo_res", weights=str(tmp_path / "nope.npz"))


def test_tensorboard_episode_curves(tmp_path: Path):
    from residual_quad.training.tb_logging import EpisodeLogger, read_scalars

    ctrl = make_controller("geo_rls")
    logger = EpisodeLogger(tmp_path / "run", ctrl)
    res = run_episode(ctrl, payload="extra", trajectory="hover", episode_s=2.0, callback=logger)
    logger.close()
    true = read_scalars(tmp_path / "run" / "true")
    est = read_scalars(tmp_path / "run" / "estimate")
    rls = read_scalars(tmp_path / "run" / "rls")
    assert set(true) == set(est) == {"residual/x", "residual/y", "residual/z"}
    expected = {"rls/P_trace", "rls/prediction_error", "rls/innovation", "rls/applied"}
    assert expected | {"rls/warmup_end", "tracking/position_error"} <= set(rls)
    assert len(true["residual/z"]) == len(rls["rls/P_trace"]) == res.steps
    np.testing.assert_allclose(
        [v for _, v in true["residual/z"]], res.residual_true[1:, 2], rtol=1e-6, atol=1e-5
    )
    ((step, t_end),) = rls["rls/warmup_end"]  # exactly one marker, ~1 s after the start
    assert 0.95 <= t_end <= 1.1
    applied = dict(rls["rls/applied"])
    assert applied[step - 2] == 0.0 and applied[step] == 1.0


def test_cli_eval_tensorboard(tmp_path: Path, capsys):
    from residual_quad.cli import main

    rc = main(
        [
            "eval",
            "--controller",
            "geo,geo_rls",
            "--payload",
            "extra",
            "--episode-s",
            "1.5",
            "--tensorboard",
            str(tmp_path),
        ]
    )
    assert rc == 0
    assert "geo_rls" in capsys.readouterr().out
    runs = sorted(p.name for p in tmp_path.iterdir())
    assert runs == ["geo_extra_calm_hover_s0", "geo_rls_extra_calm_hover_s0"]
    for run in runs:
        for sub in ("true", "estimate", "rls"):
            assert any((tmp_path / run / sub).glob("events.out.tfevents.*"))
