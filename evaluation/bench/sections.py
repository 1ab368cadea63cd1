"""``rquad bench``: the sections and the run over them.

A section is a module of this package with ``run(quick: bool) -> list[BenchRow]``.
:data:`SECTIONS` maps each section's name to a loader that imports its module when the section
runs: a plain import (the import graph sees it; no ``"module:function"`` strings), and ``rquad``
starting up loads none of the sections' MuJoCo, SB3 or server code. ``rquad bench`` without
``--sections`` runs every section but those in :data:`ON_REQUEST`, which run only when named.
"""

from __future__ import annotations

from collections.abc import Callable

from residual_quad.evaluation.bench.timing import BenchRow

#: a section's measurement: ``run(quick=...)`` → its rows
Runner = Callable[..., list[BenchRow]]


def _plant() -> Runner:
    from residual_quad.evaluation.bench.plant import run

    return run


def _residual() -> Runner:
    from residual_quad.evaluation.bench.residual import run

    return run


def _hlsp() -> Runner:
    from residual_quad.evaluation.bench.hlsp import run

    return run


def _hnewton() -> Runner:
    from residual_quad.evaluation.bench.hnewton import run

    return run


def _controllers() -> Runner:
    from residual_quad.evaluation.bench.batch import run

    return run


def _vector() -> Runner:
    from residual_quad.evaluation.bench.vector import run

    return run


def _remote() -> Runner:
    from residual_quad.evaluation.bench.remote import run

    return run


def _sweep() -> Runner:
    from residual_quad.evaluation.bench.sweep import run

    return run


def _rl() -> Runner:
    from residual_quad.evaluation.bench.rl import run

    return run


def _period() -> Runner:
    from residual_quad.evaluation.bench.period import run

    return run


def _pipeline() -> Runner:
    from residual_quad.evaluation.bench.pipeline import run

    return run


def _evaluation() -> Runner:
    from residual_quad.evaluation.bench.evaluation import run

    return run


def _scaling() -> Runner:
    from residual_quad.evaluation.bench.scaling import run

    return run


#: section name → loader of its ``run``, in the order ``rquad bench`` runs them all
SECTIONS: dict[str, Callable[[], Runner]] = {
    "plant": _plant,
    "residual": _residual,
    "hlsp": _hlsp,
    "hnewton": _hnewton,
    "controllers": _controllers,
    "vector": _vector,
    "remote": _remote,
    "sweep": _sweep,
    "rl": _rl,
    "period": _period,
    "pipeline": _pipeline,
    "evaluation": _evaluation,
    "scaling": _scaling,
}

#: sections that run only when named in ``--sections``: ``scaling`` sweeps the matrix at every
#: worker count (minutes, more on more cores), ``evaluation`` flies a batch per matrix row
ON_REQUEST: frozenset[str] = frozenset({"scaling", "evaluation"})


def run_bench(sections: list[str] | None = None, quick: bool = False) -> list[BenchRow]:
    """Run the named sections (by default all but :data:`ON_REQUEST`) and return their rows."""
    names = sections or [n for n in SECTIONS if n not in ON_REQUEST]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown bench section(s) {unknown}; valid: {sorted(SECTIONS)}")
    rows: list[BenchRow] = []
    for name in names:
        rows.extend(SECTIONS[name]()(quick=quick))
    return rows
