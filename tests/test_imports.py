"""Who may import what, read from the source: no import circles, and the store alone speaks SQL."""

from __future__ import annotations

import ast
import subprocess
import sys
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


# the runtime's rooms and the rooms each may import (hsd_runtime/__init__.py says what each holds):
# the vocabulary at the bottom, the engines' models, the engine-neutral core, then the trained
# drafters, and one build module over all of them
ROOMS: dict[str, set[str]] = {
    "terms": set(),
    "models": {"terms"},
    "decoding": {"terms", "models"},
    "learned": {"terms", "models", "decoding"},
    "build": {"terms", "models", "decoding", "learned"},
}


def _room(module: str) -> str | None:
    """The room of a runtime module (``hsd_runtime.decoding.cache`` -> ``decoding``); None for the
    package itself and for modules outside the runtime."""
    parts = module.split(".")
    return parts[1] if parts[0] == "hsd_runtime" and len(parts) > 1 else None


def _arrows_against_the_rooms(imports: dict[str, set[str]]) -> list[str]:
    """Every ``importer -> imported`` pair of runtime modules that the rooms do not allow (the
    package's own ``__init__`` may import every room; no room imports the package back)."""
    bad = []
    for name, targets in sorted(imports.items()):
        room = _room(name)
        if room is None:
            continue
        for target in sorted(targets):
            there = _room(target)
            if target == "hsd_runtime" or (there is not None and there != room and there not in ROOMS[room]):
                bad.append(f"{name} -> {target}")
    return bad


def test_every_runtime_module_lives_in_a_room():
    rooms = {_room(name) for name in _modules("hsd_runtime")} - {None}
    assert rooms == set(ROOMS)


def test_runtime_rooms_import_only_the_rooms_below_them():
    """The decoding core does not know which drafters exist or how a model is built from its spec;
    the vocabulary imports no other room."""
    imports = {name: {m for m in _imported(name, path) if m.startswith("hsd_runtime")} for name, path in _modules("hsd_runtime").items()}
    assert _arrows_against_the_rooms(imports) == []


def test_an_arrow_against_the_rooms_is_found():
    """The check itself: the vocabulary importing an engine, or the core importing a trained
    drafter, are reported; an arrow down is not."""
    imports = {
        "hsd_runtime.terms.spec": {"hsd_runtime.models.loading"},
        "hsd_runtime.decoding.hierarchy": {"hsd_runtime.learned.bpd", "hsd_runtime.terms.spec"},
        "hsd_runtime.learned.bpd": {"hsd_runtime.decoding.cache"},
    }
    assert _arrows_against_the_rooms(imports) == [
        "hsd_runtime.decoding.hierarchy -> hsd_runtime.learned.bpd",
        "hsd_runtime.terms.spec -> hsd_runtime.models.loading",
    ]


def test_the_vocabulary_imports_without_torch():
    """What the planner reads of the runtime loads where torch is not installed."""
    names = sorted(name for name in _modules("hsd_runtime") if _room(name) == "terms")
    code = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n" + "".join(f"import {n}\n" for n in names)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
