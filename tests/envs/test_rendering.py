"""Off-screen rendering without setup: ``render_mode="rgb_array"`` works headless with
``MUJOCO_GL`` unset (an EGL or OSMesa context made explicitly), keeps working with
``MUJOCO_GL=egl``, and a context that cannot be made is one clear error saying what to set."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from residual_quad.envs import rendering
from residual_quad.envs.residual_quad_env import ResidualQuadEnv

SCRIPT = """
import gymnasium as gym, numpy as np, residual_quad
from residual_quad.envs.vector_env import ResidualQuadVectorEnv
env = gym.make("ResidualQuad-v0", render_mode="rgb_array", width=64, height=48)
env.reset(seed=0)
frame = env.render()
assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8 and frame.std() > 0, frame.shape
env.close()
vec = ResidualQuadVectorEnv(2, render_mode="rgb_array", width=32, height=24, nthread=1)
vec.reset(seed=0)
vec.step(np.zeros((2, 4)))
assert vec.render().shape == (24, 32, 3)
vec.close()
print("rendered")
"""


def _run(script: str, **env_vars: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter without a display nor a GL choice, plus ``env_vars``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM")
    }
    env.update(env_vars, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("mujoco_gl", [None, "egl"])
def test_rgb_array_renders_headless_with_or_without_mujoco_gl(mujoco_gl):
    extra = {} if mujoco_gl is None else {"MUJOCO_GL": mujoco_gl}
    done = _run(SCRIPT, **extra)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("rendered")


def test_an_explicit_backend_that_cannot_work_names_the_setting():
    """``MUJOCO_GL=glfw`` without a display: the user's choice is kept and the error says what
    to set instead (it was a raw ``mujoco.FatalError``)."""
    done = _run(SCRIPT, MUJOCO_GL="glfw")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("residual_quad.envs.rendering.OpenGLUnavailableError: ")
    assert "MUJOCO_GL='glfw'" in last and "set MUJOCO_GL=egl (or osmesa)" in last


def test_no_opengl_context_is_one_clear_error(monkeypatch):
    def missing(name):
        def context():
            raise ImportError(f"lib{name} not found")

        return context

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(rendering.platform, "system", lambda: "Linux")
    monkeypatch.setattr(
        rendering, "HEADLESS_BACKENDS", (("egl", missing("EGL")), ("osmesa", missing("OSMesa")))
    )
    env = ResidualQuadEnv(render_mode="rgb_array", width=32, height=24)
    env.reset(seed=0)
    with pytest.raises(rendering.OpenGLUnavailableError) as err:
        env.render()
    message = str(err.value)
    assert "\n" not in message
    assert "egl: ImportError: libEGL not found; osmesa: ImportError: libOSMesa not found" in message
    assert "install EGL" in message and "OSMesa" in message
    assert isinstance(err.value, ImportError)  # the CLI prints it as one line


def test_a_missing_egl_library_leaves_osmesa_free_to_be_tried(monkeypatch):
    """EGL's library is probed before PyOpenGL is told its platform: where ``libEGL`` does not
    load, the EGL backend fails without setting ``PYOPENGL_PLATFORM`` (which would make OSMesa,
    tried next, refuse to start)."""

    def no_egl(name, *args, **kwargs):
        if "EGL" in str(name):
            raise OSError(f"{name}: cannot open shared object file")
        return None

    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.setattr(rendering.ctypes, "CDLL", no_egl)
    with pytest.raises(ImportError, match="libEGL cannot be loaded"):
        rendering._egl_context()
    assert "PYOPENGL_PLATFORM" not in os.environ
