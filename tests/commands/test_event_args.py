"""``--event`` of ``rquad eval`` and ``rquad sweep``: parsed into the env's event dicts, bad
events refused at parse time, the recovery metrics printed."""

from __future__ import annotations

import argparse
import json

import pytest
from cli_helpers import assert_user_error, run_main

from residual_quad.cli import main
from residual_quad.commands.argtypes import event_arg
from residual_quad.evaluation.sweep import read_rows


def test_event_arg_parses_every_kind():
    assert event_arg("payload:t_s=5,mass_kg=0.5") == {"kind": "payload", "t_s": 5.0, "mass_kg": 0.5}
    assert event_arg("wind:t_s=1,mean_mps=3/0/-1,rise_s=0") == {
        "kind": "wind",
        "t_s": 1.0,
        "mean_mps": (3.0, 0.0, -1.0),
        "rise_s": 0.0,
    }
    assert event_arg("rotor:t_s=2,rotor=1,efficiency=0.7")["rotor"] == 1


@pytest.mark.parametrize(
    "text",
    [
        "gust:t_s=1",
        "payload:t_s=1,mass_kg=-1",
        "payload:t_s=1",
        "payload:t_s",
        "rotor:t_s=1,rotor=4,efficiency=0.5",
        "rotor:t_s=1,rotor=0,efficiency=nan",
        "wind:t_s=1,mean_mps=1/2",
    ],
)
def test_bad_events_are_argument_errors_listing_the_kinds(text):
    with pytest.raises(argparse.ArgumentTypeError, match="KIND one of payload, wind, rotor"):
        event_arg(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("payload:t_s=1,t_s=2,mass_kg=0.5", "field 't_s' is given twice"),
        ("rotor:t_s=1,rotor=0,efficiency=0.7,rotor=1", "field 'rotor' is given twice"),
        ("payload:kind=wind,t_s=1,mass_kg=0.5", "the kind goes before the ':'"),
    ],
)
def test_a_repeated_event_field_is_one_user_error_naming_it(capsys, text, message):
    """A field given twice would silently keep the last value: refused at parse time."""
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        event_arg(text)
    res = run_main(["eval", "--controller", "pid", "--episode-s", "2", "--event", text], capsys)
    assert_user_error(res, "eval", "argument --event: bad event", message)


def test_eval_with_an_event_prints_the_recovery_columns(capsys):
    code = main(
        ["eval", "--controller", "pid", "--episode-s", "6.5", "--json"]
        + ["--event", "payload:t_s=1,mass_kg=0.5"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["events"] == "payload@1s:mass_kg=0.5" and out["event_t_s"] == 1.0
    assert out["recovered"] and out["recovery_peak_m"] > 0.1 and out["recovery_iae_m_s"] > 0


def test_sweep_event_replaces_the_configs_events(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "recovery_payload", "--controllers", "pid", "--seeds", "0", "--no-report"]
    args += ["--backend", "local", "--workers", "1", "--out", str(out)]
    assert main([*args, "--event", "rotor:t_s=1,rotor=0,efficiency=0.8"]) == 0
    (row,) = read_rows(out)
    assert row["events"] == "rotor@1s:rotor=0,efficiency=0.8" and row["event_t_s"] == 1.0
