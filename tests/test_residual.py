"""Residual network: features, measured residual, backprop, persistence, collection, training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from residual_quad.controllers.residual import (
    DEFAULT_WEIGHTS,
    FEATURE_NAMES,
    Adam,
    FastMLP,
    ResidualMLP,
    ResidualWeightsError,
    build_features,
    features_from_obs,
    imu_residual,
    load_network,
    measured_residual,
)
from residual_quad.controllers.trackers import GeoTracker
from residual_quad.envs.observation import ObsLayout as L


def _random_net(seed: int = 0, scale: float = 0.4) -> ResidualMLP:
    rng = np.random.default_rng(seed)
    net = ResidualMLP(seed=seed)
    net.flat[...] = scale * rng.standard_normal(net.n_params)
    X = rng.standard_normal((50, 14)) * 2.0 + 1.0
    net.set_standardization(X.mean(0), X.std(0), np.array([0.3, -0.2, -4.0]))
    return net


def _flat_grad(grads: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([g.ravel() for g in grads])


# ----------------------------------------------------------------------------- network
def test_architecture_and_untrained_network_is_exactly_zero():
    net = ResidualMLP(seed=3)
    assert net.sizes == (14, 64, 64, 3)
    assert net.n_params == 5315  # 14·64+64 + 64·64+64 + 64·3+3
    assert np.all(net.W[-1] == 0) and np.all(net.b[-1] == 0)
    lim = math.sqrt(6.0 / (14 + 64))  # Glorot-uniform bound of the first layer
    assert 0.9 * lim < np.abs(net.W[0]).max() <= lim
    X = np.random.default_rng(0).standard_normal((20, 14)) * 5
    assert np.array_equal(net.predict(X), np.zeros((20, 3)))
    assert np.array_equal(FastMLP(net)(X[0]), np.zeros(3))


def test_gradient_check_full_backward_pass():
    """Central differences over every one of the 5315 parameters: relative error < 1e-6."""
    net = _random_net(1)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((9, 14)) * 2.0 + 1.0
    Y = rng.standard_normal((9, 3)) * 2.0 + np.array([0.3, -0.2, -4.0])
    _, grads = net.loss_and_grad(X, Y)
    g = _flat_grad(grads)
    fd = np.empty_like(g)
    h = 1e-5
    for i in range(net.n_params):
        old = net.flat[i]
        net.flat[i] = old + h
        lp = net.loss_and_grad(X, Y)[0]
        net.flat[i] = old - h
        lm = net.loss_and_grad(X, Y)[0]
        net.flat[i] = old
        fd[i] = (lp - lm) / (2 * h)
    rel = np.linalg.norm(fd - g) / (np.linalg.norm(fd) + np.linalg.norm(g))
    assert rel < 1e-6
    # every layer carries gradient (a dead layer would pass the norm check trivially)
    for grad in grads:
        assert np.abs(grad).max() > 1e-6


def test_mse_gradient_is_divided_by_the_element_count():
    """The analytic gradient must match the derivative of ``np.mean`` over all N·3 elements.

    Dividing by the sample count N instead (the bug the source document describes) would make
    it exactly 3× too large; Adam would not notice, SGD would.
    """
    net = _random_net(4, scale=0.1)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 14))
    Y = rng.standard_normal((40, 3))
    s = net.output_scale
    assert np.abs(net.predict(X)).max() < net.output_clip  # no clipped element

    def independent_loss() -> float:  # written without the network's loss code
        return float(np.mean(((net.predict(X) - Y) / s) ** 2))

    _, grads = net.loss_and_grad(X, Y)
    g_bias = grads[-1]  # output-layer bias: ∂loss/∂b = Σ_n ∂loss/∂z_n
    fd = np.empty(3)
    for j in range(3):
        old = net.b[-1][j]
        net.b[-1][j] = old + 1e-6
        lp = independent_loss()
        net.b[-1][j] = old - 1e-6
        lm = independent_loss()
        net.b[-1][j] = old
        fd[j] = (lp - lm) / 2e-6
    np.testing.assert_allclose(g_bias, fd, rtol=1e-6)
    # closed form: 2·Σ(ŷ − y)/(s·N·3) per output
    expected = 2.0 * (net.predict(X) - Y).sum(axis=0) / (s * X.shape[0] * 3)
    np.testing.assert_allclose(g_bias, expected, rtol=1e-10)


def test_training_fast_path_equals_reference_gradient():
    net = _random_net(6)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((33, 14))
    Y = rng.standard_normal((33, 3)) * 3
    loss, grads = net.loss_and_grad(X, Y)
    buf = np.zeros_like(net.flat)
    loss_fast = net.batch_step(net.standardize(X), net.normalize_targets(Y), buf)
    assert loss_fast == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(buf, _flat_grad(grads), rtol=1e-9, atol=1e-14)


def test_output_clip_limits_prediction_and_blocks_gradient():
    net = ResidualMLP(seed=0)
    net.b[-1][...] = (7.0, -7.0, 0.0)  # ×2.0 → ±14 m/s², beyond the ±10 clip
    X = np.zeros((4, 14))
    Yhat = net.predict(X)
    np.testing.assert_array_equal(Yhat[:, :2], np.tile([10.0, -10.0], (4, 1)))
    _, grads = net.loss_and_grad(X, np.zeros((4, 3)))
    assert np.all(grads[-1][:2] == 0.0)  # clipped outputs pass no gradient
    assert np.array_equal(FastMLP(net)(X[0]), Yhat[0])


def test_fast_inference_matches_batch_forward():
    net = _random_net(8, scale=0.2)
    fast = FastMLP(net)
    X = np.random.default_rng(9).standard_normal((25, 14)) * 3.0
    ref = net.predict(X)
    for x, r in zip(X, ref, strict=True):
        np.testing.assert_allclose(fast(x), r, rtol=0, atol=1e-12)
    # phi is the last layer's input: [h_last, 1] and output = y_mean + s·phiᵀθ
    phi = fast.hidden(X[0]).copy()
    assert phi[-1] == 1.0 and phi.shape == (65,)
    np.testing.assert_allclose(
        fast.output(phi), net.y_mean + net.output_scale * phi @ net.last_layer(), atol=1e-12
    )
    # a private copy: changing the source network does not change the fast copy
    net.flat[...] = 0.0
    np.testing.assert_allclose(fast(X[0]), ref[0], atol=1e-12)


def test_adam_minimizes_a_quadratic():
    x = np.array([3.0, -2.0, 0.5])
    opt = Adam(x, lr=0.05)
    for _ in range(2000):
        opt.step(2.0 * (x - np.array([1.0, 1.0, 1.0])))
    np.testing.assert_allclose(x, 1.0, atol=1e-3)


# ----------------------------------------------------------------------------- persistence
def test_save_load_roundtrip(tmp_path: Path):
    net = _random_net(10)
    path = net.save(tmp_path / "w.npz", note="roundtrip")
    loaded = ResidualMLP.load(path)
    assert loaded.sizes == net.sizes
    np.testing.assert_array_equal(loaded.flat, net.flat)
    np.testing.assert_array_equal(loaded.x_mean, net.x_mean)
    np.testing.assert_array_equal(loaded.x_std, net.x_std)
    np.testing.assert_array_equal(loaded.y_mean, net.y_mean)
    assert loaded.metadata["note"] == "roundtrip"
    # the suffix is kept as given (numpy would append ".npz" to a bare name)
    assert net.save(tmp_path / "weights.bin").name == "weights.bin"


def _rewrite(src: Path, dst: Path, **changes) -> Path:
    with np.load(src) as data:
        arrays = {k: data[k] for k in data.files}
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    with open(dst, "wb") as fh:
        np.savez(fh, **arrays)
    return dst


def test_corrupt_or_wrong_weight_files_give_readable_errors(tmp_path: Path):
    good = _random_net(11).save(tmp_path / "good.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive at all")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    cases = {
        garbage: "not a readable .npz",
        truncated: "not a readable .npz",
        tmp_path / "missing.npz": "does not exist",
        _rewrite(good, tmp_path / "shape.npz", W1=np.zeros((64, 32))): "W1 has shape (64, 32)",
        _rewrite(good, tmp_path / "version.npz", format_version=np.array(99)): "format version 99",
        _rewrite(good, tmp_path / "nokey.npz", W2=None): "missing layer array 'W2'",
        _rewrite(good, tmp_path / "sizes.npz", sizes=np.array([10, 64, 64, 3])): "layer sizes",
        _rewrite(good, tmp_path / "nan.npz", b0=np.full(64, np.nan)): "non-finite",
        _rewrite(good, tmp_path / "other.npz", x_std=None): "missing entries ['x_std']",
    }
    for path, message in cases.items():
        with pytest.raises(ResidualWeightsError) as err:
            ResidualMLP.load(path)
        assert str(path) in str(err.value), err.value
        assert message in str(err.value), err.value


def test_packaged_default_weights():
    assert DEFAULT_WEIGHTS.is_file()
    assert DEFAULT_WEIGHTS.stat().st_size <= 60 * 1024
    net = load_network("default")
    assert net.sizes == (14, 64, 64, 3)
    meta = net.metadata
    assert meta["train_config"]["seed"] == 0 and "payloads" in meta["collect_config"]
    assert "extra" not in meta["collect_config"]["payloads"]
    # the trained network predicts the heavy payload's vertical residual in hover
    x = build_features(
        np.zeros(3), np.array([0.0, 0.0, 5.16]), np.zeros(3), 1.5, 9.81 * 1.45 / 0.95
    )
    assert net.predict(x)[2] == pytest.approx(-5.16, abs=0.5)


# ----------------------------------------------------------------------------- features
def test_features_body_frame_and_drag_basis():
    yaw = 0.7
    c, s = math.cos(yaw), math.sin(yaw)
    R = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    v_b = np.array([1.5, -0.5, 0.8])
    a_b = np.array([0.2, 0.1, -0.3])
    obs = np.zeros(36)
    obs[L.vel] = R @ v_b
    obs[L.rot] = R.ravel()
    obs[L.omega_b] = (0.1, 0.2, 0.3)
    obs[2] = 2.5
    obs[L.thrusts] = (2.0, 2.5, 3.0, 3.5)
    f = features_from_obs(obs, R, R @ a_b, 0.95)
    assert len(f) == len(FEATURE_NAMES) == 14
    s_h = math.hypot(1.5, -0.5)
    np.testing.assert_allclose(f[0:3], v_b, atol=1e-12)
    np.testing.assert_allclose(f[3:6], [1.5 * s_h, -0.5 * s_h, 0.8 * 0.8], atol=1e-12)
    np.testing.assert_allclose(f[6:9], a_b, atol=1e-12)
    np.testing.assert_allclose(f[9:12], (0.1, 0.2, 0.3))
    assert f[12] == 2.5 and f[13] == pytest.approx(11.0 / 0.95)
    f2 = build_features(-v_b, a_b, np.zeros(3), 1.0, 1.0)
    assert f2[5] == pytest.approx(-0.64)  # v_z·|v_z| keeps the sign


def _fly_geo(steps: int, **env_kwargs) -> tuple[list, list]:
    env = gym.make(
        "ResidualQuad-v0", payload="heavy", wind="windy", trajectory="helix", **env_kwargs
    ).unwrapped
    ctrl = GeoTracker()
    obs, _ = env.reset(seed=3)
    obs_list, infos = [obs], []
    for _ in range(steps):
        obs, _, _, _, info = env.step(ctrl.policy(obs))
        obs_list.append(obs)
        infos.append(info)
    env.close()
    return obs_list, infos


def test_measured_residual_equals_env_truth_without_noise():
    obs, infos = _fly_geo(150)
    frame_mass, g, dt = 0.95, 9.81, 0.01
    err = [
        np.abs(
            measured_residual(obs[k], obs[k + 1], dt, frame_mass, g) - infos[k]["residual_accel"]
        )
        for k in range(150)
    ]
    assert np.max(err) < 1e-9
    # the heavy payload shows as ≈ −5.2 m/s² vertical residual
    assert np.mean([i["residual_accel"][2] for i in infos[50:]]) == pytest.approx(-5.16, abs=0.3)
    # the accelerometer variant samples the same residual (body frame) at the period's end
    imu = np.array([imu_residual(o, frame_mass) for o in obs[51:]])
    truth_b = np.array(
        [
            i["residual_accel"] @ o[L.rot].reshape(3, 3)
            for o, i in zip(obs[51:], infos[50:], strict=True)
        ]
    )
    rms = np.sqrt(np.mean((imu - truth_b) ** 2, axis=0))
    assert np.all(rms < 0.15) and rms[2] < 0.02


def test_measured_residual_noise_is_velocity_noise_times_sqrt2_over_dt():
    sigma_v = 0.01  # m/s
    obs, infos = _fly_geo(300, vel_noise=sigma_v)
    err = np.array(
        [
            measured_residual(obs[k], obs[k + 1], 0.01, 0.95, 9.81) - infos[k]["residual_accel"]
            for k in range(1, 300)
        ]
    )
    assert err.std() == pytest.approx(math.sqrt(2) * sigma_v / 0.01, rel=0.1)  # 1.41 m/s²


# ----------------------------------------------------------------------------- collect + train
def _tiny_collect_config(**kw):
    from residual_quad.training.collect import load_collect_config

    base = dict(
        payloads=["none", "heavy"],
        winds=["breezy"],
        trajectories=["hover", "figure8"],
        seeds=[7],
        episode_s=3.0,
        workers=1,
    )
    base.update(kw)
    return load_collect_config(**base)


def test_collect_dataset_independent_of_workers(tmp_path: Path):
    from residual_quad.training.collect import collect, load_dataset

    cfg = _tiny_collect_config()
    s1 = collect(cfg, tmp_path / "a.npz", progress=False, workers=1)
    collect(cfg, tmp_path / "b.npz", progress=False, workers=2)
    a, b = load_dataset(tmp_path / "a.npz"), load_dataset(tmp_path / "b.npz")
    assert s1["runs"] == 4 and s1["samples"] == 4 * 150  # (3.0 − 1.5) s × 100 Hz per run
    assert s1["max_truth_error"] < 1e-9  # targets are the env's true residual
    np.testing.assert_array_equal(a["X"], b["X"])
    np.testing.assert_array_equal(a["Y"], b["Y"])
    assert a["t"].min() >= 1.5 - 1e-9  # take-off dropped
    assert a["config"]["payloads"] == ["none", "heavy"]
    assert (tmp_path / "a.yaml").is_file()  # resolved config next to the dataset
    # heavy runs have the payload's vertical residual, none runs do not
    heavy = np.isin(a["run"], [r["index"] for r in a["runs"] if r["payload"] == "heavy"])
    assert a["Y"][heavy, 2].mean() < -4.0 < a["Y"][~heavy, 2].mean()


def test_collect_refuses_extra_and_rejects_large_residuals(tmp_path: Path):
    from residual_quad.training.collect import collect, load_dataset

    with pytest.raises(ValueError, match="never collected"):
        _tiny_collect_config(payloads=["none", "extra"])
    cfg = _tiny_collect_config(payloads=["heavy"], trajectories=["hover"], reject_accel=5.0)
    summary = collect(cfg, tmp_path / "r.npz", progress=False)
    data = load_dataset(tmp_path / "r.npz")
    assert summary["rejected"] > 0
    assert np.linalg.norm(data["Y"], axis=1).max() <= 5.0


def test_training_learns_is_deterministic_and_logs_tensorboard(tmp_path: Path):
    from residual_quad.training.residual_train import load_train_config, train_residual
    from residual_quad.training.tb_logging import read_scalars

    rng = np.random.default_rng(0)
    n_runs, per_run = 20, 200
    X = rng.standard_normal((n_runs * per_run, 14))
    Y = np.stack([0.8 * X[:, 0] * np.abs(X[:, 0]), np.tanh(X[:, 2]), -3.0 + 0.5 * X[:, 13]], 1)
    runs = np.repeat(np.arange(n_runs), per_run)
    cfg = load_train_config(epochs=25, batch_size=128, patience=30, lr=1e-2)
    net1, s1 = train_residual(X, Y, runs, cfg, logdir=tmp_path / "tb")
    net2, _ = train_residual(X, Y, runs, cfg)
    np.testing.assert_array_equal(net1.flat, net2.flat)  # fixed seed → same weights
    assert s1["val_runs"] == 3  # 15 % of 20 runs, whole runs held out
    assert all(r < 0.4 * sd for r, sd in zip(s1["val_rmse"], s1["target_std"], strict=True))
    tags = read_scalars(tmp_path / "tb")
    expected = {"loss/train", "loss/val", "lr", "val_rmse/x", "val_rmse/y", "val_rmse/z"}
    assert expected | {"weights/norm_W0", "weights/norm_W2"} <= set(tags)
    assert len(tags["loss/val"]) == s1["epochs_run"]
    lr = [v for _, v in tags["lr"]]
    assert lr[0] == pytest.approx(cfg.lr, rel=1e-6) and lr[-1] < lr[0]  # cosine decay


def test_cli_collect_and_train(tmp_path: Path, capsys):
    import yaml

    from residual_quad.cli import main

    cfg_path = tmp_path / "collect.yaml"
    cfg_path.write_text(
        yaml.safe_dump(
            dict(
                payloads=["light"],
                winds=["calm"],
                trajectories=["hover", "helix"],
                seeds=[1],
                episode_s=2.5,
                workers=1,
            )
        )
    )
    data = tmp_path / "d.npz"
    assert main(["collect", "--config", str(cfg_path), "--out", str(data), "--no-progress"]) == 0
    out = tmp_path / "w.npz"
    rc = main(
        [
            "train",
            "residual",
            "--dataset",
            str(data),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--logdir",
            str(tmp_path / "tb"),
            "--no-progress",
            "--json",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{") :])
    assert summary["epochs_run"] == 2 and summary["weights"] == str(out)
    net = ResidualMLP.load(out)
    assert net.metadata["dataset_samples"] == 200
    assert json.loads(out.with_suffix(".json").read_text())["epochs_run"] == 2
    # unknown config keys are rejected with the valid ones listed
    bad = tmp_path / "bad.yaml"
    bad.write_text("payloads: [none]\nexcitation: {sigma: 1.0, colour: pink}\n")
    assert main(["collect", "--config", str(bad), "--out", str(data)]) == 2
    assert "colour" in capsys.readouterr().err


@pytest.mark.slow
def test_shipped_weights_are_reproducible_from_the_packaged_configs(tmp_path: Path):
    """`rquad collect` + `rquad train residual` with the packaged configs rebuild the shipped
    weights exactly (fails when the plant changes: retrain and ship again)."""
    import hashlib

    from residual_quad.training.collect import collect, load_collect_config
    from residual_quad.training.residual_train import load_train_config, train_from_dataset

    shipped = load_network("default")
    collect(load_collect_config(), tmp_path / "d.npz", progress=False)
    data = np.load(tmp_path / "d.npz")
    digest = hashlib.sha256(np.ascontiguousarray(data["X"]).tobytes())
    digest.update(np.ascontiguousarray(data["Y"]).tobytes())
    assert digest.hexdigest() == shipped.metadata["dataset_sha256"]
    train_from_dataset(tmp_path / "d.npz", load_train_config(), tmp_path / "w.npz", progress=False)
    np.testing.assert_array_equal(ResidualMLP.load(tmp_path / "w.npz").flat, shipped.flat)
