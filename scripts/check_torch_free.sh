#!/usr/bin/env bash
# The planner API works without torch: install the project with --no-deps into a fresh virtual
# environment holding only what hsd_planner.plan needs, check that torch is absent, and run the
# README's planner example there.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TMPDIR:-/tmp}/hsd-plan-torch-free"
rm -rf "$venv"
python -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check pydantic networkx numpy
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps .
cd "$venv"  # away from the checkout, so the installed copy is imported
"$venv/bin/python" - "$OLDPWD/README.md" <<'PY'
import importlib.util
import re
import sys
from pathlib import Path

assert importlib.util.find_spec("torch") is None, "torch is installed in the torch-free environment"
from hsd_planner.plan import Profile, predict, solve  # noqa: F401  (the promise itself)

readme = Path(sys.argv[1]).read_text()
block = re.search(r"### The planner, without a database.*?```python\n(.*?)```", readme, re.S).group(1)
exec(compile(block, "README.md", "exec"), {})
assert "torch" not in sys.modules, "importing the planner imported torch"
print("torch-free planner: ok")
PY
rm -rf "$venv"
