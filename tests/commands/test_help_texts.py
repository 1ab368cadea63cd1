"""The help texts of ``rquad`` describe the commands as they are: every argument has one, and the
numbers they quote (run counts, train targets) are the ones the code computes."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest
from cli_helpers import run_main

from residual_quad import configs
from residual_quad.cli import build_parser
from residual_quad.commands.train import TRAIN_TARGETS
from residual_quad.evaluation.studies.pipeline import QUICK
from residual_quad.evaluation.sweep import SweepConfig, expand


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("rquad",)
) -> Iterator[tuple[tuple[str, ...], argparse.Action, str | None]]:
    """Every action of ``parser`` and its sub-parsers (recursively) with its path and help; the
    sub-commands themselves appear as their ``_SubParsersAction`` choice entries."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield path, action, action.help
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), action, helps.get(name)
                yield from _walk(sub, (*path, name))


def _subparser(*names: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    res = run_main([*argv, "--help"], capsys)
    assert res.rc == 0, res.err
    return " ".join(res.out.split())  # argparse wraps lines: compare on single spaces


def _full_run_count(config: str) -> int:
    """Runs of a shipped sweep config, loaded with every check (builds the PPO policies)."""
    pytest.importorskip("stable_baselines3")
    return len(expand(configs.load(SweepConfig, config)))


def test_every_argument_and_command_has_a_help_text(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    missing = [
        f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
        for path, action, text in _walk(build_parser())
        if not (isinstance(text, str) and text.strip() and text != argparse.SUPPRESS)
    ]
    assert not missing, f"arguments without a help text: {missing}"
    # the walk reaches the nested sub-commands (train targets, repro actions)
    paths = {path for path, _, _ in _walk(build_parser())}
    assert {("rquad", "train", t) for t in TRAIN_TARGETS} <= paths
    assert ("rquad", "repro", "check") in paths


def test_sweep_help_names_the_run_count_of_the_default_config(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = _help(["sweep"], capsys)
    n = _full_run_count("sweep")
    assert f"{n} runs" in text, text
    quoted = {int(m) for m in re.findall(r"(\d+) runs", text)}
    assert quoted == {n, _full_run_count("sweep_quick")}, text  # no stale count left


def test_pipeline_help_names_its_run_counts_and_no_stale_duration(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = _help(["pipeline"], capsys)
    assert f"{_full_run_count('sweep')} runs" in text, text
    assert f"{_full_run_count(QUICK.sweep)} runs" in text, text
    assert "couple of minutes" not in text


def test_train_help_names_every_registered_target(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    train = _subparser("train")
    sub = next(a for a in train._actions if isinstance(a, argparse._SubParsersAction))
    registered = list(sub.choices)
    assert registered == list(TRAIN_TARGETS)
    assert train.description and all(t in train.description for t in registered)
    top = _help([], capsys)
    line = re.search(r"train (train a model[^.]*?) stick ", top)
    assert line, top
    assert all(re.search(rf"\b{t}\b", line.group(1)) for t in registered), line.group(1)
    text = _help(["train"], capsys)
    assert all(t in text for t in registered)
    assert "more targets may be registered" not in text + top
