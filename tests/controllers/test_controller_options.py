"""Spec options of every built-in controller are checked against their declared domains when the
spec is parsed: a bad value is one ``ValueError`` naming the controller, the option and the
domain, never a failure mid-flight."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.controllers import make_controller
from residual_quad.controllers.base import BUILTIN_CONTROLLERS, resolve_factory
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.options import (
    Choice,
    Flag,
    Instance,
    Integer,
    Items,
    Number,
    Optional,
    Section,
    Text,
)
from residual_quad.controllers.specs import parse_spec, resolve_entry
from residual_quad.envs.observation import OBS_DIM
from residual_quad.evaluation.sweep import SweepConfig

HOVER_OBS = np.r_[np.zeros(6), np.eye(3).ravel(), np.zeros(OBS_DIM - 15)]
#: texts every numeric option refuses, whatever its bounds
NON_NUMBERS = ("nan", "inf", "-inf", "1e400", "-1e400", "abc", ".nan", ".inf")


def _table(name):
    return resolve_factory(name).OPTIONS


def _bad_texts(domain) -> list[str]:
    """Spec texts outside ``domain`` (a YAML scalar each)."""
    if isinstance(domain, Optional):
        return _bad_texts(domain.domain)
    if isinstance(domain, Number | Integer):
        bad = list(NON_NUMBERS)
        lo = getattr(domain, "gt", None)
        for value in ("-5", "0", "-0.001", "2.5e9"):
            try:
                domain.check(float(value))
            except Exception:  # noqa: BLE001 - outside the bounds: a case
                bad.append(value)
        if isinstance(domain, Integer):
            bad.append("2.5")
        assert lo is None or "0" in bad
        return bad
    if isinstance(domain, Choice | Flag):
        return ["abc", "nan", "5", "-1"]
    if isinstance(domain, Items | Section | Instance):
        return ["abc", "5"]
    if isinstance(domain, Text):
        return ["5", "1.5", "true"]
    raise AssertionError(f"a domain without cases: {domain!r}")


CASES = [
    pytest.param(name, key, id=f"{name}:{key}")
    for name in BUILTIN_CONTROLLERS
    for key in _table(name)
]


def test_every_built_in_declares_its_options():
    for name in BUILTIN_CONTROLLERS:
        table = _table(name)
        assert table, name
        assert all(hasattr(d, "check") for d in table.values())


@pytest.mark.parametrize(("name", "key"), CASES)
def test_every_option_refuses_values_outside_its_domain(name, key):
    domain = _table(name)[key]
    for text in _bad_texts(domain):
        with pytest.raises(ValueError) as info:
            parse_spec(f"{name}:{key}={text}")
        msg = str(info.value)
        assert "\n" not in msg
        parsed = configs.parse_yaml(text)  # how the spec grammar reads the text
        if isinstance(parsed, float) and not math.isfinite(parsed):
            # NaN/inf (.nan, .inf, 1e400): refused by the grammar, naming spec and option
            assert f"option {key}=" in msg and "not a finite number" in msg, msg
        else:
            assert msg.startswith(f"{name}: option {key} must be {domain.describe()}, got "), msg
        # the mapping form of sweep and stress configs refuses it the same way
        value = yaml.safe_load(text)
        if not (isinstance(value, float) and not math.isfinite(value)):
            with pytest.raises(ValueError, match=f"{name}: option {key} must be"):
                resolve_entry({"spec": name, "options": {key: value}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("geo:kp=-5", "geo: option kp must be a finite number > 0, got -5"),
        ("geo:kp=0", "geo: option kp must be a finite number > 0, got 0"),
        ("geo:kp=nan", "geo: option kp must be a finite number > 0, got 'nan'"),
        ("geo:kp=inf", "geo: option kp must be a finite number > 0, got 'inf'"),
        ("geo:kp=1e400", "controller spec 'geo:kp=1e400': option kp=1e400 is not a finite number"),
        ("geo:kp=abc", "geo: option kp must be a finite number > 0, got 'abc'"),
        ("pid:i_max=0", "pid: option i_max must be a finite number > 0, got 0"),
        ("hnewton:xx", "hnewton: option method must be one of gn, lm, bfgs, newton, got 'xx'"),
        (
            "geo_rls:forgetting=1.5",
            "geo_rls: option forgetting must be a finite number in [0.5, 1], got 1.5",
        ),
        ("geo_rls:warmup_steps=-1", "geo_rls: option warmup_steps must be an integer >= 0"),
        ("geo_rls:covariance=lsq", "geo_rls: option covariance must be one of trace_cap, efra"),
        ("geo_rls_dob:observer=maybe", "geo_rls_dob: option observer must be true or false"),
        ("ppo:training_seed=-1", "ppo: option training_seed must be an integer >= 0 or null"),
        ("sb3:m.zip,algo=PPX", "sb3: option algo must be one of PPO, SAC, TD3, A2C, DDPG"),
        ("geo:kq=15", "geo: unknown option 'kq' in spec 'geo:kq=15'; valid options: kp, kd"),
    ],
)
def test_known_answers(text, message):
    with pytest.raises(ValueError) as info:
        make_controller(text)
    assert str(info.value).startswith(message), str(info.value)


def test_valid_values_build_and_reach_the_controller():
    assert make_controller("geo:kp=1e5").kp == 1e5  # YAML 1.1 reads 1e5 as text: a number here
    assert make_controller("pid:ki=0").ki == 0.0  # ki = 0 is a PD
    assert make_controller("hnewton:lm,rate_tilt=4").params.rate_tilt == 4.0
    ctrl = make_controller("geo_rls:warmup_steps=20.0,p0=5e-3")
    assert ctrl.config.rls.warmup_steps == 20 and isinstance(ctrl.config.rls.warmup_steps, int)
    gains = make_controller("geo", None, attitude={"wn_rp": 15.0}).inner.gains
    assert gains.wn_rp == 15.0
    with pytest.raises(ValueError, match="geo: option attitude must be AttitudeGains"):
        make_controller("geo", None, attitude={"wn_rp": -1.0})


def test_overrides_and_batches_are_checked_too():
    with pytest.raises(ValueError, match="geo: option kd must be a finite number > 0, got nan"):
        make_controller("geo", None, kd=float("nan"))
    with pytest.raises(ValueError, match="pid: option ki must be a finite number >= 0"):
        make_batch_controller("pid", 2, ki=-1.0)
    with pytest.raises(ValueError, match="geo_rls: option leak must be"):
        make_batch_controller("geo_rls", 2, leak=1.0)


def test_sweep_configs_refuse_a_bad_option_at_load():
    with pytest.raises(ValueError, match="geo: option kp must be a finite number > 0, got -5"):
        SweepConfig(controllers=["geo:kp=-5"])
    with pytest.raises(ValueError, match="hnewton: option rate_tilt must be"):
        SweepConfig(controllers=[{"spec": "hnewton", "options": {"rate_tilt": 0}}])


# --------------------------------------------------------------------------- hypothesis
#: controllers cheap to build, and their numeric options that no other option constrains
#: (p0 ≤ trace_cap, z_on < z_off and heading_on < heading_off are checked at build, together)
_COUPLED = {"p0", "trace_cap", "z_on", "z_off", "heading_on", "heading_off"}
_NUMERIC = [
    (name, key)
    for name in ("pid", "geo", "hnewton", "geo_rls", "geo_rls_dob", "hnewton_rls")
    for key, d in _table(name).items()
    if isinstance(d.domain if isinstance(d, Optional) else d, Number | Integer)
    and key not in _COUPLED
]


def _accepts(domain, value) -> bool:
    """The oracle: does the declared domain contain this YAML value?"""
    if isinstance(domain, Optional):
        return value is None or _accepts(domain.domain, value)
    if isinstance(value, bool) or value is None:
        return False
    try:
        x = float(value)
    except (TypeError, ValueError):
        return False
    if not math.isfinite(x):
        return False
    if isinstance(domain, Integer) and x != int(x):
        return False
    lo_ok = all(
        (
            getattr(domain, "gt", None) is None or x > domain.gt,
            getattr(domain, "ge", None) is None or x >= domain.ge,
        )
    )
    hi_ok = all(
        (
            getattr(domain, "lt", None) is None or x < domain.lt,
            getattr(domain, "le", None) is None or x <= domain.le,
        )
    )
    return lo_ok and hi_ok


VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["abc", "1e400", "-1e400", "nan", "inf", "1e5", "0.0", "null", "true", "[1"]),
)


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from(_NUMERIC), text=VALUES)
def test_random_option_values_build_or_name_controller_and_option(case, text):
    name, key = case
    domain = _table(name)[key]
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    spec = f"{name}:{key}={text}"
    if (value is None or isinstance(value, str | int | float)) and _accepts(domain, value):
        ctrl = make_controller(spec)  # valid: builds
        assert np.isfinite(ctrl.policy(HOVER_OBS)).all()
    else:
        with pytest.raises(ValueError) as info:
            parse_spec(spec)
        msg = str(info.value)
        assert name in msg and key in msg and "\n" not in msg, msg
