"""The evaluation matrix: payloads × winds × trajectories × seeds × controllers.

Each run becomes one JSON row appended to ``rows.jsonl`` the moment it finishes (one ``write`` +
``fsync`` of a complete line), so an interrupted sweep — Ctrl-C, a killed worker, a lost node —
loses no finished run, and ``resume=True`` skips every run already in the file — only with the
config the folder was flown with (:func:`check_resume_config`: a run id does not name the
settings, so other settings would mix silently with the rows there). Runs are pure
functions of their spec (seeded env, controllers reset with the seed), so the local process pool and
the Ray backend produce the same rows bit for bit (``wall_time`` aside).

An output folder has one writer at a time: the engine holds an exclusive lock on
``out_dir/.lock`` (``flock``, with the holder's pid in the file) for the sweep's whole life, so a
second sweep, ``--resume`` or stress run on the same folder refuses at once instead of writing
duplicate rows. Readers keep the first complete row of every ``run_id`` all the same.

Tables and figures never fly anything: they only read these rows (and the time series saved for
the showcase runs listed in the config).

The package has one module per concept: :mod:`.config` (the matrix and its expansion into runs),
:mod:`.rows` (the row schema, failure rows, the rows file, its writer and the folder lock) and
:mod:`.engine` (flying runs into rows: backends, vector batches, resume, retrying failed runs).
Every public name is re-exported here: ``from residual_quad.evaluation.sweep import run_sweep``.
"""

from residual_quad.episode import RunSpec
from residual_quad.evaluation.sweep.config import (
    CONFIG_FILE,
    MATRIX_ENV_KEYS,
    RESUME_FREE_KEYS,
    SERIES_KEYS,
    ControllerLabels,
    SweepConfig,
    expand,
    wants_series,
)
from residual_quad.evaluation.sweep.engine import (
    DEFAULT_BACKEND,
    MAX_BATCH,
    SWEEP_BACKENDS,
    check_resume_config,
    run_batch,
    run_one,
    run_rows,
    run_sweep,
    run_sweeps,
    vector_batches,
)
from residual_quad.evaluation.sweep.rows import (
    FAILED_RUNS_EXIT,
    LOCK_FILE,
    ROWS_FILE,
    SERIES_DIR,
    FolderLock,
    RowWriter,
    drop_failed_rows,
    failed_rows,
    failure_row,
    failure_summary,
    finite,
    flown_rows,
    is_failed,
    read_rows,
    result_row,
    series_stem,
)

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_BACKEND",
    "FAILED_RUNS_EXIT",
    "LOCK_FILE",
    "MATRIX_ENV_KEYS",
    "MAX_BATCH",
    "RESUME_FREE_KEYS",
    "ROWS_FILE",
    "SERIES_DIR",
    "SERIES_KEYS",
    "SWEEP_BACKENDS",
    "ControllerLabels",
    "FolderLock",
    "RowWriter",
    "RunSpec",
    "SweepConfig",
    "check_resume_config",
    "drop_failed_rows",
    "expand",
    "failed_rows",
    "failure_row",
    "failure_summary",
    "finite",
    "flown_rows",
    "is_failed",
    "read_rows",
    "result_row",
    "run_batch",
    "run_one",
    "run_rows",
    "run_sweep",
    "run_sweeps",
    "series_stem",
    "vector_batches",
    "wants_series",
]
