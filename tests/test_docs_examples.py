"""Every ```python block of README.md and docs/ runs as written.

The blocks of one page run in order in one namespace (a later block may use an earlier one's
names), in a temporary folder with a database of their own. A block preceded by
``<!-- not run: reason -->`` is skipped (one that loads a packaged model, say); the reason must
be given, and such blocks are kept rare.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hsd_planner.cli.docs import doc_files

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.S)
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>[^>]*\S) -->")


def _blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, reason not run) of every python block of ``path``."""
    text = path.read_text()
    out = []
    for match in BLOCK.finditer("\n" + text):
        skip = NOT_RUN.fullmatch(match["before"].strip())
        line = text[: match.start("code")].count("\n") + 1
        out.append((line, match["code"], skip["reason"] if skip else None))
    return out


PAGES = [p for p in doc_files(ROOT) if _blocks(p)]


def test_the_docs_have_examples_that_run():
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "python-api.md" in PAGES
    skipped = [(p.name, line) for p in PAGES for line, _, reason in _blocks(p) if reason]
    ran = [(p.name, line) for p in PAGES for line, _, reason in _blocks(p) if not reason]
    assert len(skipped) < len(ran), "most examples must run"


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_python_blocks_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HSD_PLAN_DB", str(tmp_path / "docs.db"))
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for line, code, reason in _blocks(path):
        if reason:
            continue
        padded = "\n" * (line - 1) + code  # tracebacks name the page's own line numbers
        exec(compile(padded, str(path.relative_to(ROOT)), "exec"), namespace)
        ran += 1
    assert ran, f"{path.name}: every python block is marked not run"
    assert capsys.readouterr().out.strip(), f"{path.name}: the examples print nothing"
