"""The strict YAML loader: every malformed document is a ``ValueError`` naming the file and the
key path; hypothesis feeds random documents to every shipped config dataclass."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.evaluation.studies.stick.study import Scenario, scenario_path
from residual_quad.evaluation.studies.stress import StressConfig, TrajectorySpec
from residual_quad.evaluation.sweep import SweepConfig
from residual_quad.training.collect import CollectConfig
from residual_quad.training.ppo_config import PPOTrainConfig
from residual_quad.training.residual_train import TrainConfig

CONFIG_CLASSES = [
    SweepConfig,
    StressConfig,
    CollectConfig,
    TrainConfig,
    PPOTrainConfig,
    ResidualConfig,
    Scenario,
]


def _write(tmp_path, text: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text", ["- 1\n", "5\n", "'text'\n", "null\n", "", "# only a comment\n"])
def test_top_level_must_be_a_mapping(tmp_path, text):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match="must be a mapping|empty config file") as err:
        configs.load(SweepConfig, path)
    assert str(path) in str(err.value)


def test_duplicate_keys_are_errors(tmp_path):
    path = _write(tmp_path, "seeds: [0]\nepisode_s: 1.0\nseeds: [1]\n")
    with pytest.raises(ValueError, match=r"line 3.*duplicate key 'seeds'"):
        configs.load(SweepConfig, path)
    nested = _write(tmp_path, "env: {control_hz: 100, control_hz: 50}\n")
    with pytest.raises(ValueError, match="duplicate key 'control_hz'"):
        configs.load(SweepConfig, nested)


def test_wrong_types_are_named_with_their_key_path(tmp_path):
    cases = {
        "controller_options: {geo: 5}\n": "controller_options.geo: expected a mapping",
        "env: [1, 2]\n": "env: expected a mapping",
        "env: {1: 2}\n": "env: keys must be strings",
        "seeds: [0, x]\n": r"seeds\[1\]: expected an integer",
        "episode_s: .inf\n": "episode_s: expected a finite number",
        "episode_s: .nan\n": "episode_s: expected a finite number",
        "series: [5]\n": r"series\[0\]: expected a mapping",
        "seeds: 1e400\n": "seeds: expected a list",
    }
    for text, fragment in cases.items():
        path = _write(tmp_path, text)
        with pytest.raises(ValueError, match=fragment) as err:
            configs.load(SweepConfig, path)
        assert str(err.value).startswith(f"{path}: ")
    with pytest.raises(ValueError, match=r"reward_weights.alive: expected a number"):
        configs.load(PPOTrainConfig, {"reward_weights": {"alive": "much"}})
    with pytest.raises(ValueError, match="rls.trace_cap: expected a finite number"):
        configs.load(ResidualConfig, {"rls": {"trace_cap": math.inf}})
    with pytest.raises(ValueError, match="expected a finite number"):
        configs.load(TrainConfig, {"lr": 10**400})  # an int too large for a float


def test_missing_required_keys_are_named():
    with pytest.raises(ValueError, match=r"missing required key\(s\) \['group'\]"):
        configs.load(StressConfig, {"scenarios": [{"name": "a"}]})


def test_union_reports_the_error_of_the_matching_shape():
    with pytest.raises(ValueError, match=r"scenarios\[0\].trajectory.params: expected a mapping"):
        configs.load(
            StressConfig,
            {"scenarios": [{"name": "a", "group": "yaw", "trajectory": {"params": [1]}}]},
        )


def test_trajectory_spec_validates_params_at_construction():
    with pytest.raises(ValueError, match="no finite reference"):
        TrajectorySpec("helix", {"period": 1e-300})
    assert TrajectorySpec("figure8", {"period": 6}).params == {"period": 6}  # stays as given


def test_valid_documents_still_load(tmp_path):
    for cls in CONFIG_CLASSES[:-1]:
        cfg = configs.load(cls, _write(tmp_path, "{}\n"))
        assert configs.to_dict(cfg) == configs.to_dict(cls())
    scn = configs.load(Scenario, scenario_path("s4"))
    assert scn.dynamic


# ------------------------------------------------------------------------- property-based
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.sampled_from([0, -1, 2**70, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["geo", "hover", "helix", "calm", "windy", "none", "extra", "gn", "point"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=12,
)


def _field_names(cls) -> list[str]:
    import dataclasses

    names = [f.name for f in dataclasses.fields(cls) if f.init]
    return names + ["name", "params", "task", "target", "rls", "kp", "bogus"]


def _valid(cls) -> dict:
    """A valid document of ``cls`` (its defaults; a shipped scenario for ``Scenario``)."""
    if cls is Scenario:
        return yaml.safe_load(scenario_path("s4").read_text(encoding="utf-8"))
    if cls is StressConfig:
        return yaml.safe_load(configs.shipped("stress").read_text(encoding="utf-8"))
    return configs.to_dict(cls())


def _mutate(draw, doc):
    """``doc`` with one value (at any depth) replaced by a random one."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc, key=str)))
        return {**doc, key: _mutate(draw, doc[key])}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], _mutate(draw, doc[i]), *doc[i + 1 :]]
    return draw(VALUES)


@st.composite
def documents(draw, cls):
    """A valid document with one random change, a mapping of mostly-known keys (sometimes
    unknown ones) to random values, or a non-mapping top level."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(VALUES)
    if kind >= 5:
        return _mutate(draw, _valid(cls))
    keys = draw(st.lists(st.sampled_from(_field_names(cls)), max_size=5, unique=True))
    return {k: draw(VALUES) for k in keys}


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_documents_load_or_raise_value_error(tmp_path_factory, cls, data):
    doc = data.draw(documents(cls))
    path = tmp_path_factory.mktemp("fuzz") / "doc.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        cfg = configs.load(cls, path)
    except ValueError as exc:
        assert str(exc).startswith(str(path)), exc  # names the file
    else:
        assert isinstance(cfg, cls)


@pytest.mark.parametrize(
    "cls, text, get, want",
    [
        (TrainConfig, "lr: 3e-3\nlr_final: 1E-4\n", lambda c: (c.lr, c.lr_final), (3e-3, 1e-4)),
        (PPOTrainConfig, "ppo:\n  learning_rate: 3e-4\n", lambda c: c.ppo.learning_rate, 3e-4),
        (
            ResidualConfig,
            "rls:\n  trace_cap: 1e3\n  p0: 5E-2\n",
            lambda c: (c.rls.trace_cap, c.rls.p0),
            (1e3, 5e-2),
        ),
        (SweepConfig, "episode_s: 1e1\n", lambda c: c.episode_s, 10.0),
    ],
)
def test_exponent_floats_without_sign_or_dot_are_floats(tmp_path, cls, text, get, want):
    """``1e9``, ``1.0e9`` and ``1E-3`` are floats (YAML 1.2, Python); PyYAML alone reads them as
    strings, which a float field refused."""
    assert get(configs.load(cls, _write(tmp_path, text))) == want


def test_exponent_floats_in_a_stick_scenario(tmp_path):
    from residual_quad.evaluation.studies.stick.study import load_scenario

    text = scenario_path("s1").read_text(encoding="utf-8")
    text = text.replace("vmax: 10.0 ", "vmax: 1.0e9 ").replace("lm_mu: 0.3", "lm_mu: 3e-1")
    path = tmp_path / "s1_exp.yaml"
    path.write_text(text + "eps: 1E-12\n", encoding="utf-8")
    scn = load_scenario(path)
    assert (scn.vmax, scn.lm_mu, scn.eps) == (1e9, 0.3, 1e-12)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e9", 1e9),
        ("1.0e9", 1e9),
        ("1E-3", 1e-3),
        ("-2.5E+3", -2500.0),
        (".5e3", 500.0),
        ("1.5", 1.5),
        ("10", 10),
        ("1e", "1e"),
        ("e9", "e9"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_the_loader_reads_exponents_as_floats_and_leaves_other_text(text, value):
    got = configs.parse_yaml(f"x: {text}")["x"]
    assert got == value and type(got) is type(value)
    assert yaml.safe_load("x: 1e9")["x"] == "1e9"  # PyYAML's own loader is left unchanged
