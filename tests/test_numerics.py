"""The numerics fingerprint that committed results record."""

from __future__ import annotations

from residual_quad.numerics import blas_core, fingerprint


def test_fingerprint_names_the_blas_kernels_and_library_versions():
    f = fingerprint()
    assert set(f) == {"blas_core", "numpy", "scipy", "mujoco", "torch"}
    assert f["blas_core"] == blas_core() and isinstance(f["blas_core"], str) and f["blas_core"]
    assert f["numpy"] and f["mujoco"]
    assert fingerprint() == f  # stable within a process
