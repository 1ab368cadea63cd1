"""The package's shape: no import cycle between modules or folders (lazy imports inside functions
included), and no oversized module.

A cycle hidden behind a function-level import still couples two modules both ways; a module that
grows past :data:`MAX_LINES` lines is a sign that it holds more than one concept.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: top-level folders mapped into ``residual_quad.*`` (setup.py) and the root package
SUBPACKAGES = ("envs", "controllers", "training", "evaluation", "configs")
PACKAGE_DIRS = {
    "residual_quad": ROOT / "src" / "residual_quad",
    **{f"residual_quad.{n}": ROOT / n for n in SUBPACKAGES},
}
MAX_LINES = 600
#: modules allowed past MAX_LINES because they hold one concept (path: why)
ONE_CONCEPT = {
    "controllers/prioritized/hlsp.py": "the HLSP solver: one problem, its numpy cascade and the"
    " daqp backend that polishes through it",
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, base in PACKAGE_DIRS.items():
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "residual_quad" and parts and parts[0] in SUBPACKAGES:
                continue
            mods[name] = path
    return mods


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(p, m, known) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_of(module: str, graph: dict[str, set[str]]) -> str:
    """The folder (package) a module lives in: itself for a package ``__init__``."""
    return module if any(m.startswith(module + ".") for m in graph) else module.rpartition(".")[0]


def test_no_module_import_cycle():
    graph = _graph()
    # a package's __init__ re-exporting its own submodules is not a cycle between concepts
    pruned = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    assert _cycles(pruned) == []


def test_no_folder_import_cycle():
    graph = _graph()
    folders: dict[str, set[str]] = {}
    for m, deps in graph.items():
        pm = _package_of(m, graph)
        for d in deps:
            pd = _package_of(d, graph)
            if pd != pm and not pd.startswith(pm + ".") and not pm.startswith(pd + "."):
                folders.setdefault(pm, set()).add(pd)
    assert _cycles(folders) == []


def test_no_module_over_the_size_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules().values()}
    big = {path: n for path, n in sizes.items() if n > MAX_LINES and path not in ONE_CONCEPT}
    assert big == {}
    assert set(ONE_CONCEPT) <= set(sizes)  # the allow-list names real files
