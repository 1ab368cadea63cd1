"""Every user error of ``rquad`` ends with exit code 2 and one ``rquad <command>: error:`` line
on stderr, never a traceback; a genuine bug keeps its traceback (and ``--debug`` shows it)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, run_main, run_subprocess

from residual_quad import cli
from residual_quad.controllers import policy_file as ppo_mod
from residual_quad.evaluation.studies.stick.study import scenario_path

QUICK = ["--episode-s", "0.3"]
STICK_S1 = scenario_path("s1").read_text(encoding="utf-8")


def test_negative_seed_is_an_argument_error(capsys):
    assert_user_error(run_main(["eval", "--seed", "-1", *QUICK], capsys), "eval", "--seed")


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "0.004", "1e9", "abc"])
def test_bad_episode_length_is_an_argument_error(capsys, value):
    res = run_main(["eval", "--episode-s", value], capsys)
    assert_user_error(res, "eval", "--episode-s", repr(value))


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--payload", "nan"), ("--payload", "-1"), ("--wind", "1,nan"), ("--yaw-offset", "inf")],
)
def test_non_finite_scenario_values_are_argument_errors(capsys, flag, value):
    assert_user_error(run_main(["eval", flag, value, *QUICK], capsys), "eval", flag)


@pytest.mark.parametrize("content", ["- 1\n- 2\n", "5\n", "just a string\n", ""])
def test_yaml_that_is_not_a_mapping_names_the_file(capsys, tmp_path, content):
    path = tmp_path / "cfg.yaml"
    path.write_text(content, encoding="utf-8")
    for argv in (
        ["sweep", str(path), "--out", str(tmp_path / "o")],
        ["stress", str(path), "--out", str(tmp_path / "o")],
        ["stick", str(path)],
        ["train", "ppo", str(path), "--out", str(tmp_path / "o")],
    ):
        res = run_main(argv, capsys)
        command = " ".join(argv[:2]) if argv[0] == "train" else argv[0]
        assert_user_error(res, command, str(path))


@pytest.mark.parametrize(
    "argv",
    [["sweep"], ["stress"], ["train", "ppo"], ["stick"], ["pipeline", "--config"]],
)
def test_missing_absolute_config_path(capsys, argv):
    missing = "/no/such/folder/missing.yaml"
    command = " ".join(argv[:2]) if argv[0] == "train" else argv[0]
    assert_user_error(run_main([*argv, missing], capsys), command, missing)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda s: s.replace("kp: 25.0", "kp: fast"), "kp: expected a number"),
        (lambda s: s.replace("target: [1.2, 1.0]", "target: 5"), "target: expected a list"),
        (lambda s: s.replace("name: s1\n", ""), "missing required key(s) ['name']"),
        (lambda s: s.replace("dt: 0.005", "dt: .nan"), "dt: expected a finite number"),
        (lambda s: s.replace("links: [1.0, 1.0]", "links: [1.0, -1.0]"), "links must be"),
        (lambda s: s + "kp: 3.0\n", "duplicate key 'kp'"),
    ],
)
def test_stick_yaml_with_wrong_values(capsys, tmp_path, edit, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(edit(STICK_S1), encoding="utf-8")
    assert_user_error(run_main(["stick", str(path)], capsys), "stick", str(path), fragment)


STRESS = """controllers: [geo]
seeds: [0]
episode_s: 0.3
scenarios:
  - name: a
    group: envelope
    trajectory: {trajectory}
"""


@pytest.mark.parametrize(
    ("trajectory", "fragment"),
    [
        ("{name: figure8, params: {period: 0}}", "period must be a finite real number > 0"),
        ("{name: helix, params: {turns: 0}}", "turns must be a finite real number > 0"),
        ("{name: helix, params: {radius: fast}}", "radius: expected a number"),
        ("{name: helix, params: {radius: .nan}}", "radius: expected a finite number"),
        ("{name: helix, params: [1]}", "params: expected a mapping"),
        ("{name: hover, params: {point: [1, 2]}}", "point: expected 3 values"),
        ("{name: helix, params: {bogus: 1}}", "unknown key(s) ['bogus']"),
        ("spiral", "unknown trajectory 'spiral'"),
    ],
)
def test_stress_trajectory_params(capsys, tmp_path, trajectory, fragment):
    path = tmp_path / "stress.yaml"
    path.write_text(STRESS.format(trajectory=trajectory), encoding="utf-8")
    res = run_main(["stress", str(path), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert_user_error(res, "stress", str(path), fragment)
    assert not (tmp_path / "o" / "rows.jsonl").exists()  # refused before anything was flown


def test_unwritable_output_folder(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder", encoding="utf-8")
    res = run_main(["eval", *QUICK, "--tensorboard", str(blocker / "tb")], capsys)
    assert_user_error(res, "eval", str(blocker))
    res = run_main(["sweep", "sweep_quick", "--out", str(blocker / "o"), "--no-report"], capsys)
    assert_user_error(res, "sweep", str(blocker))


def test_permission_error_is_a_user_error(capsys, tmp_path, monkeypatch):
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        if os.access(readonly, os.W_OK):  # root ignores the mode: fake the refusal instead
            real_mkdir = Path.mkdir

            def refuse(self, *args, **kwargs):
                if str(self).startswith(str(readonly)):
                    raise PermissionError(13, "Permission denied", str(self))
                return real_mkdir(self, *args, **kwargs)

            monkeypatch.setattr(Path, "mkdir", refuse)
        res = run_main(["stick", "s1", "--methods", "gn", "--json", f"{readonly}/x/r.json"], capsys)
        assert_user_error(res, "stick", "Permission denied", str(readonly))
    finally:
        readonly.chmod(0o755)


def test_missing_rl_extra_gives_the_hint_for_every_command(capsys, monkeypatch):
    real = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name.startswith(("stable_baselines3", "torch")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(ppo_mod.importlib, "import_module", fake_import)
    res = run_main(["eval", "--controller", "ppo", *QUICK], capsys)
    assert_user_error(res, "eval", ppo_mod.INSTALL_HINT, "the 'ppo' controller")
    res = run_main(["eval", "--controller", "ppo_res", *QUICK], capsys)
    assert_user_error(res, "eval", ppo_mod.INSTALL_HINT, "the 'ppo_res' controller")


def test_short_episode_says_metrics_are_undefined(capsys):
    res = run_main(["eval", "--episode-s", "2"], capsys)
    assert res.rc == 0 and res.err == ""
    row = res.out.splitlines()[3]
    assert "inf" not in res.out and row.split()[1:3] == ["–", "–"]
    assert "measured after 3 s" in res.out


def test_a_genuine_bug_keeps_its_traceback(capsys, monkeypatch):
    def boom(args):
        raise KeyError("a bug")

    def import_bug(args):
        raise ImportError("cannot import name 'x'", name="residual_quad.something")

    for func, exc in ((boom, KeyError), (import_bug, ImportError)):
        parser = cli.build_parser()
        monkeypatch.setattr(cli, "build_parser", lambda p=parser: p)
        sub = next(a for a in parser._actions if a.dest == "command")
        sub.choices["report"].set_defaults(func=func)
        with pytest.raises(exc):
            cli.main(["report", "somewhere"])


def test_debug_flag_and_env_reraise_user_errors(capsys, monkeypatch):
    with pytest.raises(ValueError, match="unknown controller"):
        cli.main(["--debug", "eval", "--controller", "nope", *QUICK])
    monkeypatch.setenv("RQUAD_DEBUG", "1")
    with pytest.raises(ValueError, match="unknown controller"):
        cli.main(["eval", "--controller", "nope", *QUICK])


def test_subprocess_prints_one_line_and_no_traceback(tmp_path):
    # the console entry point end to end: what a user sees in a terminal
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n", encoding="utf-8")
    res = run_subprocess(["sweep", str(listed), "--out", str(tmp_path / "o")], str(tmp_path))
    assert_user_error(res, "sweep", str(listed), "top level must be a mapping")
    res = run_subprocess(["eval", "--seed", "-1"], str(tmp_path))
    assert_user_error(res, "eval", "--seed")


def test_a_controller_option_outside_its_domain_is_one_line_and_exit_2(capsys):
    for spec, message in (
        ("geo:kp=-5", "geo: option kp must be a finite number > 0, got -5"),
        ("geo:kp=abc", "geo: option kp must be a finite number > 0, got 'abc'"),
        ("geo:kp=1e400", "controller spec 'geo:kp=1e400': option kp=1e400 is not a finite number"),
        ("pid,hnewton:lm,rate_tilt=0", "hnewton: option rate_tilt must be a finite number > 0"),
    ):
        res = run_main(["eval", "--controller", spec, *QUICK], capsys)
        assert_user_error(res, "eval", message)
