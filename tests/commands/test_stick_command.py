"""The ``rquad stick`` command."""

from __future__ import annotations

import argparse
import json

import pytest

from residual_quad.commands import stick


def test_cli_writes_json(tmp_path):
    parser = argparse.ArgumentParser()
    stick.register(parser.add_subparsers())
    out = tmp_path / "s2.json"
    args = parser.parse_args(
        ["stick", "s2", "--methods", "newton", "--json", str(out), "--plot", str(tmp_path)]
    )
    assert args.func(args) == 0
    rep = json.loads(out.read_text())
    m = rep["methods"]["newton"]
    for key in (
        "final_error",
        "optimum",
        "gap",
        "total_variation",
        "max_abs_qdot",
        "converge_time",
        "higher_level_violated",
    ):
        assert key in m
    assert m["gap"][0] < 1e-3
    assert (tmp_path / "s2_errors.png").stat().st_size > 0
    bad = parser.parse_args(["stick", "s2", "--methods", "gn,foo"])
    with pytest.raises(ValueError, match="unknown method"):
        bad.func(bad)
