"""The module map of ``residual_quad.envs`` (its package docstring) lists every module once."""

from __future__ import annotations

import re
from pathlib import Path

import residual_quad.envs as envs

ENVS_DIR = Path(__file__).resolve().parents[2] / "envs"


def test_the_package_docstring_maps_every_module_of_envs_once():
    """One line ``- ``name``: what it is`` per module file, none missing, none left over."""
    modules = sorted(p.stem for p in ENVS_DIR.glob("*.py") if p.stem != "__init__")
    listed = re.findall(r"^- ``(\w+)``: \S", envs.__doc__, flags=re.MULTILINE)
    assert sorted(listed) == modules
    assert len(listed) == len(set(listed))
