"""The database migrations and built-in prompts work from a wheel, not only an editable install."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_carries_migrations_and_prompts(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    wheel = next((tmp_path / "dist").glob("hsd_plan-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import hsd_planner, json; from hsd_planner.store import open_db; from hsd_planner.prompts import load_prompts;"
        "from sqlalchemy import inspect; e = open_db(r'%s');"
        "print(json.dumps([hsd_planner.__file__, sorted(inspect(e).get_table_names()), len(load_prompts().prompts)]))"
    ) % (tmp_path / "wheel.db")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    where, tables, prompts = json.loads(out.stdout)
    assert where.startswith(str(site))
    assert {"latency", "acceptance", "plans", "alembic_version"} <= set(tables) and prompts >= 60
