"""Controllers: one ``Controller`` interface and a registry (``make_controller(name, env)``)."""

from residual_quad.controllers.base import (
    ControlContext,
    Controller,
    available_controllers,
    register_controller,
)
from residual_quad.controllers.specs import make_controller

__all__ = [
    "ControlContext",
    "Controller",
    "available_controllers",
    "make_controller",
    "register_controller",
]
