"""The numerics fingerprint that committed results record."""

from __future__ import annotations

from residual_quad.numerics import blas_core, fingerprint, processor


def test_fingerprint_names_the_blas_kernels_and_library_versions():
    f = fingerprint()
    assert set(f) == {"cpu", "blas_core", "numpy_simd", "numpy", "scipy", "mujoco", "torch"}
    assert f["cpu"] == processor() and isinstance(f["cpu"], str) and f["cpu"]
    assert isinstance(f["numpy_simd"], list)
    assert f["blas_core"] == blas_core() and isinstance(f["blas_core"], str) and f["blas_core"]
    assert f["numpy"] and f["mujoco"]
    assert fingerprint() == f  # stable within a process


def test_fingerprint_sees_numpy_simd_dispatch_switched_off():
    """An AVX2-only processor dispatches numpy differently from an AVX-512 one; the fingerprint must
    tell them apart, or a committed row would be held to bit for bit where it cannot be."""
    import os
    import subprocess
    import sys

    from numpy._core._multiarray_umath import __cpu_dispatch__

    # every dispatch target off (the variable replaces any the caller set): none may be reported
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(__cpu_dispatch__)}
    code = "from residual_quad.numerics import numpy_simd; print(numpy_simd())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert set(fingerprint()["numpy_simd"]) <= set(__cpu_dispatch__)
