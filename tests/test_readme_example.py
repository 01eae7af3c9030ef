"""The README's Python planner example runs as written."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_planner_example_runs(capsys):
    block = re.search(r"### The planner, without a database.*?```python\n(.*?)```", README, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "big" in out
