"""Property-based: random arguments to every ``rquad`` command end in success or in a user error
(exit code 2, one ``rquad <command>: error:`` line on stderr), never in a traceback.

Most examples call ``main`` in-process (cheap); a few go through a subprocess to check the console
entry point end to end. Every flight is short (``--episode-s`` ≤ 0.5 s, one run)."""

from __future__ import annotations

import pytest
import yaml
from cli_helpers import assert_clean, run_main, run_subprocess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad.evaluation.studies.stick.study import scenario_path

FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

GARBAGE = st.sampled_from(["", "x", "-1", "nan", "inf", "-inf", "1e400", "0", ",", "1,", "é"])
NUMBERS = st.floats(-5, 5, allow_nan=False).map(lambda v: f"{v:.3g}")
SHORT_S = st.sampled_from(["0.01", "0.2", "0.3", "0.5"])
NAMES = st.sampled_from(["geo", "pid", "hnewton", "geo_rls", "geo,pid", "bogus", "geo,,pid"])


def _opt(flag: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return st.one_of(st.just([]), values.map(lambda v: [flag, v]))


@st.composite
def eval_argv(draw) -> list[str]:
    argv = ["eval", "--episode-s", draw(st.one_of(SHORT_S, GARBAGE))]
    argv += draw(_opt("--controller", NAMES))
    argv += draw(_opt("--payload", st.one_of(st.sampled_from(["none", "extra", "3"]), GARBAGE)))
    argv += draw(_opt("--wind", st.sampled_from(["calm", "windy", "1,0.5", "1", "a,b", "-1,1"])))
    argv += draw(_opt("--trajectory", st.sampled_from(["hover", "helix", "figure8", "spiral"])))
    argv += draw(_opt("--seed", st.one_of(st.integers(-3, 3).map(str), GARBAGE)))
    argv += draw(_opt("--yaw-offset", st.one_of(NUMBERS, GARBAGE)))
    argv += draw(st.sampled_from([[], ["--json"], ["--no-ground-effect"]]))
    return argv


@FUZZ
@given(argv=eval_argv())
def test_eval_arguments(capsys, argv):
    assert_clean(run_main(argv, capsys), "eval")


SWEEP_VALUES = {
    "controllers": st.sampled_from([["geo"], ["pid"], ["bogus"], "geo", [1], []]),
    "payloads": st.sampled_from([["none"], [0.3], ["heavy"], [-1.0], ["x"], [None]]),
    "winds": st.sampled_from([["calm"], [[1.0, 0.5]], ["storm"], [[1.0]], [[-1.0, 0.0]]]),
    "trajectories": st.sampled_from([["hover"], ["helix"], ["spiral"], 5]),
    "seeds": st.sampled_from([[0], [3], [-1], ["a"], [0.5]]),
    "episode_s": st.sampled_from([0.2, 0.3, 0.0, -1.0, "x", float("nan")]),
    "series": st.sampled_from([[], [{"seed": 0}], "all"]),
    "bogus": st.just(1),
}


@st.composite
def sweep_docs(draw) -> object:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([[1, 2], 5, "text", None]))
    doc = {"controllers": ["geo"], "payloads": ["none"], "winds": ["calm"]}
    doc |= {"trajectories": ["hover"], "seeds": [0], "episode_s": 0.2, "series": []}
    for key in draw(st.lists(st.sampled_from(sorted(SWEEP_VALUES)), max_size=2, unique=True)):
        doc[key] = draw(SWEEP_VALUES[key])
    return doc


@FUZZ
@given(doc=sweep_docs(), extra=st.sampled_from([[], ["--seeds", "0"], ["--controllers", "x"]]))
def test_sweep_documents(capsys, tmp_path_factory, doc, extra):
    folder = tmp_path_factory.mktemp("sweep")
    cfg = folder / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
    argv = ["sweep", str(cfg), "--out", str(folder / "out"), "--workers", "1", "--no-report"]
    assert_clean(run_main(argv + extra, capsys), "sweep")


TRAJ_PARAMS = st.sampled_from(
    [{}, {"period": 0}, {"period": 6}, {"radius": "fast"}, {"turns": 0.0}, {"bogus": 1}, [1]]
)


@FUZZ
@given(
    name=st.sampled_from(["hover", "helix", "figure8", "spiral"]),
    params=TRAJ_PARAMS,
    group=st.sampled_from(["yaw", "gust", "bogus"]),
    offset=st.sampled_from([[0, 0, 0], [0, 0], [0, 0, float("inf")], "x"]),
    payload=st.sampled_from(["none", "extra", 0.2, -1, float("nan"), [1]]),
)
def test_stress_documents(capsys, tmp_path_factory, name, params, group, offset, payload):
    folder = tmp_path_factory.mktemp("stress")
    scenario = {"name": "a", "group": group, "trajectory": {"name": name, "params": params}}
    scenario |= {"position_offset": offset, "payload": payload}
    doc = {"controllers": ["geo"], "seeds": [0], "episode_s": 0.2, "scenarios": [scenario]}
    cfg = folder / "stress.yaml"
    cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
    argv = ["stress", str(cfg), "--out", str(folder / "o"), "--quiet", "--no-plot"]
    assert_clean(run_main(argv + ["--workers", "1"], capsys), "stress")


STICK_EDITS = {
    "kp": st.sampled_from([5.0, "fast", -1.0, None]),
    "dt": st.sampled_from([0.01, 0.0, 1e-9, "x"]),
    "links": st.sampled_from([[1.0, 1.0], [1.0], [], [1.0, 0.0], "long"]),
    "levels": st.sampled_from([[], [[]], [{"task": "joint", "joints": [1], "target": [0.1]}]]),
    "methods": st.sampled_from(["gn", "gn,lm", "foo", 5, []]),
    "brute_grid": st.sampled_from([5, 1, 10**6, "x"]),
    "switch": st.sampled_from(["always", "sometimes"]),
}


@FUZZ
@given(edits=st.fixed_dictionaries({}, optional=STICK_EDITS))
def test_stick_documents(capsys, tmp_path_factory, edits):
    doc = yaml.safe_load(scenario_path("s1").read_text(encoding="utf-8"))
    doc |= {"duration": 0.05, "brute_grid": 5, **edits}
    cfg = tmp_path_factory.mktemp("stick") / "s.yaml"
    cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert_clean(run_main(["stick", str(cfg), "--methods", "gn"], capsys), "stick")


@FUZZ
@given(
    target=st.sampled_from(["missing", "file", "empty", "rows_garbage"]),
    focus=st.sampled_from([[], ["--focus", "geo"]]),
)
def test_report_folders(capsys, tmp_path_factory, target, focus):
    folder = tmp_path_factory.mktemp("report")
    run_dir = folder / "run"
    if target == "file":
        run_dir.write_text("x", encoding="utf-8")
    elif target == "empty":
        run_dir.mkdir()
    elif target == "rows_garbage":
        run_dir.mkdir()
        (run_dir / "rows.jsonl").write_text("{not json\n", encoding="utf-8")
    argv = ["report", str(run_dir), "--no-animation", *focus]
    assert_clean(run_main(argv, capsys), "report")


@FUZZ
@given(
    epochs=st.sampled_from(["1", "0", "-2", "x"]),
    seed=st.sampled_from(["0", "-1", "y"]),
    dataset=st.sampled_from(["missing", "garbage", "folder"]),
)
def test_train_residual_arguments(capsys, tmp_path_factory, epochs, seed, dataset):
    folder = tmp_path_factory.mktemp("train")
    data = folder / "d.npz"
    if dataset == "garbage":
        data.write_bytes(b"not an npz")
    elif dataset == "folder":
        data.mkdir()
    argv = ["train", "residual", "--dataset", str(data), "--epochs", epochs, "--seed", seed]
    argv += ["--out", str(folder / "w.npz"), "--no-tensorboard", "--no-progress"]
    res = run_main(argv, capsys)
    assert_clean(res, "train residual")
    assert res.rc == 2  # every draw has a missing or unreadable dataset


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--episode-s", "nan"],
        ["eval", "--controller", "bogus", "--episode-s", "0.2"],
        ["stick", "/no/such/scenario.yaml"],
        ["report", "/no/such/run"],
        ["train", "residual", "--dataset", "/no/such.npz", "--epochs", "1"],
    ],
)
def test_subprocess_user_errors(tmp_path, argv):
    res = run_subprocess(argv, str(tmp_path))
    assert res.rc == 2
    assert_clean(res, " ".join(argv[:2]) if argv[0] == "train" else argv[0])
