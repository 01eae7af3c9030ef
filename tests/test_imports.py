"""Who may import what, read from the source: the store alone speaks SQL."""

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
