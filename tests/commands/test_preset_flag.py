"""``--preset`` of ``rquad eval`` and ``rquad sweep``: the named plant reaches the flight."""

from __future__ import annotations

import json

from cli_helpers import run_main

from residual_quad.episode import run_episode
from residual_quad.evaluation.sweep.rows import read_rows


def test_eval_preset_flies_the_preset_plant(capsys):
    argv = ["eval", "--controller", "pid", "--trajectory", "helix", "--episode-s", "4", "--json"]
    res = run_main([*argv, "--preset", "realistic"], capsys)
    assert res.rc == 0, res.err
    got = json.loads(res.out)
    want = run_episode("pid", trajectory="helix", episode_s=4.0, preset="realistic")
    plain = run_episode("pid", trajectory="helix", episode_s=4.0)
    assert got["control_cost"] == want.control_cost != plain.control_cost
    assert got["diverged"] == want.diverged


def test_bad_preset_is_the_one_line_error_listing_the_choices(capsys):
    res = run_main(["eval", "--preset", "real"], capsys)
    assert res.rc == 2 and "ideal" in res.err and "realistic" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_sweep_preset_sets_the_env_of_every_run(capsys, tmp_path):
    doc = tmp_path / "tiny.yaml"
    doc.write_text(
        "controllers: [pid]\npayloads: [none]\nwinds: [calm]\ntrajectories: [hover]\n"
        "seeds: [0]\nepisode_s: 4.0\nenv: {ground_effect: true}\nseries: []\nworkers: 1\n"
    )
    out = tmp_path / "out"
    res = run_main(
        ["sweep", str(doc), "--out", str(out), "--no-report", "--preset", "realistic"], capsys
    )
    assert res.rc == 0, res.err
    saved = (out / "sweep_config.yaml").read_text()
    assert "preset: realistic" in saved and "ground_effect: true" in saved
    (row,) = read_rows(out)
    want = run_episode("pid", episode_s=4.0, preset="realistic")
    assert (row["control_cost"], row["steps"]) == (want.control_cost, want.steps)


def test_gif_refuses_a_preset_it_would_not_show(capsys, tmp_path):
    res = run_main(["eval", "--preset", "realistic", "--gif", str(tmp_path / "f.gif")], capsys)
    assert res.rc == 2 and "--preset realistic" in res.err
    assert not (tmp_path / "f.gif").exists()
