"""Property-based tests of the sweep engine's promises (hypothesis): the rows file survives any
truncation and duplication without losing a complete row or counting a run twice, and a sweep
config either loads into a matrix of unique runs or is refused with a ``ValueError``."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.evaluation.sweep import SweepConfig, read_rows
from residual_quad.evaluation.sweep.config import expand
from residual_quad.evaluation.sweep.rows import RowWriter

# ------------------------------------------------------------------ the rows file
_ids = st.sampled_from([f"run{i}" for i in range(6)])
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_rows = st.lists(
    st.builds(
        lambda run_id, extra: {"run_id": run_id, **extra},
        _ids,
        st.dictionaries(st.sampled_from(["rmse", "seed", "note", "é"]), _values, max_size=3),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, cut=st.floats(0.0, 1.0), drop_newline=st.booleans())
def test_rows_file_never_loses_a_complete_row_nor_counts_a_run_twice(rows, cut, drop_newline):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        data = data[: int(len(data) * cut)]  # a writer killed anywhere
        if drop_newline and data.endswith(b"\n"):
            data = data[:-1]  # killed between a complete row and its newline
        path.write_bytes(data)
        complete = [json.loads(line) for line in data.split(b"\n") if _complete(line)]
        first: dict[str, dict] = {}
        for r in complete:
            first.setdefault(r["run_id"], r)
        got = read_rows(path)
        assert got == list(first.values())  # first complete row per run id, file order
        RowWriter(path).close()  # what a resume does before appending
        repaired = path.read_bytes()
        assert repaired == b"" or repaired.endswith(b"\n")
        assert read_rows(path) == got  # the repair kept every counted row
        writer = RowWriter(path)
        writer.write({"run_id": "new"})
        writer.close()
        assert [r["run_id"] for r in read_rows(path)] == [*first, "new"]


def _complete(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


# ------------------------------------------------------------------ sweep configs
_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(-1, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _list_of(valid: list) -> st.SearchStrategy:
    return st.one_of(
        st.lists(st.one_of(st.sampled_from(valid), _junk), max_size=4),
        st.lists(st.sampled_from(valid), min_size=1, max_size=3),
        _junk,
    )


_config = st.fixed_dictionaries(
    {},
    optional={
        "controllers": _list_of(["pid", "geo", "hnewton", "hnewton:lm", "lqr"]),
        "payloads": _list_of(["none", "heavy", 0.3, -1.0, "huge"]),
        "winds": _list_of(["calm", "windy", [1.0, 0.5], [math.nan, 1.0], "storm"]),
        "trajectories": _list_of(["hover", "helix", "loop"]),
        "seeds": _list_of([0, 1, 2, -1]),
        "episode_s": st.one_of(st.floats(-1.0, 30.0), _junk),
        "env": st.one_of(
            st.dictionaries(
                st.sampled_from(["control_hz", "max_tilt", "foo", "payload", "pos_noise"]),
                st.one_of(st.floats(-1.0, 200.0), _junk),
                max_size=2,
            ),
            _junk,
        ),
        "controller_options": st.one_of(
            st.dictionaries(
                st.sampled_from(["geo", "pid", "lqr"]),
                st.dictionaries(st.sampled_from(["kp", "kd", "bogus"]), _junk, max_size=2),
                max_size=1,
            ),
            _junk,
        ),
        "series": st.one_of(
            st.lists(
                st.dictionaries(st.sampled_from(["payload", "seed", "bogus"]), _junk, max_size=2),
                max_size=2,
            ),
            _junk,
        ),
        "workers": st.one_of(st.integers(-1, 4), _junk),
        "bogus_key": _junk,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_config)
def test_a_sweep_config_loads_into_unique_runs_or_is_refused_clearly(data):
    text = yaml.safe_dump(data)
    try:
        cfg = configs.load(SweepConfig, yaml.safe_load(text))
    except ValueError as exc:
        assert str(exc)  # a message, never another exception type
        return
    ids = [s.run_id for s in expand(cfg)]
    assert ids and len(ids) == len(set(ids))
    assert 0 < cfg.episode_s < math.inf
    assert all(isinstance(s, int) and s >= 0 for s in cfg.seeds)


_matrix = st.fixed_dictionaries(
    {
        "controllers": st.lists(st.sampled_from(["pid", "geo", "hnewton:lm"]), min_size=1),
        "payloads": st.lists(st.sampled_from(["none", "heavy", 0.3]), min_size=1, max_size=4),
        "winds": st.lists(st.sampled_from(["calm", "windy", (1.0, 0.5)]), min_size=1, max_size=4),
        "trajectories": st.lists(st.sampled_from(["hover", "helix"]), min_size=1, max_size=3),
        "seeds": st.lists(st.integers(0, 3), min_size=1, max_size=4),
    }
)


@settings(max_examples=150, deadline=None)
@given(data=_matrix)
def test_a_matrix_with_a_repeated_entry_is_refused_naming_it(data):
    def has_duplicate(values):
        return len({tuple(v) if isinstance(v, list | tuple) else v for v in values}) < len(values)

    dup = [k for k, v in data.items() if has_duplicate(v)]
    try:
        cfg = configs.load(SweepConfig, yaml.safe_load(yaml.safe_dump({**data, "series": []})))
    except ValueError as exc:
        assert dup and "listed twice" in str(exc) and any(k in str(exc) for k in dup)
        return
    assert not dup
    ids = [s.run_id for s in expand(cfg)]
    assert len(ids) == len(set(ids)) == math.prod(len(v) for v in data.values())
