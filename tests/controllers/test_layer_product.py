"""The policy forward's compiled layer product: each output summed over the inputs in ascending
order, unfused — the bits of that order written with numpy's separate multiply and add, on any
CPU — on every shape a policy has (hypothesis hunts the others), a row's bits independent of its
batch, and every shipped policy's layers checked on the batch sizes the sweeps fly. (On x86-64
numpy wheels, whose baseline has no fused multiply-add, ``np.einsum`` sums in that order too:
the flown rows did not move.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers.numpy_policy import layer_product

WEIGHTS = Path(__file__).resolve().parents[2] / "controllers" / "weights"
#: the policy kinds of the shipped files, longest prefix first (``ppo_acc_seed1.zip`` → ``ppo_acc``)
KINDS = ("ppo_acc", "ppo_adapt", "ppo_res", "ppo")


def _in_order(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` summed over the inputs in ascending order from zero, one numpy multiply and one
    add per term (never fused): the order the layer product promises; a one-output layer is
    ``np.einsum``'s, as the layer product leaves it."""
    if w.shape[1] < 2:
        return np.einsum("nd,dh->nh", x, w)
    out = np.zeros((x.shape[0], w.shape[1]))
    with np.errstate(all="ignore"):  # inf · 0 and inf − inf are NaN, as in the kernel
        for d in range(x.shape[1]):
            out = out + x[:, d, None] * w[d]
    return out


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 130),
    h=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([1e-300, 1e-8, 1.0, 1e8, 1e150]),
)
def test_the_layer_product_sums_in_ascending_order(n, d, h, seed, scale):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * scale
    w = rng.standard_normal((d, h))
    out = layer_product(x, w)
    np.testing.assert_array_equal(out, _in_order(x, w))
    row = int(rng.integers(n))
    np.testing.assert_array_equal(out[row], layer_product(x[row : row + 1], w)[0])


def test_non_finite_inputs_give_the_orders_nans_and_infs():
    w = np.array([[1.0, -1.0, 0.0], [2.0, 0.5, 0.0]])
    x = np.array([[np.inf, 1.0], [np.nan, 0.0], [1e308, 1e308], [-0.0, -0.0]])
    np.testing.assert_array_equal(layer_product(x, w), _in_order(x, w))
    assert np.signbit(layer_product(x[3:], w)).tolist() == np.signbit(_in_order(x[3:], w)).tolist()


def test_strided_and_float32_inputs_are_read_as_float64_values():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, 20))[:, ::2]  # a strided view
    w = rng.standard_normal((10, 9)).astype(np.float32)
    np.testing.assert_array_equal(layer_product(x, w), _in_order(x, w.astype(np.float64)))


def test_every_shipped_policys_layers_sum_in_ascending_order():
    pytest.importorskip("stable_baselines3")
    from residual_quad.controllers.policy_file import load_policy

    files = sorted(WEIGHTS.glob("ppo*.zip"))
    assert len(files) >= 20  # every shipped RL file, seeds included
    rng = np.random.default_rng(0)
    for path in files:
        kind = next(k for k in KINDS if path.name.startswith(k))
        network = load_policy(path, kind)[3]
        assert network is not None, path
        for w, _, _ in network.layers:
            for n in (1, 108, 256):
                x = rng.standard_normal((n, w.shape[0]))
                np.testing.assert_array_equal(
                    layer_product(x, w), _in_order(x, w), err_msg=str(path)
                )


def test_a_policy_compiles_its_layer_kernels_when_built_not_in_its_first_step():
    """In a fresh process no kernel is ready before a policy is built, and both are after."""
    code = (
        "import numpy as np\n"
        "from residual_quad.controllers import numpy_policy as m\n"
        "assert not m._rows_times.signatures and not m._rows_times_narrow.signatures\n"
        "rng = np.random.default_rng(5)\n"
        "m.NumpyPolicy([(rng.standard_normal((6, 16)), np.zeros(16), np.tanh),\n"
        "               (rng.standard_normal((16, 3)), np.zeros(3), np.tanh)])\n"
        "assert m._rows_times.signatures and m._rows_times_narrow.signatures\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
