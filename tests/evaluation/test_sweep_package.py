"""The sweep package's shape: every public name stays importable from
``residual_quad.evaluation.sweep`` (user code and docs use that path), and the rows file — its
writer, reader and folder lock — has one implementation, in ``evaluation/sweep/rows.py``."""

from __future__ import annotations

import re
from pathlib import Path

import residual_quad.evaluation.sweep as sweep
from residual_quad.evaluation.sweep import config, engine, rows

ROOT = Path(__file__).resolve().parents[2]

#: the names user code, the CLI and the docs import from ``residual_quad.evaluation.sweep``
PUBLIC = {
    config: ["CONFIG_FILE", "ControllerLabels", "SweepConfig", "expand"],
    engine: [
        "DEFAULT_BACKEND",
        "MAX_BATCH",
        "SWEEP_BACKENDS",
        "run_batch",
        "run_one",
        "run_rows",
        "run_sweep",
        "vector_batches",
    ],
    rows: [
        "FAILED_RUNS_EXIT",
        "LOCK_FILE",
        "ROWS_FILE",
        "SERIES_DIR",
        "FolderLock",
        "RowWriter",
        "failed_rows",
        "failure_row",
        "failure_summary",
        "flown_rows",
        "is_failed",
        "read_rows",
        "result_row",
    ],
}


def test_public_names_are_reexported_from_the_package():
    for module, names in PUBLIC.items():
        for name in names:
            assert getattr(sweep, name) is getattr(module, name), name
            assert name in sweep.__all__, name
    assert sweep.RunSpec.__module__ == "residual_quad.episode"


def test_every_name_in_all_exists():
    missing = [n for n in sweep.__all__ if not hasattr(sweep, n)]
    assert missing == []


def test_rows_are_written_locked_and_parsed_only_by_the_rows_module():
    """No other evaluation module keeps its own copy of the fsynced writer, the ``flock`` or a
    line-by-line JSON reader of rows files."""
    copies = re.compile(r"os\.fsync\(|import fcntl|\.flock\(|json\.loads\(line")
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "evaluation").rglob("*.py"))
        if path != ROOT / "evaluation" / "sweep" / "rows.py"
        and copies.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
