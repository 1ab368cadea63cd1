"""Every relative Markdown link and every backticked repository path in the docs points to a file
or folder that exists, so a moved or renamed module, test or document cannot leave the docs
pointing at nothing.

Scanned: ``README.md`` and every ``.md`` under ``docs/``. A relative link ``[text](target)``
resolves against the file's folder (``#anchors`` and ``?queries`` dropped; web and mail links
skipped). A backticked path that starts with a top-level folder of the repository
(``tests/…``, ``docs/…``, ``controllers/…``, …) resolves against the repository root; a test
name after ``::`` is not checked, its file is; a pattern (``tests/controllers/test_batch_*``)
must match a file. Fenced code blocks are skipped: they hold commands
and output, not references.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: top-level folders a backticked repository path starts with
TOP = ("tests", "docs", "controllers", "envs", "training", "evaluation", "configs", "src")
#: backticked paths that name something that is not in the repository on purpose → why
ALLOWED: dict[str, str] = {}

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE = re.compile(r"`([^`]+)`")
_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./*-]*)")


def _text(doc: Path) -> str:
    return _FENCE.sub("", doc.read_text(encoding="utf-8"))


def _links(doc: Path) -> list[str]:
    """The relative link targets of ``doc`` that do not exist."""
    missing = []
    for target in _LINK.findall(_text(doc)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a web or mail link, or an anchor in the same file
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (doc.parent / path).exists():
            missing.append(target)
    return missing


def _paths(doc: Path) -> list[str]:
    """The backticked repository paths of ``doc`` that do not exist."""
    missing = []
    for span in _CODE.findall(_text(doc)):
        span = re.sub(r"::\s*\S*", "", span)  # a test name after ``::``
        for path in _PATH.findall(span):
            path = path.rstrip(".")
            if path in ALLOWED or (ROOT / path).exists():
                continue
            if "*" in path and any(ROOT.glob(path)):
                continue  # a pattern: some file matches it
            missing.append(path)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(doc: Path):
    assert _links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_backticked_repository_paths_exist(doc: Path):
    assert _paths(doc) == []


def test_the_scanner_finds_what_it_should(tmp_path: Path):
    """A broken link and a broken path are found; a test name after ``::``, a web link, an anchor
    and a fenced block are not checked."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](doc.md#top) [web](https://example.org/x.md) [anchor](#x) [gone](nowhere.md)\n"
        "`tests/test_docs_links.py::test_whatever` `docs/no_such_file.md` `controllers/`\n"
        "`tests/test_docs_*` `tests/no_such_*.py`\n"
        "```\nsee docs/also_gone.md [fenced](fenced.md)\n```\n",
        encoding="utf-8",
    )
    assert _links(doc) == ["nowhere.md"]
    assert _paths(doc) == ["docs/no_such_file.md", "tests/no_such_*.py"]


def _guaranteed_tests() -> list[tuple[str, str]]:
    """``(test file, test function)`` of every reference in ``docs/guarantees.md``'s test
    column: ``tests/x.py::name``, and ``::name`` for the file named last in the same cell."""
    refs: list[tuple[str, str]] = []
    for line in (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3:
            continue
        current = None
        for ref in _CODE.findall(cells[-2]):
            path, sep, name = ref.partition("::")
            if path.startswith("tests/"):
                current = path
            elif not (path == "" and sep) or current is None:
                continue
            if name:
                refs.append((current, name.split("[")[0]))
    return refs


def test_every_guarantee_names_test_functions_that_exist():
    """A promise of ``docs/guarantees.md`` points at tests that are there: every ``file::name``
    (and ``::name`` after its file) is a ``def`` of that file."""
    refs = _guaranteed_tests()
    assert len(refs) > 200  # the parser reads the table
    missing = sorted(
        f"{path}::{name}"
        for path, name in set(refs)
        if not re.search(rf"def {re.escape(name)}\b", (ROOT / path).read_text(encoding="utf-8"))
    )
    assert missing == []
