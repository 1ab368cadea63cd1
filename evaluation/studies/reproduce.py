"""Re-fly the committed result rows and judge whether they reproduce, here or on another machine.

The committed rows (``docs/results/sweep/rows.jsonl``, the pipeline matrix, and
``docs/stress/rows.jsonl``, the stress study) were flown on one machine. On another, the last bits
of linear algebra differ: OpenBLAS picks its kernels for the processor (``DYNAMIC_ARCH``: SkylakeX,
Haswell, ...), and a closed-loop flight carries such differences along. Most flights damp them
(the drift stays below 1e-11), but a flight through saturations, active-set changes of the
hierarchical solver or a near-crash can amplify one last bit into a visible change.

So every sampled row carries its own measured **sensitivity**: the row is re-flown ``k`` times with
every action entry nudged by at most one unit in the last place (ulp) per control step, drawn from a
seeded generator (:class:`UlpJitter`), and the largest change of each metric is recorded next to
the rows (``sensitivity.json``). A re-flight on other numerics than the rows' (``numerics.json``
beside them) must agree, metric by metric, within ``max(1e-9 relative, FACTOR × spread)``, and its
discrete outcomes (crash flags, termination) must be equal; on the same numerics it must be
bit for bit. A real change of the code (a gain moved by one part in a million) is still caught: see
``tests/evaluation/test_committed_rows.py``.

:func:`kernel_drift` measures the drift directly: it re-flies the sample in subprocesses under
every OpenBLAS kernel family this processor can run (``OPENBLAS_CORETYPE``), and with numpy's own
AVX-512 loops switched off (``NPY_DISABLE_CPU_FEATURES``), without changing the calling
environment. ``rquad repro`` runs all of it (``docs/reproducibility.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, Controller
from residual_quad.numerics import fingerprint

#: where the repository keeps the committed rows (absent in an installed package)
DOCS = Path(__file__).resolve().parents[2] / "docs"
SWEEP_DIR = DOCS / "results" / "sweep"
STRESS_DIR = DOCS / "stress"
REPRO_DIR = DOCS / "results" / "reproducibility"

#: the sampled matrix rows (``run_id``): one per controller, spread over payloads, winds,
#: trajectories and seeds, the RL training seeds included
SWEEP_SAMPLE: tuple[str, ...] = (
    "pid|light|windy|figure8|1",
    "pid_tuned|extra|windy|helix|1",
    "geo|extra|breezy|helix|2",
    "geo_res|heavy|windy|helix|0",
    "geo_rls|extra|windy|helix|0",
    "geo_rls|none|calm|hover|1",
    "geo_rls_tuned|light|breezy|figure8|2",
    "geo_rls_dob|extra|windy|figure8|1",
    "geo_rls_dob_tuned|heavy|windy|hover|0",
    "hnewton_rls|heavy|breezy|figure8|2",
    "ppo|extra|windy|figure8|0",
    "ppo:training_seed=2|none|breezy|helix|1",
    "ppo:training_seed=4|light|calm|figure8|0",
    "ppo_res|heavy|windy|helix|0",
    "ppo_res:training_seed=1|extra|calm|figure8|2",
    "ppo_adapt|heavy|breezy|helix|2",
    "ppo_adapt:training_seed=1|light|breezy|figure8|0",
    "ppo_adapt:training_seed=3|extra|breezy|hover|1",
    "ppo_acc|none|windy|helix|2",
    "ppo_acc:training_seed=3|heavy|calm|figure8|1",
)
#: the sampled stress rows (``run_id`` = label|scenario|seed): each stress group, each hnewton
#: method, a crash and a loss
STRESS_SAMPLE: tuple[str, ...] = (
    "geo|yaw90_helix|0",
    "hnewton|yaw180_hover_heavy_windy|1",
    "hnewton:bfgs|fig8_3x_extra|0",
    "geo_rls|step4m_extra|0",
    "hnewton:gn|gust8_hover|2",
    "hnewton_rls|gust10_helix|1",
    "hnewton:lm|fig8_2x_extra|0",
)
KINDS = ("sweep", "stress")

#: a re-flight on other numerics may differ from the committed metric by this many times the
#: spread measured under one-ulp jitter (chosen from the measured kernel drift, see the docs)
FACTOR = 10.0
#: the floor of every tolerance: 1e-9 relative (plus 1e-12 absolute for values near zero)
REL_FLOOR, ABS_FLOOR = 1e-9, 1e-12
#: jittered re-flights per row when measuring the sensitivity
DEFAULT_JITTER_FLIGHTS = 8
#: OpenBLAS kernel families of x86-64, newest first (a processor runs those it supports)
X86_KERNELS = (
    "SapphireRapids",
    "Cooperlake",
    "SkylakeX",
    "Haswell",
    "Zen",
    "Sandybridge",
    "Nehalem",
    "Core2",
    "Prescott",
)
#: the families :func:`kernel_drift` measures by default: AVX-512, AVX2 (Intel and AMD), AVX, SSE4
DEFAULT_KERNELS = ("SkylakeX", "Haswell", "Zen", "Sandybridge", "Nehalem")
#: numpy's AVX-512 dispatch targets (switched off to emulate an AVX2-only processor)
NPY_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
#: columns never compared (the run's wall-clock time)
UNCOMPARED = frozenset({"wall_time"})


class UlpJitter:
    """A controller whose every action entry is nudged by -1, 0 or +1 ulp (uniformly, seeded).

    It emulates what other floating-point kernels do to a flight — a difference in the last bit of
    the controller's arithmetic at every step — without touching the controller: attributes other
    than ``policy``/``reset`` are the wrapped controller's (e.g. ``last_residual``).
    """

    def __init__(self, inner: Controller, seed: int) -> None:
        self.inner = inner
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)

    @property
    def action_mode(self) -> str:
        return self.inner.action_mode

    def reset(self, seed: int | None = None) -> None:
        self.inner.reset(seed)
        self._rng = np.random.default_rng(self.seed)

    def policy(self, obs: np.ndarray) -> np.ndarray:
        action = np.asarray(self.inner.policy(obs), dtype=float)
        step = self._rng.integers(-1, 2, size=action.shape)
        up, down = np.nextafter(action, np.inf), np.nextafter(action, -np.inf)
        return np.where(step > 0, up, np.where(step < 0, down, action))

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy/unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def jittered(context: ControlContext, *, of: str, jitter_seed: int, **options: Any) -> UlpJitter:
    """Controller factory (import-path spec
    ``residual_quad.evaluation.studies.reproduce:jittered``): the controller of spec ``of`` (with
    ``options``) wrapped in :class:`UlpJitter`."""
    from residual_quad.controllers.specs import parse_spec

    return UlpJitter(parse_spec(of).build(context, **options), jitter_seed)


def _rows_dir(kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown row kind {kind!r}; valid choices: {', '.join(KINDS)}")
    return SWEEP_DIR if kind == "sweep" else STRESS_DIR


def _require_docs(kind: str) -> Path:
    from residual_quad.evaluation.sweep.rows import ROWS_FILE

    path = _rows_dir(kind) / ROWS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"the committed rows {path} are not here: re-flying them needs a clone of the "
            "repository (an installed package ships no rows)"
        )
    return path


def _run_id(row: dict[str, Any]) -> str:
    """A row's ``run_id``; the stress rows were committed before rows had one: the study keys
    them ``label|scenario|seed``, which a re-flown row's ``run_id`` equals."""
    if "run_id" in row:
        return row["run_id"]
    return f"{row['controller']}|{row['scenario']}|{row['seed']}"


def committed_row(kind: str, run_id: str) -> dict[str, Any]:
    """The committed row ``run_id`` of the matrix (``sweep``) or the stress study (``stress``),
    with its ``run_id``."""
    from residual_quad.evaluation.sweep.rows import read_rows

    rows = {_run_id(r): r for r in read_rows(_require_docs(kind))}
    if run_id not in rows:
        raise ValueError(f"no committed {kind} row {run_id!r}")
    return {"run_id": run_id, **rows[run_id]}


def committed_numerics(kind: str) -> dict[str, Any]:
    """The numerics the committed rows were flown with (``numerics.json`` beside them)."""
    return json.loads((_rows_dir(kind) / "numerics.json").read_text())


def same_numerics(kind: str, *, processor: bool = True) -> bool:
    """Whether this installation computes with the numerics the committed rows were made with
    (``processor=False``: the same kernels, SIMD targets and versions on any processor)."""
    here, there = fingerprint(), committed_numerics(kind)
    if not processor:
        here, there = ({k: v for k, v in f.items() if k != "cpu"} for f in (here, there))
    return here == there


def refly(kind: str, run_id: str, *, jitter_seed: int | None = None, **options: Any) -> dict:
    """Re-fly one committed row with the current code (optionally with :class:`UlpJitter`) and
    return its row; ``options`` override the controller's (e.g. ``kp=20.00002`` to make a real
    change)."""
    from residual_quad import configs
    from residual_quad.episode import RunSpec
    from residual_quad.evaluation.studies.stress import StressConfig, run_stress
    from residual_quad.evaluation.sweep.config import SweepConfig
    from residual_quad.evaluation.sweep.engine import run_batch

    _require_docs(kind)
    if kind == "sweep":
        controller, payload, wind, trajectory, seed = run_id.split("|")
        entry = _entry(controller, jitter_seed, options)
        # the committed matrix was flown with the pipeline-trained residual weights, which are the
        # shipped default weights bit for bit; every other setting is the shipped sweep config
        cfg = configs.load(SweepConfig, {"controllers": [entry], "episode_s": 20.0})
        # on the vector backend, as the pipeline flew it: the local backend agrees with it to
        # ≤ 1e-9, and bit for bit only on some processors (measured: not on an Emerald Rapids)
        spec = RunSpec(controller, payload, wind, trajectory, int(seed))
        (row,) = run_batch([spec], cfg, [None])
        return row
    label, scenario, seed = run_id.split("|")
    full = configs.load(StressConfig, STRESS_DIR / "stress_config.yaml")
    cfg = configs.load(
        StressConfig,
        {
            **configs.to_dict(full),
            "controllers": [_entry(label, jitter_seed, options)],
            "seeds": [int(seed)],
            "scenarios": [configs.to_dict(s) for s in full.scenarios if s.name == scenario],
        },
    )
    # one flight per run: the committed rows are those flights' bit for bit on their numerics
    (row,), _ = run_stress(cfg, workers=1, backend="local")
    return row


def _entry(label: str, jitter_seed: int | None, options: dict[str, Any]) -> Any:
    """A sweep controller entry flying ``label`` (jittered if asked) under its own label."""
    if jitter_seed is None and not options:
        return label
    if jitter_seed is None:
        return {"spec": label, "label": label, "options": options}
    return {
        "spec": f"{__name__}:jittered",
        "label": label,
        "options": {"of": label, "jitter_seed": int(jitter_seed), **options},
    }


def _is_metric(value: Any) -> bool:
    return isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))


def measure_sensitivity(
    kind: str,
    run_id: str,
    flights: int = DEFAULT_JITTER_FLIGHTS,
    clean: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The spread of every numeric metric of one row under one-ulp jitter: for each metric the
    largest ``|jittered - clean|`` over ``flights`` jitter seeds (``None`` where a metric is
    undefined in some flight), and the discrete columns that changed (crash flags, termination)."""
    if flights < 1:
        raise ValueError(f"flights must be ≥ 1, got {flights}")
    base = clean if clean is not None else refly(kind, run_id)
    spread: dict[str, float | None] = {
        k: 0.0 for k, v in base.items() if k not in UNCOMPARED and (_is_metric(v) or v is None)
    }
    flipped: set[str] = set()
    for seed in range(1, flights + 1):
        row = refly(kind, run_id, jitter_seed=seed)
        for key, ref in base.items():
            if key in UNCOMPARED:
                continue
            value = row.get(key)
            if key in spread:
                if ref is None or value is None:
                    if (ref is None) != (value is None):
                        spread[key] = None
                    continue
                if spread[key] is not None:
                    spread[key] = max(spread[key], abs(float(value) - float(ref)))
            elif value != ref:
                flipped.add(key)
    return {"flights": flights, "spread": spread, "flipped": sorted(flipped)}


def tolerance(value: float, spread: float | None) -> float:
    """The allowed absolute difference of a metric re-flown on other numerics."""
    floor = REL_FLOOR * abs(value) + ABS_FLOOR
    return max(floor, FACTOR * spread) if spread is not None else floor


def compare(
    row: dict[str, Any],
    committed: dict[str, Any],
    sensitivity: dict[str, Any] | None,
    exact: bool,
) -> list[str]:
    """The mismatches of a re-flown row against its committed row (empty: it reproduces).

    ``exact``: bit for bit (same numerics). Otherwise numeric metrics within :func:`tolerance` of
    their measured spread and everything else equal.
    """
    a = {k: v for k, v in row.items() if k not in UNCOMPARED}
    b = {k: v for k, v in committed.items() if k not in UNCOMPARED}
    if a.keys() != b.keys():
        return [f"columns differ: {sorted(a.keys() ^ b.keys())}"]
    spread = (sensitivity or {}).get("spread", {})
    out = []
    for key, ref in b.items():
        value = a[key]
        if exact or not (_is_metric(ref) and _is_metric(value)):
            if value != ref:
                out.append(f"{key}: {value!r} != committed {ref!r}")
            continue
        tol = tolerance(float(ref), spread.get(key, 0.0))
        diff = abs(float(value) - float(ref))
        if not diff <= tol:
            out.append(f"{key}: {value!r} differs from committed {ref!r} by {diff:.3g} > {tol:.3g}")
    return out


def sample(kind: str) -> tuple[str, ...]:
    """The sampled ``run_id``s of a row kind."""
    _rows_dir(kind)
    return SWEEP_SAMPLE if kind == "sweep" else STRESS_SAMPLE


def read_sensitivity(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The committed sensitivity of the sampled rows: ``{"kind|run_id": measure_sensitivity()}``."""
    path = path or REPRO_DIR / "sensitivity.json"
    return json.loads(path.read_text())["rows"]


def write_sensitivity(
    out: Path,
    flights: int = DEFAULT_JITTER_FLIGHTS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure the sensitivity of every sampled row and write ``out/sensitivity.json``."""
    rows: dict[str, Any] = {}
    for kind in KINDS:
        for run_id in sample(kind):
            if progress is not None:
                progress(f"{kind} {run_id}")
            rows[f"{kind}|{run_id}"] = measure_sensitivity(kind, run_id, flights)
    doc = {
        "what": "largest |jittered - clean| per metric over one-ulp action jitter flights",
        "numerics": fingerprint(),
        "factor": FACTOR,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "sensitivity.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


@dataclass
class DriftResult:
    """One sampled row re-flown under one numerics variant."""

    variant: str
    key: str  # kind|run_id
    max_rel: float  # largest relative metric difference to the committed row (0: bit for bit)
    worst: str  # the metric that moved most
    tolerance_used: float  # largest |difference| / tolerance over the metrics (≤ 1: within)
    mismatches: list[str]  # against the sensitivity tolerance (empty: it reproduces)


def _fly_sample_json() -> None:
    """Subprocess entry: fly the whole sample here and print the rows as one JSON line."""
    out = {f"{k}|{r}": refly(k, r) for k in KINDS for r in sample(k)}
    out["__numerics__"] = fingerprint()
    print(json.dumps(out))


def fly_sample_under(
    env_extra: dict[str, str], timeout_s: float = 900.0
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Fly the sample in a subprocess whose environment adds ``env_extra`` (e.g.
    ``OPENBLAS_CORETYPE``); returns its numerics fingerprint and its rows by ``kind|run_id``. The
    calling process's environment is not changed. A failing subprocess raises
    :class:`subprocess.CalledProcessError` with its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_extra)
    code = f"import {__name__} as r; r._fly_sample_json()"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows.pop("__numerics__"), rows


def variants(kernels: Iterable[str] = DEFAULT_KERNELS) -> dict[str, dict[str, str]]:
    """Environment variants to measure: each OpenBLAS kernel family, and the default kernel with
    numpy's AVX-512 loops off (what an AVX2-only processor runs)."""
    out = {f"OPENBLAS_CORETYPE={k}": {"OPENBLAS_CORETYPE": k} for k in kernels}
    out["NPY_DISABLE_CPU_FEATURES (AVX2 numpy)"] = {"NPY_DISABLE_CPU_FEATURES": NPY_AVX512}
    out["Haswell kernels + AVX2 numpy"] = {
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": NPY_AVX512,
    }
    return out


def kernel_drift(
    kernels: Iterable[str] = DEFAULT_KERNELS,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    """Re-fly the sample under every numerics variant (one subprocess each) and compare each row
    with its committed row: the largest relative difference and the verdict of :func:`compare`.

    A variant this processor or OpenBLAS build cannot run is reported as such (its kernel name as
    reported by OpenBLAS differs from the one asked for)."""
    sens = read_sensitivity()
    committed = {f"{k}|{r}": committed_row(k, r) for k in KINDS for r in sample(k)}
    report: dict[str, Any] = {"here": fingerprint(), "variants": {}}
    for name, extra in variants(kernels).items():
        if progress is not None:
            progress(name)
        try:
            numerics, flown = fly_sample_under(extra, timeout_s)
        except subprocess.CalledProcessError as exc:
            report["variants"][name] = {"error": (exc.stderr or "").strip().splitlines()[-1:]}
            continue
        asked = extra.get("OPENBLAS_CORETYPE")
        if asked is not None and numerics["blas_core"].lower() != asked.lower():
            report["variants"][name] = {"ran": numerics["blas_core"], "skipped": "not available"}
            continue
        results = []
        for key, row in flown.items():
            kind = key.split("|", 1)[0]
            ref = committed[key]
            exact = numerics == committed_numerics(kind)
            results.append(_drift(name, key, row, ref, sens.get(key), exact))
        report["variants"][name] = {
            "ran": numerics["blas_core"],
            "rows": [r.__dict__ for r in results],
        }
    return report


def _drift(
    variant: str, key: str, row: dict, ref: dict, sens: dict | None, exact: bool
) -> DriftResult:
    worst, max_rel, used = "", 0.0, 0.0
    spread = (sens or {}).get("spread", {})
    for metric, value in ref.items():
        if metric in UNCOMPARED or not (_is_metric(value) and _is_metric(row.get(metric))):
            continue
        diff = abs(float(row[metric]) - float(value))
        rel = diff / max(abs(float(value)), 1e-300)
        used = max(used, diff / tolerance(float(value), spread.get(metric, 0.0)))
        if rel > max_rel:
            worst, max_rel = metric, rel
    return DriftResult(variant, key, max_rel, worst, used, compare(row, ref, sens, exact))


def drift_markdown(report: dict[str, Any]) -> str:
    """The drift report as a Markdown table: one row per variant."""
    lines = [
        "| variant | kernel that ran | bit for bit | largest relative drift (row, metric) "
        "| most of a tolerance used | outside the tolerance |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in report["variants"].items():
        if "rows" not in v:
            why = v.get("skipped", v.get("error"))
            lines.append(f"| {name} | {v.get('ran', '–')} | – | {why} | – | – |")
            continue
        rows = v["rows"]
        exact = sum(r["max_rel"] == 0.0 for r in rows)
        top = max(rows, key=lambda r: r["max_rel"])
        bad = [r["key"] for r in rows if r["mismatches"]]
        where = f"{top['max_rel']:.2g} ({top['key']}, {top['worst']})" if top["max_rel"] else "0"
        used = max(r["tolerance_used"] for r in rows)
        lines.append(
            f"| {name} | {v['ran']} | {exact} of {len(rows)} | {where} | {used:.2g} | "
            f"{', '.join(bad) if bad else 'none'} |"
        )
    return "\n".join(lines)
