"""An off-screen ``mujoco.Renderer`` that works headless without ``MUJOCO_GL``.

MuJoCo's Python bindings pick their OpenGL backend once, when ``mujoco`` is imported, from the
``MUJOCO_GL`` environment variable; unset, that is GLFW, which needs a display. Without one
(``DISPLAY`` and ``WAYLAND_DISPLAY`` unset: a server, a container, CI) the first frame ended in a
raw ``mujoco.FatalError`` ("an OpenGL platform library has not been loaded"). :func:`make_renderer`
therefore chooses the context itself when the user has not:

* ``MUJOCO_GL`` set (any value): MuJoCo's own choice, untouched; a failure is an
  :class:`OpenGLUnavailableError` saying which setting failed and what else to set.
* unset, on Linux with no display: an EGL context (GPU or Mesa's software EGL), else an OSMesa
  one, created explicitly for this renderer — the process environment's backend for everything
  else is left alone.
* unset with a display: MuJoCo's default (GLFW); if that fails, EGL and OSMesa as above.

When no context can be made, the error names every backend tried, why it failed and what to
install or set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
import platform
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import mujoco

_LOCK = threading.Lock()  # the renderer module's context class is swapped during construction


class OpenGLUnavailableError(ImportError):
    """No OpenGL context could be created for off-screen rendering (a missing system library or
    an unusable ``MUJOCO_GL`` setting); the message says what to install or set."""


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _load_library(name: str) -> None:
    """Load the system library ``name`` (``EGL``, ``OSMesa``) or raise ``ImportError``: probed
    before PyOpenGL is told its platform, which it reads once per process, so a missing EGL
    leaves OSMesa free to be tried next."""
    path = ctypes.util.find_library(name) or f"lib{name}.so"
    try:
        ctypes.CDLL(path)
    except OSError as err:
        raise ImportError(f"lib{name} cannot be loaded ({err})") from None


def _backend_context(library: str, module: str) -> type:
    """The ``GLContext`` class of MuJoCo's ``module`` after its ``library`` loads; a failed import
    restores ``PYOPENGL_PLATFORM`` (MuJoCo's backend modules set it)."""
    _load_library(library)
    saved = os.environ.get("PYOPENGL_PLATFORM")
    try:
        return importlib.import_module(module).GLContext
    except Exception:
        if saved is None:
            os.environ.pop("PYOPENGL_PLATFORM", None)
        else:
            os.environ["PYOPENGL_PLATFORM"] = saved
        raise


def _egl_context() -> type:
    return _backend_context("EGL", "mujoco.egl")


def _osmesa_context() -> type:
    return _backend_context("OSMesa", "mujoco.osmesa")


HEADLESS_BACKENDS: tuple[tuple[str, Callable[[], type]], ...] = (
    ("egl", _egl_context),
    ("osmesa", _osmesa_context),
)
"""The off-screen backends tried, in order, when ``MUJOCO_GL`` is unset and there is no display
(or the display's GLFW context fails)."""


def _with_context(context: type, model: mujoco.MjModel, height: int, width: int) -> Any:
    """A ``mujoco.Renderer`` whose GL context is a ``context`` instance: the renderer module's
    view of ``gl_context`` is replaced while the renderer is built (MuJoCo reads
    ``gl_context.GLContext`` there at construction), then restored."""
    module = sys.modules[mujoco.Renderer.__module__]
    with _LOCK:
        saved = module.gl_context
        module.gl_context = types.SimpleNamespace(GLContext=context)
        try:
            return mujoco.Renderer(model, height, width)
        finally:
            module.gl_context = saved


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"


def make_renderer(model: mujoco.MjModel, height: int, width: int) -> Any:
    """A ``mujoco.Renderer`` of ``height`` × ``width`` pixels for ``model``, headless without
    ``MUJOCO_GL`` (see the module docstring); :class:`OpenGLUnavailableError` if no OpenGL
    context can be made."""
    chosen = os.environ.get("MUJOCO_GL", "").strip()
    linux = platform.system() == "Linux"
    failures: list[str] = []
    if chosen or not linux or _has_display():
        try:
            return mujoco.Renderer(model, height, width)
        except (mujoco.FatalError, ImportError, RuntimeError, OSError, AttributeError) as err:
            if chosen or not linux:
                raise OpenGLUnavailableError(
                    f"render_mode='rgb_array': no OpenGL context with MUJOCO_GL={chosen!r} "
                    f"({_one_line(err)}); without a display set MUJOCO_GL=egl (or osmesa) "
                    "before importing mujoco, or unset MUJOCO_GL to let residual_quad choose"
                ) from err
            failures.append(f"glfw on DISPLAY={os.environ.get('DISPLAY')!r}: {_one_line(err)}")
    for name, context in HEADLESS_BACKENDS:
        try:
            return _with_context(context(), model, height, width)
        except Exception as err:  # noqa: BLE001 - any failure of a backend: try the next
            failures.append(f"{name}: {_one_line(err)}")
    raise OpenGLUnavailableError(
        "render_mode='rgb_array' needs an OpenGL context and none could be created "
        f"({'; '.join(failures)}); install EGL (libegl1, with Mesa or a GPU driver) or OSMesa "
        "(libosmesa6), or run with a display"
    )
