"""Controller specs: the grammar against known answers, user factories by import path, and bad
specs as one clear ``ValueError`` (the CLI's one-line error, exit 2)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad.controllers import ControlContext, make_controller
from residual_quad.controllers.specs import (
    ControllerEntry,
    parse_spec,
    resolve_entries,
    resolve_entry,
    split_specs,
)
from residual_quad.episode import parse_label, run_episode

USER_MODULE = '''
import numpy as np

from residual_quad.controllers.trackers import GeoTracker


class Hover(GeoTracker):
    """geo with a settable gain; the spec's options reach the constructor."""

    label = "hover_geo"


def make(context, *, gain=1.0):
    return GeoTracker(context, kp=20.0 * gain)


class NoPolicy:
    action_mode = "rotor"

    def __init__(self, context):
        pass

    def reset(self, seed=None):
        pass


class Thrusty(GeoTracker):
    action_mode = "thrust"


class Ctbr(GeoTracker):
    action_mode = "ctbr"


NOT_CALLABLE = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module ``rq_user_ctrl`` importable from this process (and children via PYTHONPATH)."""
    (tmp_path / "rq_user_ctrl.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rq_user_ctrl", None)
    yield tmp_path
    sys.modules.pop("rq_user_ctrl", None)


@pytest.mark.parametrize(
    ("text", "target", "options"),
    [
        ("geo", "geo", {}),
        ("hnewton:lm", "hnewton", {"method": "lm"}),
        ("hnewton_rls:gn,kp=12", "hnewton_rls", {"method": "gn", "kp": 12}),
        ("geo:kp=15", "geo", {"kp": 15}),
        ("geo:kp=15.5,kd=8", "geo", {"kp": 15.5, "kd": 8}),
        (  # typed YAML scalars (an import path: a built-in would refuse unknown options)
            "my_pkg.ctrl:Make:weights=a/b.json,flag=true,x=null",
            "my_pkg.ctrl:Make",
            {"weights": "a/b.json", "flag": True, "x": None},
        ),
        ("my_pkg.ctrl:Make", "my_pkg.ctrl:Make", {}),
        ("my_pkg.ctrl:Make:gain=2", "my_pkg.ctrl:Make", {"gain": 2}),
        ("my_ctrl:Outer.make", "my_ctrl:Outer.make", {}),  # no dot before ':', not a name
        (" geo ", "geo", {}),
    ],
)
def test_the_grammar_against_known_answers(text, target, options):
    spec = parse_spec(text)
    assert (spec.target, spec.options) == (target, options)


def test_the_hnewton_method_suffix_is_unchanged():
    assert parse_label("hnewton:lm") == ("hnewton", {"method": "lm"})
    assert parse_label("geo") == ("geo", {})
    assert parse_spec("hnewton:lm").label == "hnewton:lm"  # the label rows have always had
    assert make_controller("hnewton:gn").params.method == "gn"


def test_the_sb3_form_maps_to_path_vecnormalize_and_algo():
    spec = parse_spec("sb3:runs/sac.zip,vecnormalize=runs/vn.pkl,algo=SAC")
    assert spec.target == "sb3"
    assert spec.options == {"path": "runs/sac.zip", "vecnormalize": "runs/vn.pkl", "algo": "SAC"}
    assert split_specs("sb3:m.zip,algo=SAC,geo") == ["sb3:m.zip,algo=SAC", "geo"]


def test_cli_lists_split_options_from_specs():
    assert split_specs("geo:kp=15,kd=8,pid") == ["geo:kp=15,kd=8", "pid"]
    assert split_specs("hnewton:lm,geo") == ["hnewton:lm", "geo"]
    assert split_specs("a.b:F:gain=2,k=3,geo") == ["a.b:F:gain=2,k=3", "geo"]
    with pytest.raises(ValueError, match="before any spec"):
        split_specs("kp=3,geo")
    with pytest.raises(ValueError, match="empty entry"):
        split_specs("geo,,pid")


def test_options_reach_the_controller_and_overrides_win():
    assert make_controller("geo:kp=15").kp == 15.0
    assert make_controller("geo:kp=15", None, kp=9.0).kp == 9.0


def test_an_import_path_builds_and_flies(user_module):
    ctrl = make_controller("rq_user_ctrl:make:gain=0.5")
    assert ctrl.kp == 10.0
    res = run_episode("rq_user_ctrl:Hover", trajectory="hover", episode_s=0.5, seed=0)
    ref = run_episode("geo", trajectory="hover", episode_s=0.5, seed=0)
    assert np.array_equal(res.pos, ref.pos)  # Hover is geo: the same flight bit for bit


def test_default_labels(user_module):
    assert resolve_entry("rq_user_ctrl:Hover").label == "hover_geo"  # the class's label
    assert resolve_entry("rq_user_ctrl:make:gain=2").label == "make:gain=2"
    entry = ControllerEntry("rq_user_ctrl:make", {"gain": 2.5})
    assert resolve_entry(entry).label == "make:gain=2.5"
    assert resolve_entry(ControllerEntry("geo", {"kp": 15})).label == "geo:kp=15"
    assert resolve_entry({"spec": "geo", "label": "stiff"}).label == "stiff"
    a, b = resolve_entries(["rq_user_ctrl:make:gain=1", "rq_user_ctrl:make:gain=2"])
    assert a.label != b.label  # two option sets, two labels
    with pytest.raises(ValueError, match="listed twice"):
        resolve_entries(["geo", {"spec": "pid", "label": "geo"}])


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("rq_no_such_module:Make", ["rq_no_such_module", "importable from every worker"]),
        ("rq_user_ctrl:Missing", ["has no attribute 'Missing'"]),
        ("rq_user_ctrl:NOT_CALLABLE", ["not a factory or class"]),
        ("rq_user_ctrl:NoPolicy", ["not a Controller", "missing policy"]),
        ("rq_user_ctrl:Thrusty", ["action_mode 'thrust'", "rotor, ctbr"]),
        ("rq_user_ctrl:make:gain=", ["has no value"]),
        ("rq_user_ctrl:make,gain=2", ["options after a second ':'"]),
        ("rq_user_ctrl:make:bogus=1", ["rq_user_ctrl:make", "bogus", "valid options: gain"]),
        ("geo:kq=15", ["'geo:kq=15'", "kq", "valid options: kp, kd, attitude"]),
        ("geo:lm", ["bare value 'lm'"]),
        ("geo:kp=.nan", ["not a finite number"]),
        ("geo:kp=[1", ["not a YAML scalar"]),
        ("geo:kp=1,kp=2", ["given twice"]),
        ("geoo", ["unknown controller 'geoo'", "valid choices: pid, geo"]),
        ("", ["empty controller spec"]),
    ],
)
def test_bad_specs_are_one_clear_value_error(user_module, text, fragments):
    with pytest.raises(ValueError) as info:
        make_controller(text)
    for frag in fragments:
        assert frag in str(info.value), (frag, str(info.value))


def test_an_action_mode_mismatch_with_the_env_is_named(user_module):
    ctrl = make_controller("rq_user_ctrl:Ctbr")
    with pytest.raises(ValueError, match="action_mode 'ctbr'.*'rotor'"):
        run_episode(ctrl, episode_s=0.1, action_mode="rotor")


def test_a_bad_spec_at_the_cli_is_one_line_and_exit_2(user_module):
    env_path = {"PYTHONPATH": str(user_module), "MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin"}
    for spec, frag in (("rq_user_ctrl:NoPolicy", "not a Controller"), ("geo:kq=1", "kq")):
        proc = subprocess.run(
            [sys.executable, "-m", "residual_quad.cli", "eval", "--controller", spec],
            env=env_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("rquad eval: error: ") and frag in lines[0]


_SPEC_CHARS = st.sampled_from(list("geopidhnwtonrls_:,=.15 abAB[]{}-/") + ["lm", "kp", ".nan"])


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=30), st.lists(_SPEC_CHARS, max_size=12).map("".join)))
def test_any_spec_string_parses_or_is_a_value_error(text):
    try:
        spec = parse_spec(text)
    except ValueError:
        return
    assert spec.target and isinstance(spec.options, dict)
    for v in spec.options.values():
        assert not (isinstance(v, float) and not math.isfinite(v))
    try:
        parts = split_specs(text)
    except ValueError:
        return
    assert parts and all(parts)


def test_the_user_module_is_imported_in_a_fresh_process(user_module):
    code = textwrap.dedent(
        """
        from residual_quad.controllers import make_controller
        print(type(make_controller("rq_user_ctrl:Hover").law).__name__)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(user_module), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.stdout.strip() == "Hover", proc.stderr


def test_control_context_reaches_a_user_factory(user_module):
    ctx = ControlContext(control_dt=0.02)
    assert make_controller("rq_user_ctrl:make", ctx).dt == 0.02


def test_demo_flies_extra_specs_beside_the_source_trackers_and_geo_rls_dob(capsys):
    from residual_quad.cli import main

    assert main(["demo", "--controller", "geo:kp=15", "--episode-s", "3.5"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[3:] if line.strip()]
    assert rows == ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "geo:kp=15"]


def test_exponent_option_values_are_floats():
    """``kp=1e1`` is the number 10 (the config loader's scalars), not the string ``"1e1"``;
    ``1e400`` is refused as non-finite."""
    from residual_quad.controllers.specs import parse_spec

    spec = parse_spec("geo:kp=1e1,kd=5E0")
    assert spec.options == {"kp": 10.0, "kd": 5.0}
    assert spec.label == "geo:kp=1e1,kd=5E0"
    with pytest.raises(ValueError, match="not a finite number"):
        parse_spec("geo:kp=1e400")
