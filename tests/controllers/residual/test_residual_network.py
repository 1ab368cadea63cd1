"""Residual network for inference: architecture, fast single-sample path, persistence."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from residual_quad.controllers.residual.features import build_features
from residual_quad.controllers.residual.network import (
    DEFAULT_WEIGHTS,
    FastMLP,
    ResidualMLP,
    ResidualWeightsError,
    load_network,
)


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


def test_output_clip_limits_prediction():
    net = ResidualMLP(seed=0)
    net.b[-1][...] = (7.0, -7.0, 0.0)  # ×2.0 → ±14 m/s², beyond the ±10 clip
    X = np.zeros((4, 14))
    Yhat = net.predict(X)
    np.testing.assert_array_equal(Yhat[:, :2], np.tile([10.0, -10.0], (4, 1)))
    assert np.array_equal(FastMLP(net)(X[0]), Yhat[0])


def test_fast_inference_matches_batch_forward(random_net):
    net = random_net(8, scale=0.2)
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


# ----------------------------------------------------------------------------- persistence
def test_save_load_roundtrip(tmp_path: Path, random_net):
    net = random_net(10)
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


def test_corrupt_or_wrong_weight_files_give_readable_errors(tmp_path: Path, random_net):
    good = random_net(11).save(tmp_path / "good.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive at all")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    cases = {
        garbage: "not a readable .npz",
        truncated: "not a readable .npz",
        tmp_path / "missing.npz": "does not exist",
        tmp_path: "is a directory, not a weights file",
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


def test_batch_regressors_do_not_depend_on_the_batch_size():
    """Each row's ``[h, 1]`` is bit for bit the single-sample one in a batch of any size (a
    plain ``(N, k) @ (k, h)`` product changes its BLAS kernel with N and moved sweep rows)."""
    fast = FastMLP(load_network("default"))
    X = np.random.default_rng(4).standard_normal((40, 14)) * 2
    single = np.array([fast.hidden(x).copy() for x in X])
    for n in (1, 2, 3, 8, 17, 40):
        assert np.array_equal(fast.hidden_batch(X[:n]), single[:n]), n
