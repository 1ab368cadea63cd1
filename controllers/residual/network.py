"""The residual network for inference: :class:`ResidualMLP`, its file format, :class:`FastMLP`.

* :class:`ResidualMLP` — 14 → 64 → 64 → 3, tanh, linear output ×2.0 m/s², clipped to ±10 m/s²
  [RES §4.2], with batch prediction and a versioned ``.npz`` format whose every inconsistency is
  reported by name (:class:`ResidualWeightsError`). Its training (back-propagation, Adam) lives in
  ``residual_quad.training.residual_net``.
* :class:`FastMLP` — a private, standardization-folded copy for single-sample inference at the
  control rate, whose last layer the RLS rewrites [RES §5].
* :func:`load_network` — the network a config's ``weights`` names.

Pure numpy (no torch) so that a controller runs anywhere numpy does.
"""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.residual.features import FEATURE_NAMES, N_FEATURES, N_OUTPUTS

FORMAT_VERSION = 1
#: largest layer width a weights file may declare (the default network is 64 wide)
MAX_LAYER_WIDTH = 4096
#: largest uncompressed size of a weights file's arrays, bytes (the default is ~40 kB)
MAX_FILE_BYTES = 256 * 2**20
DEFAULT_SIZES: tuple[int, ...] = (N_FEATURES, 64, 64, N_OUTPUTS)
#: the packaged default weights (``controllers/weights/``)
DEFAULT_WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "residual_default.npz"


class ResidualWeightsError(ValueError):
    """A residual weight file is missing, unreadable or inconsistent (message names the file)."""


# ----------------------------------------------------------------------------- network
@dataclass
class Activations:
    """One batch forward pass: what :meth:`ResidualMLP.predict` clips and training reuses."""

    x_n: np.ndarray  # standardized inputs (N, 14)
    hidden: list[np.ndarray]  # tanh activations of each hidden layer
    z: np.ndarray  # raw linear outputs (N, 3)
    y: np.ndarray  # m/s², y_mean + output_scale·z before the output clip (N, 3)


class ResidualMLP:
    """14 → 64 → 64 → 3 tanh MLP predicting the body-frame residual acceleration (m/s²).

    ``Δâ = clip(y_mean + s·(h₂W₃ + b₃), ±clip)`` with ``s = output_scale`` (2.0 m/s²) and the
    inputs standardized by ``(x − x_mean)/x_std``. The targets are standardized the same way as the
    output: centred on ``y_mean`` and divided by the fixed scale ``s``, so that the last layer (the
    RLS's parameters) is in the same units for every training run. Glorot-uniform initialization
    with a zero output layer and zero ``y_mean``: an untrained network predicts exactly zero and
    the residual trackers reduce to plain geometric control.

    All parameters live in one flat vector :attr:`flat` (``W`` and ``b`` are views into it), so the
    optimizer updates them with a few vector operations.

    Args:
        sizes: layer widths, input first.
        output_scale: m/s², multiplies the linear output.
        output_clip: m/s², symmetric clip of the prediction. It must exceed the targets (the heavy
            payload alone is 5.2 m/s² vertically).
        seed: seeds the Glorot draw.
        dtype: float64 (default) or float32 (faster training).
    """

    def __init__(
        self,
        sizes: tuple[int, ...] = DEFAULT_SIZES,
        *,
        output_scale: float = 2.0,
        output_clip: float = 10.0,
        seed: int = 0,
        dtype: type = np.float64,
    ):
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"invalid layer sizes {sizes}")
        if not (output_scale > 0 and output_clip > 0):
            raise ValueError("output_scale and output_clip must be positive")
        self.sizes = sizes
        self.output_scale = float(output_scale)
        self.output_clip = float(output_clip)
        self._allocate(np.dtype(dtype))
        rng = np.random.default_rng(seed)
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            if i < len(sizes) - 2:  # the output layer stays zero: untrained ⇒ Δâ = 0
                lim = math.sqrt(6.0 / (n_in + n_out))
                self.W[i][...] = rng.uniform(-lim, lim, size=(n_in, n_out))
        self.x_mean = np.zeros(sizes[0])
        self.x_std = np.ones(sizes[0])
        self.y_mean = np.zeros(sizes[-1])
        self.metadata: dict[str, Any] = {}

    def _allocate(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.flat = np.zeros(self.n_params, dtype=dtype)
        self.W, self.b = self.param_views(self.flat)

    def param_views(self, flat: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Weight and bias views into a flat parameter-sized vector (the parameters themselves for
        :attr:`flat`, a gradient's blocks for a gradient buffer)."""
        W, b, k = [], [], 0
        for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            W.append(flat[k : k + n_in * n_out].reshape(n_in, n_out))
            k += n_in * n_out
            b.append(flat[k : k + n_out])
            k += n_out
        return W, b

    # -- parameters ----------------------------------------------------------------------------
    @property
    def params(self) -> list[np.ndarray]:
        """Parameter views in a fixed order ``W0, b0, W1, b1, ...``."""
        return [p for pair in zip(self.W, self.b, strict=True) for p in pair]

    @property
    def n_params(self) -> int:
        s = self.sizes
        return int(sum(a * b + b for a, b in zip(s[:-1], s[1:], strict=True)))

    def copy(self, dtype: type | None = None) -> ResidualMLP:
        """Deep copy (weights, standardization, metadata), optionally in another dtype."""
        net = ResidualMLP.__new__(ResidualMLP)
        net.sizes = self.sizes
        net.output_scale, net.output_clip = self.output_scale, self.output_clip
        net._allocate(np.dtype(dtype or self.dtype))
        net.flat[...] = self.flat
        net.x_mean, net.x_std, net.y_mean = (
            self.x_mean.copy(),
            self.x_std.copy(),
            self.y_mean.copy(),
        )
        net.metadata = json.loads(json.dumps(self.metadata))
        return net

    def set_standardization(
        self, x_mean: np.ndarray, x_std: np.ndarray, y_mean: np.ndarray
    ) -> None:
        """Input mean/std and target mean (the target scale is the fixed ``output_scale``)."""
        x_std = np.asarray(x_std, dtype=float)
        if np.any(~np.isfinite(x_std)) or np.any(x_std <= 0):
            raise ValueError("x_std must be finite and positive")
        self.x_mean = np.array(x_mean, dtype=float).reshape(self.sizes[0])
        self.x_std = x_std.reshape(self.sizes[0]).copy()
        self.y_mean = np.array(y_mean, dtype=float).reshape(self.sizes[-1])

    def last_layer(self) -> np.ndarray:
        """``θ = [W_last; b_last]``, shape (hidden + 1, outputs): the RLS parameters (a copy)."""
        return np.vstack([self.W[-1], self.b[-1][None, :]]).astype(float)

    def set_last_layer(self, theta: np.ndarray) -> None:
        n_in = self.sizes[-2]
        theta = np.asarray(theta)
        if theta.shape != (n_in + 1, self.sizes[-1]):
            raise ValueError(f"theta must have shape {(n_in + 1, self.sizes[-1])}")
        self.W[-1][...] = theta[:n_in]
        self.b[-1][...] = theta[n_in]

    # -- batch inference -----------------------------------------------------------------------
    def standardize(self, X: np.ndarray) -> np.ndarray:
        """Raw features → network inputs (in the network's dtype)."""
        return ((X - self.x_mean) / self.x_std).astype(self.dtype)

    def activations(self, X: np.ndarray) -> Activations:
        """One forward pass for raw features ``X`` (N, 14), every intermediate kept."""
        x_n = self.standardize(X)
        hidden = []
        h = x_n
        for W, b in zip(self.W[:-1], self.b[:-1], strict=True):
            h = np.tanh(h @ W + b)
            hidden.append(h)
        z = h @ self.W[-1] + self.b[-1]
        return Activations(x_n, hidden, z, self.y_mean + self.output_scale * z)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions (m/s²) for a batch (N, 14) or one feature vector (14,)."""
        X = np.asarray(X, dtype=float)
        c = self.output_clip
        Y = np.clip(self.activations(X if X.ndim == 2 else X[None, :]).y, -c, c)
        return Y if X.ndim == 2 else Y[0]

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path, **metadata: Any) -> Path:
        """Write a versioned ``.npz`` (float64); ``metadata`` must be JSON-serializable."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {**self.metadata, **metadata}
        arrays: dict[str, np.ndarray] = {
            "format_version": np.array(FORMAT_VERSION),
            "sizes": np.array(self.sizes, dtype=np.int64),
            "x_mean": self.x_mean,
            "x_std": self.x_std,
            "y_mean": self.y_mean,
            "output_scale": np.array(self.output_scale),
            "output_clip": np.array(self.output_clip),
            "feature_names": np.array(",".join(FEATURE_NAMES)),
            "metadata": np.array(json.dumps(meta, sort_keys=True)),
        }
        for i, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
            arrays[f"W{i}"] = W.astype(np.float64)
            arrays[f"b{i}"] = b.astype(np.float64)
        # write through a file object so numpy does not append ".npz" to other suffixes
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> ResidualMLP:
        """Read a file written by :meth:`save`; any inconsistency raises
        :class:`ResidualWeightsError` naming the file and the problem.

        Everything is checked before anything is allocated from it: the archive's declared
        sizes (at most :data:`MAX_FILE_BYTES` uncompressed), every entry a real numeric array,
        the layer sizes (each at most :data:`MAX_LAYER_WIDTH`) against the stored arrays'
        shapes, finite values and a JSON-object metadata record.
        """
        path = Path(path)
        if path.is_dir():
            raise ResidualWeightsError(
                f"residual weights file {str(path)!r} is a directory, not a weights file"
            )
        if not path.is_file():
            raise ResidualWeightsError(f"residual weights file {str(path)!r} does not exist")

        def fail(what: str) -> ResidualWeightsError:
            return ResidualWeightsError(f"residual weights file {str(path)!r}: {what}")

        arrays = _read_npz(path, fail)
        required = ("format_version", "sizes", "x_mean", "x_std", "y_mean", "output_scale")
        missing = [k for k in required if k not in arrays]
        if missing:
            raise fail(f"missing entries {missing} (not a residual-network file?)")
        text = {"feature_names", "metadata"}
        _check_real(arrays, (*required, "output_clip"), fail)
        odd = [k for k in sorted(text & set(arrays)) if arrays[k].dtype.kind != "U"]
        if odd or any(arrays[k].shape != () for k in text & set(arrays)):
            raise fail("feature_names and metadata must be single strings")
        scalars = ("format_version", "output_scale", "output_clip")
        odd = [k for k in scalars if k in arrays and arrays[k].size != 1]
        if odd:
            raise fail(f"entries {odd} must be single numbers")
        if arrays["sizes"].ndim != 1:
            raise fail(f"sizes must be a list of layer widths, got shape {arrays['sizes'].shape}")
        version = float(arrays["format_version"].reshape(()))
        if version != FORMAT_VERSION:
            raise fail(f"format version {version:g}, this code reads version {FORMAT_VERSION}")
        raw_sizes = arrays["sizes"].astype(float)
        if not (np.all(np.isfinite(raw_sizes)) and np.all(raw_sizes == np.round(raw_sizes))):
            raise fail(f"layer sizes {arrays['sizes'].tolist()} must be integers")
        if np.any(raw_sizes < 1) or np.any(raw_sizes > MAX_LAYER_WIDTH) or raw_sizes.size > 64:
            raise fail(
                f"layer sizes {arrays['sizes'].tolist()} must be between 1 and "
                f"{MAX_LAYER_WIDTH} (at most 64 layers)"
            )
        sizes = tuple(int(v) for v in raw_sizes)
        if len(sizes) < 3 or sizes[0] != N_FEATURES or sizes[-1] != N_OUTPUTS:
            raise fail(
                f"layer sizes {sizes} do not map {N_FEATURES} features through at least one "
                f"hidden layer to {N_OUTPUTS} outputs"
            )
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            for key, shape in ((f"W{i}", (n_in, n_out)), (f"b{i}", (n_out,))):
                if key not in arrays:
                    raise fail(f"missing layer array {key!r}")
                if arrays[key].shape != shape:
                    raise fail(f"{key} has shape {arrays[key].shape}, expected {shape}")
        for key, n in (("x_mean", sizes[0]), ("x_std", sizes[0]), ("y_mean", sizes[-1])):
            if arrays[key].shape != (n,):
                raise fail(f"{key} has shape {arrays[key].shape}, expected {(n,)}")
        layers = [f"{wb}{i}" for i in range(len(sizes) - 1) for wb in "Wb"]
        _check_real(arrays, layers, fail)
        numeric = [k for k in (*required, "output_clip", *layers) if k in arrays]
        numbers = {k: arrays[k].astype(np.float64) for k in numeric}
        if not all(np.all(np.isfinite(v)) for v in numbers.values()):
            bad = sorted(k for k, v in numbers.items() if not np.all(np.isfinite(v)))
            raise fail(f"contains non-finite values (in {', '.join(bad)})")
        scale = float(numbers["output_scale"].reshape(()))
        clip = float(numbers["output_clip"].reshape(())) if "output_clip" in numbers else 10.0
        if not (scale > 0 and clip > 0):
            raise fail(f"output_scale {scale} and output_clip {clip} must be positive")
        if np.any(numbers["x_std"] <= 0):
            raise fail("x_std must be positive")
        names = str(arrays["feature_names"]) if "feature_names" in arrays else None
        if names is not None and names != ",".join(FEATURE_NAMES):
            raise fail(f"feature names {names!r} differ from this code's {FEATURE_NAMES}")
        try:
            metadata = json.loads(str(arrays["metadata"])) if "metadata" in arrays else {}
        except (json.JSONDecodeError, RecursionError):
            raise fail("metadata is not valid JSON") from None
        if not isinstance(metadata, dict):
            raise fail(f"metadata must be a JSON object, got {type(metadata).__name__}")
        net = cls(sizes, output_scale=scale, output_clip=clip)
        for i in range(len(sizes) - 1):
            net.W[i][...] = numbers[f"W{i}"]
            net.b[i][...] = numbers[f"b{i}"]
        net.set_standardization(numbers["x_mean"], numbers["x_std"], numbers["y_mean"])
        net.metadata = metadata
        return net


def _check_real(arrays: dict[str, np.ndarray], keys: Any, fail: Any) -> None:
    """``fail`` unless every present entry of ``keys`` holds real numbers (float or integer)."""
    odd = [k for k in keys if k in arrays and arrays[k].dtype.kind not in "fiu"]
    if odd:
        kinds = ", ".join(f"{k}: {arrays[k].dtype}" for k in odd)
        raise fail(f"entries must hold real numbers, got {kinds}")


def _read_npz(path: Path, fail: Any) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path`` (no pickles, bounded size); ``fail(what)`` builds
    the error for anything else: not a zip/``.npz`` (e.g. a ``.npy``), a member that is not an
    array, a corrupt or truncated archive (zlib, CRC, header errors of any type)."""
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except Exception as exc:  # noqa: BLE001 - zipfile raises many types for a broken archive
        raise fail(f"not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    if declared > MAX_FILE_BYTES:
        raise fail(f"archive declares {declared} bytes, more than a residual network needs")
    try:
        with np.load(path, allow_pickle=False) as data:  # a zip, hence an NpzFile
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:  # noqa: BLE001 - numpy/zipfile/zlib errors of many types
        raise fail(f"not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    odd = sorted(k for k, v in arrays.items() if not isinstance(v, np.ndarray))
    if odd:
        raise fail(f"entries {odd} are not arrays")
    return arrays


class FastMLP:
    """Single-sample inference for the control loop, from a private copy of a :class:`ResidualMLP`.

    The input standardization and every bias are folded into augmented weight matrices (inputs
    carry a trailing 1), and the intermediates live in preallocated buffers, so a prediction is
    one small BLAS call and one ``tanh`` per layer, with no allocation besides the returned
    3-vector. The last layer is held as ``theta`` (hidden + 1, 3) next to the regressor
    ``phi = [h_last, 1]``, the form the RLS works on.
    """

    def __init__(self, net: ResidualMLP):
        if len(net.sizes) < 3 or net.sizes[-1] != N_OUTPUTS:
            raise ValueError(f"FastMLP needs a hidden layer and {N_OUTPUTS} outputs")
        W0 = np.asarray(net.W[0], dtype=float) / net.x_std[:, None]
        b0 = np.asarray(net.b[0], dtype=float) - net.x_mean @ W0
        self.Ws = [np.vstack([W0, b0])] + [
            np.vstack([np.asarray(w, dtype=float), np.asarray(b, dtype=float)])
            for w, b in zip(net.W[1:-1], net.b[1:-1], strict=True)
        ]
        self.theta0 = net.last_layer()  # offline last layer, never modified
        self.theta = self.theta0.copy()
        self.scale = net.output_scale
        self.clip = net.output_clip
        self.y_mean = net.y_mean.copy()
        self._ym = self.y_mean.tolist()
        # augmented buffers [activation, 1]; the last one is the regressor phi
        self._bufs = [np.ones(n + 1) for n in net.sizes[:-1]]
        self._act = [buf[:-1] for buf in self._bufs]
        self.phi = self._bufs[-1]
        self._z = np.empty(net.sizes[-1])
        self._two_hidden = len(self.Ws) == 2
        self._W0, self._W1 = self.Ws[0], self.Ws[-1]

    def hidden(self, x: np.ndarray) -> np.ndarray:
        """Fill and return :attr:`phi` (the last layer's input, ``[h_last, 1]``) for features
        ``x`` (14,)."""
        bufs, act = self._bufs, self._act
        act[0][...] = x
        if self._two_hidden:  # the default architecture, unrolled (saves ~0.5 µs)
            a1, a2 = act[1], act[2]
            np.dot(bufs[0], self._W0, out=a1)
            np.tanh(a1, out=a1)
            np.dot(bufs[1], self._W1, out=a2)
            np.tanh(a2, out=a2)
            return self.phi
        for i, W in enumerate(self.Ws):
            out = act[i + 1]
            np.dot(bufs[i], W, out=out)
            np.tanh(out, out=out)
        return self.phi

    def output(self, phi: np.ndarray, theta: np.ndarray | None = None) -> np.ndarray:
        """Prediction (m/s², body frame) for a regressor and last layer (default :attr:`theta`)."""
        z0, z1, z2 = np.dot(phi, self.theta if theta is None else theta, out=self._z).tolist()
        s, c, (m0, m1, m2) = self.scale, self.clip, self._ym
        return np.array(
            (
                min(max(m0 + s * z0, -c), c),
                min(max(m1 + s * z1, -c), c),
                min(max(m2 + s * z2, -c), c),
            )
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Prediction (m/s², body frame) for raw features ``x`` (14,)."""
        return self.output(self.hidden(x))

    # -- batches of N envs -----------------------------------------------------------------------
    def hidden_batch(self, X: np.ndarray) -> np.ndarray:
        """Regressors ``[h_last, 1]`` (N, hidden + 1) for raw features ``X`` (N, 14): the same
        augmented weights as :meth:`hidden`, one stacked product per layer for the whole batch.

        The product is a stack of N row × matrix products (``matmul`` over ``(N, 1, k)``: one
        BLAS ``gemv`` per row, as :meth:`hidden` does), not one ``(N, k) @ (k, h)`` ``gemm``,
        whose kernel and blocking change with N: so each row's regressor is bit for bit the
        single-sample one, whatever the batch size it is computed in."""
        ones = np.ones((X.shape[0], 1, 1))
        h = X[:, None, :]
        for W in self.Ws:
            h = np.tanh(np.matmul(np.concatenate((h, ones), axis=2), W))
        return np.concatenate((h, ones), axis=2)[:, 0, :]

    def output_batch(self, phi: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Predictions (N, 3) (m/s², body frame) for regressors ``phi`` (N, hidden + 1) and one
        last layer per env ``theta`` (N, hidden + 1, 3), clipped like :meth:`output`."""
        z = np.einsum("ni,nij->nj", phi, theta)
        return np.clip(self.y_mean + self.scale * z, -self.clip, self.clip)


def load_network(spec: str | Path | None, *, seed: int = 0) -> ResidualMLP:
    """The network named by a config's ``weights``.

    ``"default"`` → the packaged weights; ``None``/``"none"``/``"untrained"`` → a fresh network
    with a zero output layer (plain geometric control); anything else → a weights file path.
    """
    if spec is None or str(spec).lower() in ("none", "untrained"):
        return ResidualMLP(seed=seed)
    if str(spec) == "default":
        if not DEFAULT_WEIGHTS.is_file():
            raise ResidualWeightsError(
                f"the packaged default residual weights {str(DEFAULT_WEIGHTS)!r} are missing; "
                "train them with `rquad collect` and `rquad train residual --out ...`"
            )
        return ResidualMLP.load(DEFAULT_WEIGHTS)
    return ResidualMLP.load(spec)
