"""Plugins: an installed distribution registers controllers through the entry-point group
``residual_quad.controllers``. The test "installs" a tiny package the way ``importlib.metadata``
discovers one: a module plus a ``*.dist-info`` folder with ``entry_points.txt`` on ``sys.path``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from residual_quad.controllers import available_controllers, make_controller
from residual_quad.controllers.batch import batch_from_spec
from residual_quad.controllers.driver import LawBatch, LawController
from residual_quad.controllers.specs import controller_listing, parse_spec
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

PLUGIN_MODULE = '''
from residual_quad.controllers.trackers import GeoTracker


class SoftGeo(GeoTracker):
    """geo with lower gains: a plugin controller."""

    def __init__(self, context=None, *, kp=10.0, kd=5.0):
        super().__init__(context, kp=kp, kd=kd)
'''


def install_plugin(root, entries: dict[str, str], dist: str = "rq-test-plugin") -> None:
    """Write module ``rq_test_plugin`` and the distribution's metadata into ``root``."""
    (root / "rq_test_plugin.py").write_text(PLUGIN_MODULE)
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[residual_quad.controllers]\n{lines}\n")


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    install_plugin(
        tmp_path,
        {"softgeo": "rq_test_plugin:SoftGeo", "broken": "rq_test_plugin:DoesNotExist"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rq_test_plugin", None)
    yield tmp_path
    sys.modules.pop("rq_test_plugin", None)


def test_a_plugin_appears_and_builds(plugin_dir):
    names = available_controllers()
    assert names[:3] == ["pid", "geo", "geo_res"]  # built-ins first, in registry order
    assert {"softgeo", "broken"} <= set(names)
    ctrl = make_controller("softgeo")
    assert (ctrl.kp, ctrl.kd) == (10.0, 5.0)
    assert make_controller("softgeo:kp=12").kp == 12.0  # the spec grammar applies to plugins
    listing = controller_listing()
    assert "softgeo" in listing and "rq-test-plugin" in listing


def test_a_plugin_law_flies_as_the_drivers_batch(plugin_dir):
    """A plugin whose factory makes a law is flown by the driver, one vehicle and a batch, with
    the spec's options; its batch rows equal its single controller's."""
    ctrl = make_controller("softgeo:kp=12")
    assert isinstance(ctrl, LawController) and type(ctrl.law).__name__ == "SoftGeo"
    batch = batch_from_spec(parse_spec("softgeo:kp=12"), 3)
    assert isinstance(batch, LawBatch) and type(batch.law).__name__ == "SoftGeo"
    assert (batch.kp, batch.kd) == (12.0, 5.0)
    obs = np.zeros((3, OBS_DIM))
    obs[:, L.rot] = np.eye(3).ravel()
    obs[:, L.ref_pos] = [[0.1, 0.0, 1.0], [0.0, -0.2, 1.0], [0.0, 0.0, 0.5]]
    expected = np.stack([make_controller("softgeo:kp=12").policy(o) for o in obs])
    np.testing.assert_allclose(batch.policy_batch(obs), expected, rtol=0, atol=1e-12)


def test_a_plugin_that_fails_to_load_names_its_distribution(plugin_dir):
    with pytest.raises(ValueError, match="'broken' of distribution 'rq-test-plugin' failed"):
        make_controller("broken")


def test_without_the_package_the_plugin_is_gone():
    assert "softgeo" not in available_controllers()


def test_a_worker_process_sees_the_plugin(tmp_path):
    """``rquad sweep`` in a child process (PYTHONPATH set): its pool workers build the plugin."""
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site, {"softgeo": "rq_test_plugin:SoftGeo"})
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            controllers: [softgeo, geo]
            payloads: [none]
            winds: [calm]
            trajectories: [hover]
            seeds: [0]
            episode_s: 0.5
            series: []
            """
        )
    )
    env = {"PYTHONPATH": str(site), "MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "residual_quad.cli"]
    listed = subprocess.run(
        [*cmd, "sweep", "--list-controllers"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0 and "softgeo" in listed.stdout, listed.stderr
    out = tmp_path / "out"
    run = [*cmd, "sweep", str(cfg), "--out", str(out), "--workers", "2", "--no-report"]
    proc = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["controller"] for r in rows) == ["geo", "softgeo"]


def test_a_plugin_installed_into_a_folder_already_on_the_path_appears(tmp_path, monkeypatch):
    """The discovery is reused while the search path is unchanged: installing into a folder that
    is already on ``sys.path`` (as ``pip install`` does into site-packages) is still seen, and
    removing the distribution again is too."""
    import shutil

    monkeypatch.syspath_prepend(str(tmp_path))
    assert "softgeo" not in available_controllers()  # discovery of this path, cached
    install_plugin(tmp_path, {"softgeo": "rq_test_plugin:SoftGeo"})
    assert "softgeo" in available_controllers()
    shutil.rmtree(tmp_path / "rq_test_plugin-0.1.dist-info")
    assert "softgeo" not in available_controllers()


def test_discovery_is_reused_while_the_path_is_unchanged(monkeypatch):
    from importlib import metadata

    available_controllers()
    calls = []
    real = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    for _ in range(3):
        available_controllers()
    assert calls == []
