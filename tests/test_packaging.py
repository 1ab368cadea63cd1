"""Packaging: every source folder that is a Python package is installed."""

from __future__ import annotations

import importlib.util
import os
import runpy
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


def _setup_kwargs() -> dict:
    captured: dict = {}
    with mock.patch("setuptools.setup", lambda **kw: captured.update(kw)):
        old = Path.cwd()
        try:
            os.chdir(ROOT)
            runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
        finally:
            os.chdir(old)
    return captured


def test_every_package_folder_is_installed():
    kw = _setup_kwargs()
    declared = set(kw["packages"])
    on_disk = {"residual_quad"}
    for top, prefix in [(ROOT / "src" / "residual_quad", "residual_quad")] + [
        (ROOT / name, f"residual_quad.{name}")
        for name in ("envs", "controllers", "training", "evaluation", "configs")
    ]:
        for init in top.rglob("__init__.py"):
            rel = init.parent.relative_to(top)
            on_disk.add(".".join([prefix, *rel.parts]))
    assert on_disk == declared


def test_installed_packages_import():
    for name in _setup_kwargs()["packages"]:
        assert importlib.util.find_spec(name) is not None, name
