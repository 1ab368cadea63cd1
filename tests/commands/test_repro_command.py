"""``rquad repro``: the committed rows judged from the command line."""

from __future__ import annotations

import json

from cli_helpers import run_main

from residual_quad.evaluation.studies import reproduce as r


def _one_row_per_kind(monkeypatch):
    picks = {"sweep": ("geo|extra|breezy|helix|2",), "stress": ("geo|yaw90_helix|0",)}
    monkeypatch.setattr(r, "sample", lambda kind: picks[kind])


def test_check_reports_every_sampled_row_and_exits_0(monkeypatch, capsys):
    _one_row_per_kind(monkeypatch)
    out = run_main(["repro", "check"], capsys)
    assert out.rc == 0, out.err
    assert "geo|extra|breezy|helix|2" in out.out and "geo|yaw90_helix|0" in out.out
    assert "2 of 2 sampled rows reproduce" in out.out


def test_check_exits_1_and_names_the_row_that_does_not_reproduce(monkeypatch, capsys):
    _one_row_per_kind(monkeypatch)
    real = r.refly
    monkeypatch.setattr(r, "refly", lambda kind, run_id, **kw: real(kind, run_id, kp=21.0))
    out = run_main(["repro", "check"], capsys)
    assert out.rc == 1
    assert "DIFFERS" in out.out and "0 of 2 sampled rows reproduce" in out.out


def test_sensitivity_writes_spreads_for_the_sample(monkeypatch, capsys, tmp_path):
    _one_row_per_kind(monkeypatch)
    out = run_main(["repro", "sensitivity", "--flights", "1", "--out", str(tmp_path)], capsys)
    assert out.rc == 0, out.err
    doc = json.loads((tmp_path / "sensitivity.json").read_text())
    assert set(doc["rows"]) == {"sweep|geo|extra|breezy|helix|2", "stress|geo|yaw90_helix|0"}
    assert doc["rows"]["sweep|geo|extra|breezy|helix|2"]["flights"] == 1


def test_bad_arguments_are_one_line_errors(capsys):
    for argv in (
        ["repro", "kernels", "--kernels", "Foo"],
        ["repro", "sensitivity", "--flights", "0"],
        ["repro"],
    ):
        out = run_main(argv, capsys)
        assert out.rc == 2, argv
        assert len(out.err.strip().splitlines()) == 1, out.err
