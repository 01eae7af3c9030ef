"""Who may import what, read from the source: no import circles, and the store alone speaks SQL."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hsd_planner", "hsd_runtime")


def _modules(*folders: str) -> dict[str, Path]:
    """Dotted module name -> file, for every Python file under ``folders`` of the repository."""
    out = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(name: str, path: Path) -> set[str]:
    """Every module ``path`` imports anywhere (module level, functions, TYPE_CHECKING blocks),
    relative imports resolved against module ``name``; ``from m import x`` names ``m.x`` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return out


def test_imports_are_resolved_relative_to_their_module():
    init = ROOT / "hsd_planner" / "store" / "__init__.py"
    assert {"hsd_planner.store.db", "hsd_planner.errors"} <= _imported("hsd_planner.store", init)
    runner = ROOT / "hsd_planner" / "validation" / "runner.py"
    assert "hsd_planner.store" in _imported("hsd_planner.validation.runner", runner)


def test_only_the_store_imports_sqlalchemy():
    """Every SQL statement lives in hsd_planner.store (its migrations are the store's too): the rest
    of the package, the runtime and the benchmarks call its named functions."""
    offenders = [
        name
        for name, path in _modules(*PACKAGES, "benchmarks").items()
        if not name.startswith("hsd_planner.store") and any(m == "sqlalchemy" or m.startswith("sqlalchemy.") for m in _imported(name, path))
    ]
    assert offenders == [], f"outside hsd_planner.store, these import sqlalchemy: {offenders}"


def _components(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node, each sorted
    (Tarjan's algorithm): every import circle, whatever its length."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def _cycles() -> list[list[str]]:
    """The import circles among the modules of PACKAGES."""
    modules = _modules(*PACKAGES)
    return _components({name: sorted(m for m in _imported(name, path) if m in modules and m != name) for name, path in modules.items()})


def test_no_module_imports_itself_through_others():
    """A circle is cut by the concept the modules share (one module holds it), never by a local
    or TYPE_CHECKING import: those count here too."""
    assert _cycles() == []


def test_a_circle_is_found():
    """The check itself: two modules importing each other make a circle."""
    assert _components({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _components({"a": ["b"], "b": []}) == []
