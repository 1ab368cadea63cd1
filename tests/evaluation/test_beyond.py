"""The "beyond the source" section on a small sweep of existing windy scenarios (3 seeds)."""

from __future__ import annotations

import dataclasses

import pytest

from residual_quad import configs
from residual_quad.controllers.residual import DEFAULT_WEIGHTS
from residual_quad.evaluation.report import beyond
from residual_quad.evaluation.report.beyond import Extras, beyond_section
from residual_quad.evaluation.report.document import write_report
from residual_quad.evaluation.report.tables import Table
from residual_quad.evaluation.studies.pipeline import BEYOND_DIR, PipelineConfig, beyond_stage
from residual_quad.evaluation.sweep import SweepConfig, run_sweep

SMALL = SweepConfig(
    controllers=["geo", "geo_rls", "geo_rls_dob"],
    payloads=["heavy"],
    winds=["breezy", "windy"],
    trajectories=["helix"],
    seeds=[0, 1, 2],
    episode_s=5.0,
    series=[],
    workers=1,
)


@pytest.fixture(scope="module")
def small_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("beyond") / "sweep"
    return run_sweep(SMALL, out, workers=1, progress=False)


def test_section_has_the_matrix_with_intervals_the_paired_table_and_the_extras(
    small_rows, tmp_path
):
    fig = tmp_path / "figures" / "recovery.png"
    fig.parent.mkdir()
    fig.write_bytes(b"png")
    extra = Extras(
        tables=[Table("recovery", "Recovery after a gust", ["controller", "s"], [["geo", 1.5]])],
        figures={"recovery": fig},
    )
    text = beyond_section(
        small_rows,
        tmp_path,
        title="realistic",
        plant={"rotor_lag_s": 0.05},
        rows_path="beyond/rows.jsonl",
        extras=[extra],
        tables_dir=tmp_path / "tables",
        baseline=[{**r, "rmse": r["rmse"] / 2} for r in small_rows],
    )
    assert text.startswith("## Beyond the source: realistic\n")
    assert "18 runs of 3 controllers under plant options `rotor_lag_s: 0.05`" in text
    assert "mean over helix × seeds" in text
    # every windy/breezy cell of 3 seeds has a proper interval
    for line in text.splitlines():
        if line.startswith("| heavy |"):
            assert line.count(" [") == 3, line
    assert "| geo_rls_dob | geo_rls | 6 | 0 |" in text
    assert "**Recovery after a gust**" in text and "![recovery](figures/recovery.png)" in text
    # every run twice its baseline: the change is 100 % of before, higher on all 6 runs
    change = [line for line in text.splitlines() if line.startswith("| geo_rls | 6 | 0 | ")]
    assert len(change) == 1 and change[0].endswith("| 100.0000 | 6 / 0 / 0 | higher |")
    for name in ("matrix", "paired", "plant_change", "recovery"):
        assert (tmp_path / "tables" / f"beyond_{name}.csv").is_file()


def test_section_is_deterministic_and_an_extra_maker_plugs_in(small_rows, tmp_path, monkeypatch):
    first = beyond_section(small_rows, tmp_path)
    assert beyond_section(small_rows, tmp_path) == first
    assert "the default plant" in first
    calls = []

    def maker(rows, out):
        calls.append(len(rows))
        return Extras(tables=[Table("x", "Made from the rows", ["runs"], [[len(rows)]])])

    monkeypatch.setattr(beyond, "EXTRA_MAKERS", (maker,))
    assert "**Made from the rows**" in beyond_section(small_rows, tmp_path)
    assert calls == [18]
    with pytest.raises(ValueError, match="rows is empty"):
        beyond_section([], tmp_path)


def test_report_places_the_section_after_the_tables(small_rows, tmp_path):
    section = beyond_section(small_rows, tmp_path, title="windy")
    report = write_report(small_rows, tmp_path, beyond_sections=[section]).read_text()
    assert report.index("## Tables") < report.index("## Beyond the source: windy")
    assert "**Paired comparisons: steady-state RMSE, A − B" in report.split("## Beyond")[0]


def test_pipeline_flies_the_beyond_sweep_when_configured(small_rows, tmp_path):
    """A config naming a sweep YAML gets its section (geo_rls with the pipeline's weights: here
    the shipped ones); no recovery sweeps here (tests/evaluation/test_pipeline_beyond.py)."""
    path = configs.dump(dataclasses.replace(SMALL, seeds=[0, 1]), tmp_path / "windy_lag.yaml")
    cfg = PipelineConfig(beyond=str(path), recovery=[], lag="", workers=1)
    text = beyond_stage(cfg, tmp_path, DEFAULT_WEIGHTS, baseline=small_rows)
    assert text.startswith("## Beyond the source: windy_lag")
    assert "12 runs of 3 controllers" in text and (tmp_path / BEYOND_DIR / "rows.jsonl").is_file()
    assert (tmp_path / "tables" / "beyond_paired.csv").is_file()
    # the main sweep flies 20 s episodes, these 5 s: not the same runs, no change table
    assert "Change of steady-state RMSE" not in text
    same_length = dataclasses.replace(cfg, sweep_overrides={"episode_s": 5.0})
    text = beyond_stage(same_length, tmp_path, DEFAULT_WEIGHTS, resume=True, baseline=small_rows)
    assert "| geo | 4 | 0 | 0.0000 † | 0.0000 | 0 / 4 / 0 | no clear change |" in text
