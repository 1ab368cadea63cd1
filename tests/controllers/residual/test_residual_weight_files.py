"""Bad residual weight files: every one is a ``ResidualWeightsError`` naming the file, at load time.

Regression cases first (each used to escape as another exception type, or after allocating
gigabytes), then property-based mutations of a valid file: truncated, bit-flipped, entries
replaced by arrays of random dtypes/shapes/values or removed, random metadata JSON. A mutated file
either loads and flies (finite actions) or raises the file-naming error — nothing else.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from residual_quad.controllers import make_controller
from residual_quad.controllers.residual.network import (
    DEFAULT_WEIGHTS,
    ResidualMLP,
    ResidualWeightsError,
    load_network,
)
from residual_quad.envs.residual_quad_env import ResidualQuadEnv


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _write(path: Path, arrays: dict[str, object]) -> Path:
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


@pytest.fixture(scope="module")
def valid() -> dict[str, np.ndarray]:
    """The arrays of the shipped default weights."""
    return _arrays(DEFAULT_WEIGHTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"W0": np.full((14, 64), "0.5")}, "real numbers.*W0"),
        ({"sizes": np.array([14, 2e9, 3])}, "layer sizes"),  # used to allocate 268 GiB
        ({"sizes": np.array([14, 64, 64, 3, 3])}, "missing layer array 'W3'"),
        ({"sizes": np.array([14.5, 64, 64, 3])}, "integers"),
        ({"metadata": np.array("[1,2]")}, "metadata must be a JSON object"),
        ({"metadata": np.array("{")}, "not valid JSON"),
        ({"metadata": np.arange(3)}, "single strings"),
        ({"x_mean": np.array(["a"] * 14)}, "real numbers.*x_mean"),
        ({"y_mean": np.zeros(3, dtype=complex)}, "real numbers.*y_mean"),
        ({"output_scale": np.array(np.inf)}, "non-finite"),
        ({"output_clip": np.array([1.0, 2.0])}, "single numbers"),
        ({"format_version": np.array("x")}, "real numbers.*format_version"),
        ({"b1": np.full(64, np.nan)}, "non-finite.*b1"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else None,
)
def test_bad_entries_name_the_file(tmp_path, valid, change, message):
    path = _write(tmp_path / "bad.npz", {**valid, **change})
    with pytest.raises(ResidualWeightsError, match=message) as err:
        ResidualMLP.load(path)
    assert str(path) in str(err.value)


def test_other_files_name_the_file(tmp_path, valid):
    npy = tmp_path / "weights.npy"  # a .npy passed as weights
    np.save(npy, valid["W0"])
    raw = tmp_path / "raw.npz"  # a zip whose members are not arrays
    with zipfile.ZipFile(raw, "w") as z:
        for key in valid:
            z.writestr(key, b"not an array")
    data = DEFAULT_WEIGHTS.read_bytes()
    flipped = tmp_path / "flipped.npz"  # inside the compressed stream: a zlib error
    flipped.write_bytes(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    for path in (npy, raw, flipped, cut):
        with pytest.raises(ResidualWeightsError) as err:
            load_network(str(path))
        assert str(path) in str(err.value), path.name
    with pytest.raises(ResidualWeightsError, match="geo_res.npz"):
        make_controller("geo_res", weights=str(npy.with_name("geo_res.npz")))  # missing


# ----------------------------------------------------------------------------- properties
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("weights_fuzz")


@pytest.fixture(scope="module")
def env():
    env = ResidualQuadEnv(payload="heavy", wind="windy", trajectory="helix")
    yield env
    env.close()


def _load_and_fly(path: Path, env: ResidualQuadEnv) -> None:
    """The promise: loads and flies a few finite actions, or names the file."""
    try:
        net = ResidualMLP.load(path)
    except ResidualWeightsError as exc:
        assert str(path) in str(exc)
        event("rejected")
        return
    event("loaded")
    ctrl = make_controller("geo_rls", env, network=net, warmup_steps=0)
    obs, _ = env.reset(seed=0)
    ctrl.reset(0)
    for _ in range(5):
        action = ctrl.policy(obs)
        assert np.all(np.isfinite(action))
        obs, *_ = env.step(action)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.one_of(st.none(), st.integers(0, 2**16)),
    flips=st.lists(st.tuples(st.integers(0, 2**16), st.integers(1, 255)), max_size=4),
)
def test_truncated_or_bit_flipped_files(workdir, env, cut, flips, damage):
    data = damage(DEFAULT_WEIGHTS.read_bytes(), cut, flips)
    path = workdir / "mutated.npz"
    path.write_bytes(data)
    _load_and_fly(path, env)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
dtypes = st.sampled_from(["float64", "float32", "int64", "int8", "uint8", "bool", "complex128"])
special = st.sampled_from([0.0, -1.0, 1e300, -1e300, np.nan, np.inf, 14.0, 64.0, 3.0, 2e9])


@st.composite
def random_array(draw, like: np.ndarray | None = None) -> np.ndarray:
    """A random array: numbers of a random dtype and shape (``like``'s shape when given), or
    text."""
    if like is not None:
        values = np.full(like.shape, draw(special))
        if draw(st.booleans()):  # one odd value among the originals
            values = np.array(like, dtype=float)
            values.flat[draw(st.integers(0, max(values.size - 1, 0)))] = draw(special)
        with np.errstate(all="ignore"):
            return values.astype(draw(dtypes))
    if draw(st.integers(0, 5)) == 0:
        return np.array(draw(st.one_of(st.text(max_size=10), json_values.map(json.dumps))))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 3, 14, 64]), max_size=3)))
    fill = draw(special)
    values = np.full(shape, fill) if draw(st.booleans()) else np.full(shape, 0.5)
    with np.errstate(all="ignore"):
        return values.astype(draw(dtypes))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(
                ["format_version", "sizes", "x_mean", "x_std", "y_mean", "output_scale"]
                + ["output_clip", "feature_names", "metadata", "W0", "b0", "W1", "b1", "W2"]
                + ["b2", "W3"]
            ),
            # None: remove the entry; "same": keep its shape, change its values and dtype
            st.one_of(st.none(), st.just("same"), random_array()),
        ),
        max_size=3,
    ),
    metadata=st.one_of(st.none(), json_values),
    data=st.data(),
)
def test_entries_replaced_removed_or_random_metadata(workdir, env, valid, edits, metadata, data):
    arrays = dict(valid)
    for key, value in edits:
        if value is None:
            arrays.pop(key, None)
        elif isinstance(value, str):
            like = arrays.get(key, valid["W0"])
            text = st.text().map(np.array)
            arrays[key] = data.draw(random_array(like) if like.dtype.kind != "U" else text)
    if metadata is not None:
        arrays["metadata"] = np.array(json.dumps(metadata))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    path = workdir / "edited.npz"
    path.write_bytes(buffer.getvalue())
    _load_and_fly(path, env)
