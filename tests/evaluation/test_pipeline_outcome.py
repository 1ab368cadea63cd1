"""The pipeline's closing lines: which targets are met or missed, how many runs diverged, and
whether that is what the committed run gives."""

from __future__ import annotations

import copy
import csv
import dataclasses
import shutil
from collections import Counter
from pathlib import Path

import pytest

from residual_quad.cli import main
from residual_quad.evaluation.report.beyond import BEYOND_DIR, beyond_outcome_of
from residual_quad.evaluation.report.document import outcome_of_rows
from residual_quad.evaluation.report.figures import FROM_ROWS
from residual_quad.evaluation.studies.pipeline import (
    QUICK,
    PipelineConfig,
    closing_lines,
    committed_outcome,
    is_committed_run,
    outcome_differences,
)
from residual_quad.evaluation.sweep import read_rows

ROWS = Path(__file__).resolve().parents[2] / "docs" / "results" / "sweep" / "rows.jsonl"


def test_the_shipped_outcome_is_the_committed_rows_outcome():
    """The expectation the pipeline prints against is computed from the committed rows, the way
    the report computes it; it cannot go stale when the rows are re-flown."""
    shipped = committed_outcome()
    shipped.pop("what")
    expected = outcome_of_rows(read_rows(ROWS))
    beyond = beyond_outcome_of(ROWS.parents[1])  # its beyond-the-source sweeps, once flown
    if beyond:
        expected["beyond"] = beyond
    assert expected == shipped


def test_the_committed_report_shows_the_shipped_targets():
    report = (ROWS.parents[1] / "report.md").read_text()
    for t in committed_outcome()["targets"]:
        verdict = "met" if t["met"] else "**missed**"
        assert f"| {t['target']} | {t['goal']} | {t['measured']} | {verdict} |" in report


def test_a_run_like_the_committed_one_says_so():
    committed = committed_outcome()
    lines = closing_lines(copy.deepcopy(committed), committed)
    n = len(committed["targets"])
    met = sum(t["met"] for t in committed["targets"])
    assert lines[0].startswith(f"targets: {met} of {n} met; missed: ")
    assert "geo_rls RMSE in every payload × wind cell (max 0.0280 m, goal ≤ 0.026 m)" in lines[0]
    rows = read_rows(ROWS)
    crashed = Counter(r["controller"].split(":")[0] for r in rows if r["diverged"])
    per_kind = ", ".join(f"{kind} {n}" for kind, n in sorted(crashed.items()))
    said = f"diverged runs: {sum(crashed.values())} of {len(rows)}"
    assert lines[1] == (f"{said} ({per_kind})" if crashed else said)
    beyond = committed.get("beyond", {})
    plants = [k for k in beyond if k.startswith("lag/")]
    # one line per beyond-the-source sweep, the lag sweep's plants on one
    assert len(lines) == 3 + len(beyond) - len(plants) + bool(plants)
    if plants:
        assert f"beyond the source, lag sweep ({len(plants)} plants): " in "\n".join(lines)
    assert all(line.startswith("beyond the source, ") for line in lines[2:-1])
    assert lines[-1].startswith("as expected: the committed run")


def test_a_different_outcome_is_named():
    committed = committed_outcome()
    mine = copy.deepcopy(committed)
    mine["targets"][0]["met"] = True
    one_more = {**committed["diverged"], "ppo": committed["diverged"].get("ppo", 0) + 1}
    mine["diverged"] = one_more
    mine["targets"] = [t for t in mine["targets"] if not t["target"].startswith("ppo ")]
    diffs = outcome_differences(mine, committed)
    assert f"{committed['targets'][0]['target']} now met" in diffs
    assert any(d.startswith("target not checked here: ppo ") for d in diffs)
    assert f"diverged runs {one_more} (committed: {committed['diverged']})" in diffs
    assert closing_lines(mine, committed)[-1].startswith("differs from the committed run")


def test_only_the_default_pipeline_is_compared_with_the_committed_run():
    assert is_committed_run(PipelineConfig())
    assert is_committed_run(dataclasses.replace(PipelineConfig(), workers=1, animation=False))
    assert not is_committed_run(QUICK)
    lines = closing_lines(committed_outcome(), None)
    assert "settings differ from the committed run's" in lines[-1]


def test_the_committed_report_is_its_rows_rendered(tmp_path):
    """``rquad report docs/results --rewrite`` on a copy reproduces the committed report.md and
    main table (the intervals included: seeded) — all but the machine line at the top."""
    results = ROWS.parents[1]
    (tmp_path / "sweep").mkdir()
    for rel in ("report.md", "sweep/rows.jsonl", "sweep/sweep_config.yaml"):
        shutil.copy(results / rel, tmp_path / rel)
    # the "Beyond the source" sweeps, once flown: rows, configs and the recovery figures (their
    # series are not committed); the showcase series the figures redrawn from rows read
    folders = ("beyond", "recovery", "lag", "figures/recovery", "sweep/series")
    for rel in ("pipeline_config.yaml", *folders):
        if (results / rel).is_dir():
            shutil.copytree(results / rel, tmp_path / rel)
        elif (results / BEYOND_DIR).is_dir() and (results / rel).is_file():
            shutil.copy(results / rel, tmp_path / rel)
    assert main(["report", str(tmp_path), "--rewrite"]) == 0
    redrawn = {p.stem for p in (tmp_path / "figures").glob("*.png")}
    assert set(FROM_ROWS) <= redrawn  # the figures rows and series make, drawn again
    mine = (tmp_path / "report.md").read_text().splitlines()
    committed = (results / "report.md").read_text().splitlines()
    assert len(mine) == len(committed)
    differ = [i for i, (a, b) in enumerate(zip(mine, committed, strict=True)) if a != b]
    assert set(differ) <= {2}  # "... summed run time on N cores, machine, Python version"
    assert (tmp_path / "tables/tables.md").read_text() == (results / "tables/tables.md").read_text()
    for name in ("main.csv", "paired.csv"):  # full precision: numpy's SIMD sums may differ by ulps
        mine_csv = list(csv.reader((tmp_path / "tables" / name).open()))
        committed_csv = list(csv.reader((results / "tables" / name).open()))
        assert len(mine_csv) == len(committed_csv)
        for a, b in zip(mine_csv, committed_csv, strict=True):
            assert len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                assert x == y or float(x) == pytest.approx(float(y), rel=1e-12), (x, y)


def test_the_stage_table_gives_each_stage_its_share():
    from residual_quad.evaluation.studies.pipeline import TIMINGS_FILE, stages_section

    text = stages_section({"collect": 10.0, "train": 5.0, "evaluate": 170.0, "report": 15.0})
    assert "total 200 s" in text
    assert "| evaluate | 170.0 | 85% |" in text and "| report | 15.0 | 8% |" in text
    assert TIMINGS_FILE in text


def test_a_callable_section_is_called_after_the_tables_are_computed(tmp_path, monkeypatch):
    """The pipeline times its report stage in such a section: it must see the tables done."""
    from residual_quad.evaluation.report import document as report

    events = []
    real = report.make_tables
    monkeypatch.setattr(report, "make_tables", lambda rows: events.append("tables") or real(rows))
    rows = read_rows(ROWS)[:40]
    text = report.write_report(
        rows, tmp_path, extra_sections=[lambda: events.append("section") or "## Timed\n\nok"]
    ).read_text()
    assert events == ["tables", "section"]
    assert "## Timed\n\nok" in text
