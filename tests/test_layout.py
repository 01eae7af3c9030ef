"""The package layout keeps its promises: a pure planner, documented rooms, stable JSON keys."""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import hsd_planner
from hsd_planner.plan import Plan, Prediction
from hsd_planner.solving import SolveReport
from hsd_planner.store import migrations_dir
from hsd_planner.store.records import RankedPlan
from hsd_planner.validation import LevelResult, PlanResult, ValidationReport

ROOT = Path(__file__).resolve().parents[1]


def test_the_planner_imports_neither_torch_nor_the_database():
    code = "import sys, hsd_planner.plan, hsd_planner; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sqlalchemy', 'transformers'))))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_every_subpackage_says_what_it_owns():
    for info in pkgutil.iter_modules(hsd_planner.__path__):
        if info.ispkg and info.name != "migrations":
            module = importlib.import_module(f"hsd_planner.{info.name}")
            assert module.__doc__ and len(module.__doc__.split()) >= 20, f"hsd_planner.{info.name} has no docstring naming its job"


def test_migrations_are_the_top_level_folder_when_installed_from_the_checkout():
    found = migrations_dir()
    assert (found / "env.py").is_file() and len(list((found / "versions").glob("0*.py"))) >= 4
    if Path(hsd_planner.__file__).resolve().is_relative_to(ROOT):  # editable install or source tree
        assert found.resolve() == (ROOT / "migrations").resolve()


def test_json_keys_of_the_design_card():
    plan = RankedPlan(3, 1, "best", Plan(("ngram", "t"), (4,), Prediction(10.0, 2.5, 3.0)))
    solve = SolveReport(1, "t", "w", "hw", "greedy", None, "empirical", 256, [plan]).to_dict()
    assert {"chain", "widths", "predicted_ms_per_token", "predicted_speedup", "plans"} <= set(solve)
    assert solve["chain"] == ["ngram", "t"] and solve["plans"][0]["id"] == 3
    levels = [LevelResult("ngram", 5, 20, 10, 0.01), LevelResult("t", 5, 0, 0, 0.2, 3.0, 2.9)]
    auto = PlanResult(4, "autoregressive", Plan(("t",), (), Prediction(30.0, 1.0, 1.0)), 31.0, 1.0, 1.0, 5.0, 64, levels[1:])
    best = PlanResult(3, "best", Plan(("ngram", "t"), (4,), Prediction(10.0, 2.9, 3.0)), 11.0, 3.0, 31.0 / 11.0, 5.0, 64, levels)
    report = ValidationReport(7, 1, "t", "w", "held", 2, 100, [90, 110], "greedy", "empirical", [best, auto], 3).to_dict()
    first = report["plans"][0]
    assert {
        "chain",
        "widths",
        "predicted_ms_per_token",
        "measured_ms_per_token",
        "predicted_speedup",
        "measured_speedup",
        "tokens",
        "levels",
    } <= set(first)
    assert {"model", "forward_passes", "proposed", "accepted"} <= set(first["levels"][0])
    assert first["error"] == (10.0 - 11.0) / 11.0 and report["regret"] == 0.0 and report["pick"] == 3
    assert Plan(("a", "t"), (2,), Prediction(1.0, 2.0, 3.0)).label == "a[2] -> t"


def test_every_subpackage_is_in_the_wheel():
    """pyproject lists packages by name: a new room left out would be missing from an installed wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for top in ("hsd_planner", "hsd_runtime") for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk <= listed, f"missing from pyproject's packages: {sorted(on_disk - listed)}"


def test_the_qwen_tests_run_as_one_group_on_one_worker(request):
    """Under the test command's ``--dist loadgroup`` every test marked ``xdist_group("qwen")`` is one
    scheduling unit (its id carries ``@qwen``), so one worker holds the Qwen models. Some pytest and
    pytest-xdist pairs drop the option on the workers: both workers then load the models at once."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None or "loadgroup" not in " ".join(request.config.getini("addopts")):
        pytest.skip("not a pytest-xdist worker of the test command (-n 2 --dist loadgroup)")
    grouped = [item for item in request.session.items if any(True for _ in item.iter_markers("xdist_group"))]
    if not grouped:
        pytest.skip("no test of the group was selected")
    assert all(item.nodeid.endswith("@qwen") for item in grouped), [item.nodeid for item in grouped[:3]]
