"""The package's shape: no import cycle between modules or folders (lazy imports inside functions
included), no oversized module, controllers free of MuJoCo, and one float/array namespace.

A cycle hidden behind a function-level import still couples two modules both ways; a module that
grows past :data:`MAX_LINES` lines is a sign that it holds more than one concept. A controller is
math on observations: importing one must not load the simulator (MuJoCo), so that it runs on a
vehicle or beside another simulator. The formulas written once for one vehicle and a batch take
their operations from the one namespace of :mod:`residual_quad.envs.xp` (:data:`NAMESPACE_MODULE`),
where the bit-equality rules are stated once.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: top-level folders mapped into ``residual_quad.*`` (setup.py) and the root package
SUBPACKAGES = ("envs", "controllers", "training", "evaluation", "configs")
PACKAGE_DIRS = {
    "residual_quad": ROOT / "src" / "residual_quad",
    **{f"residual_quad.{n}": ROOT / n for n in SUBPACKAGES},
}
MAX_LINES = 600
#: the module of the one float/array namespace (``FLOATS``/``ARRAYS``) of the shared formulas
NAMESPACE_MODULE = "residual_quad.envs.xp"
NAMESPACE_CLASSES = ("FLOATS", "ARRAYS")
#: modules allowed past MAX_LINES because they hold one concept (path: why)
ONE_CONCEPT = {
    "controllers/prioritized/hlsp.py": "the HLSP solver: one problem, its numpy cascade and"
    " the daqp backend that polishes through it",
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


#: imports every module named in argv[1] (JSON list) with MuJoCo blocked; prints, as JSON, each
#: module whose import reached MuJoCo and the project files on the import stack at that moment
_IMPORT_WITHOUT_MUJOCO = """
import importlib, importlib.abc, json, sys, traceback

class BlockMujoco(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mujoco" or name.startswith("mujoco."):
            chain = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-1]
                     if "importlib" not in f.filename and "<" not in f.filename]
            raise ImportError("mujoco blocked; imported via " + " -> ".join(chain), name=name)
        return None

sys.meta_path.insert(0, BlockMujoco())
failed = {}
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except ImportError as exc:
        if "mujoco blocked" not in str(exc):
            raise
        failed[module] = str(exc)
print(json.dumps({"failed": failed, "mujoco_loaded": "mujoco" in sys.modules}))
"""


def test_no_controller_imports_mujoco():
    """Every module of ``controllers/`` imports with MuJoCo blocked (directly or through envs
    modules that import the plant), in a fresh interpreter."""
    controllers = sorted(
        m for m in _modules() if m.split(".")[:2] == ["residual_quad", "controllers"]
    )
    assert len(controllers) > 20  # the scan found the folder
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_MUJOCO, json.dumps(controllers)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"failed": {}, "mujoco_loaded": False}


def test_the_mujoco_check_catches_an_import():
    """The blocker of :func:`test_no_controller_imports_mujoco` reports a module that does
    import MuJoCo (the plant), with the chain that reached it."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_MUJOCO, json.dumps(["residual_quad.envs.plant"])],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    failed = json.loads(out.stdout.strip().splitlines()[-1])["failed"]
    assert list(failed) == ["residual_quad.envs.plant"]
    assert "envs/plant.py" in failed["residual_quad.envs.plant"]


def test_one_float_array_namespace():
    """``FLOATS``/``ARRAYS`` are defined once, in :data:`NAMESPACE_MODULE`, and every formula
    that takes an ``xp`` annotates it as that module's ``Namespace`` (not :mod:`math`/numpy
    passed as a module, not a private shim)."""
    defined: dict[str, list[str]] = {}
    untyped: list[str] = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in NAMESPACE_CLASSES:
                defined.setdefault(node.name, []).append(name)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                for arg in args:
                    if arg.arg == "xp" and ast.unparse(arg.annotation or ast.Constant(None)) != (
                        "Namespace"
                    ):
                        untyped.append(f"{name}.{node.name}")
    assert defined == {c: [NAMESPACE_MODULE] for c in NAMESPACE_CLASSES}
    assert untyped == []


def test_no_module_passes_math_or_numpy_as_a_value():
    """A shared formula called with the module :mod:`math` or numpy itself (the conventions the
    namespace replaced) would bypass its rules (``tan`` and the cube through Python floats)."""
    passed: list[str] = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                values = node.args + [k.value for k in node.keywords]
                if any(isinstance(v, ast.Name) and v.id in ("math", "np", "numpy") for v in values):
                    passed.append(f"{name}:{node.lineno}")
    assert passed == []


#: the rooms of ``evaluation/`` and the rooms each may import: the sweep engine stands alone, the
#: report reads sweep rows, studies fly sweeps and write reports, a bench measures anything
EVALUATION = "residual_quad.evaluation"
ROOM_IMPORTS: dict[str, set[str]] = {
    "sweep": set(),
    "report": {"sweep"},
    "studies": {"sweep", "report"},
    "bench": {"sweep", "report", "studies"},
}
#: a dotted path into the package as a string import spells it, ``:function`` for a factory spec
_MODULE_PATH = re.compile(r"(residual_quad(?:\.\w+)+)(:\w+)?")


def _room(module: str) -> str | None:
    """The room of an ``evaluation`` module (``None`` outside it and for the package itself)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == EVALUATION.split(".") and len(parts) > 2 else None


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings or other bare string statements
    (those name modules for the reader; an import by string is always an expression's value)."""
    bare = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def test_evaluation_rooms_import_one_way():
    """Every module of ``evaluation/`` lives in one of :data:`ROOM_IMPORTS`' rooms and imports
    (lazy imports included) only the rooms its room may: the room graph is acyclic, and nothing in
    sweep, report or studies reaches a bench. The package ``__init__`` imports no room, so that
    importing one room never loads another."""
    graph = _graph()
    modules = sorted(m for m in graph if m.startswith(EVALUATION + "."))
    assert {_room(m) for m in modules} == set(ROOM_IMPORTS)  # every module is in a known room
    rooms: dict[str, set[str]] = {room: set() for room in ROOM_IMPORTS}
    wrong: list[str] = []
    for module in modules:
        for dep in graph[module]:
            room, other = _room(module), _room(dep)
            if other is None or other == room:
                continue
            rooms[room].add(other)
            if other not in ROOM_IMPORTS[room]:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []
    assert _cycles(rooms) == []
    assert {d for d in graph[EVALUATION] if _room(d)} == set()


def test_no_string_imports_between_rooms():
    """No module names a module of another ``evaluation`` room in a string (a ``"module:function"``
    registry, ``importlib.import_module``, ``-c`` code): such an import hides a dependency from
    :func:`test_evaluation_rooms_import_one_way`. Nor does an ``evaluation`` module name a
    ``"module:function"`` outside its room (the old bench registry did, for the server's bench,
    which imported the registry back)."""
    modules = _modules()
    known = set(modules)
    named: list[str] = []
    for module, path in modules.items():
        room = _room(module)
        for node in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            for match in _MODULE_PATH.finditer(node.value):
                target, spec = match.group(1), match.group(2)
                while target and target not in known:
                    target = target.rpartition(".")[0]
                other = _room(target)
                if (other and other != room) or (room and spec and other != room):
                    named.append(f"{module}:{node.lineno} names {match.group(0)}")
    assert named == []


#: classes of ``controllers/`` allowed a ``Batch``/``Batched`` name: solvers whose batch
#: *algorithm* differs from the one-vehicle solver's (not a second copy of a law), and the
#: generic loop/group drivers of controllers that are not laws (path: class names)
NAMED_BATCH_SOLVERS: dict[str, tuple[str, ...]] = {
    "controllers/batch.py": ("BatchedController", "BatchedLoop", "BatchedGroups"),
    "controllers/prioritized/box_hlsp.py": ("BatchedBoxHLSP",),
    "controllers/prioritized/thrust_vector.py": (
        "BatchedThrustVectorNewton",
        "BatchedPrioritizedAllocator",
    ),
}
#: the state-plumbing hooks of the retired twin protocol: the driver does this once for every law
PLUMBING = ("_row_state", "_reset_rows", "_forget_rows", "forget_previous_sample", "row_state")


def _controller_classes() -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for path in sorted((ROOT / "controllers").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        out[str(path.relative_to(ROOT))] = classes
    return out


def test_no_batched_twin_of_a_law():
    """A controller is one law run by the one driver (``controllers/driver.py``): no class under
    ``controllers/`` is named ``Batch…``/``Batched…`` except the solvers whose batch algorithm
    differs (:data:`NAMED_BATCH_SOLVERS`), and no class names a twin (``batched``,
    ``from_single``, ``vectorizes``) any more."""
    found = {
        path: sorted(c.name for c in classes if re.match(r"Batch(ed)?[A-Z]", c.name))
        for path, classes in _controller_classes().items()
    }
    extra = {
        path: [n for n in names if n not in NAMED_BATCH_SOLVERS.get(path, ())]
        for path, names in found.items()
    }
    assert {p: n for p, n in extra.items() if n} == {}
    assert all(set(names) <= set(found.get(p, ())) for p, names in NAMED_BATCH_SOLVERS.items())
    twin_attrs = sorted(
        f"{path}:{c.name}.{t.id}"
        for path, classes in _controller_classes().items()
        for c in classes
        for node in c.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name) and t.id in ("batched", "from_single", "single", "not_settings")
    )
    assert twin_attrs == []


def test_state_plumbing_lives_in_the_driver_only():
    """No method of the retired twin protocol (:data:`PLUMBING`) is defined under
    ``controllers/`` outside the driver and the guard of non-law controllers (``base.py``): a
    law declares its state; resets and the restore of a bad row are the driver's."""
    defined = sorted(
        f"{path}:{c.name}.{f.name}"
        for path, classes in _controller_classes().items()
        if path not in ("controllers/driver.py", "controllers/base.py")
        for c in classes
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name in PLUMBING
    )
    assert defined == []


def test_the_twin_check_catches_a_twin():
    """The rule of :func:`test_no_batched_twin_of_a_law` flags a batched copy."""
    tree = ast.parse("class BatchedGeo:\n    batched = None\n")
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    assert [n for n in names if re.match(r"Batch(ed)?[A-Z]", n)] == ["BatchedGeo"]
