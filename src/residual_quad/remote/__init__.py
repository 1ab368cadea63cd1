"""The remote plant: ``ResidualQuad-v0`` served over TCP, its Gymnasium client, flight logs.

``protocol`` (the versioned wire format), ``server`` (``rquad serve``), ``client``
(``ResidualQuadRemote-v0``), ``telemetry`` (ROS2 messages for the MCAP log and the Foxglove live
view). The optional dependencies come with the ``server`` extra:
``pip install -c constraints.txt -e ".[server]"``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = 'pip install -c constraints.txt -e ".[server]"'


def require(module: str) -> ModuleType:
    """Import an optional dependency of the remote plant, or raise an ``ImportError`` that says
    how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"the remote plant needs {module!r}, which is not installed: {INSTALL_HINT}"
        ) from exc
