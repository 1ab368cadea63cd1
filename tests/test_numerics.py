"""The numerics fingerprint that committed results record."""

from __future__ import annotations

from residual_quad.numerics import blas_core, fingerprint


def test_fingerprint_names_the_blas_kernels_and_library_versions():
    f = fingerprint()
    assert set(f) == {"blas_core", "numpy_simd", "numpy", "scipy", "mujoco", "torch"}
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

    here = fingerprint()["numpy_simd"]
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(here)}
    code = "from residual_quad.numerics import numpy_simd; print(numpy_simd())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]" or not here
