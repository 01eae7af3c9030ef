"""The documentation matches the CLI: every generated block (option tables, ``--help`` texts, the demo's
families, the CLI reference) is what ``python -m hsd_planner.cli.docs`` writes now, every command has
a page under docs/commands/ with its table and its help, every relative link resolves, and the option
tables say what click's defaults are, so a changed default fails here until the pages are regenerated.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli
from hsd_planner.cli import docs as gen

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FILES = gen.doc_files(ROOT)
COMMANDS = gen.commands()
NAMES = list(COMMANDS)

# <!-- options: hsd-plan CMD --> right above a table | option | default | meaning |
TABLE = re.compile(
    r"<!-- options: hsd-plan (?P<command>[a-z -]+?) -->\n\| option \| default \| meaning \|\n\|---\|---\|---\|\n(?P<rows>(?:\|.*\|\n)+)"
)
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def _page(name: str) -> Path:
    """The page of ``hsd-plan NAME``: docs/commands/<first word>.md (a group's commands share one)."""
    return ROOT / "docs" / "commands" / f"{name.split(' ')[0]}.md"


def _tables(text: str) -> dict[str, list[tuple[str, str]]]:
    """Per command, the (option cell, default cell) of every row of its option table."""
    tables = {}
    for match in TABLE.finditer(text):
        rows = []
        for line in match["rows"].splitlines():
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows.append((cells[0], cells[1]))
        tables[match["command"]] = rows
    return tables


def _param(command: click.Command, cell: str) -> click.Parameter:
    """The parameter a row's option cell names (``--a/--no-a`` is one; ``FILE`` an argument)."""
    name = cell.strip("`").split("/")[0]
    for p in command.params:
        if name in (*p.opts, *p.secondary_opts) or (isinstance(p, click.Argument) and name == p.human_readable_name):
            return p
    raise AssertionError(f"{name} is not a parameter of this command")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _agrees(command: click.Command, param: click.Parameter, text: str) -> bool:
    """Whether a table's default ``text`` says what click's default of ``param`` is."""
    if param.required:
        return text == "required"
    default = param.get_default(click.Context(command), call=False)
    if isinstance(param, click.Option) and param.is_flag:
        return text == ("on" if default else "off")
    if isinstance(default, bool) or not isinstance(default, (str, int, float, list, tuple)) or default in ("", ()):
        return _number(text) is None and text not in ("on", "off")  # said in words: none, the newest, the family's...
    if isinstance(default, (list, tuple)):
        return text == ",".join(map(str, default))
    if isinstance(default, (int, float)):
        return _number(text) == default
    return text == default


def _mismatches(text: str) -> list[str]:
    """Every disagreement between the option tables in ``text`` and the CLI, one line each."""
    out = []
    for name, rows in _tables(text).items():
        if name not in COMMANDS:
            out.append(f"a table documents hsd-plan {name}, which does not exist")
            continue
        command, seen = COMMANDS[name], set()
        for cell, default in rows:
            param = _param(command, cell)
            seen.add(param.name)
            if not _agrees(command, param, default):
                out.append(f"hsd-plan {name} {cell}: the table says {default!r}, the CLI's default is {param.default!r}")
        missing = [p.name for p in command.params if p.name not in seen and "--help" not in p.opts]
        if missing:
            out.append(f"hsd-plan {name}: {', '.join(map(str, missing))} missing from its option table")
    return out


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_generated_blocks_are_current(path):
    text = path.read_text()
    assert gen.render(text) == text, "run: python -m hsd_planner.cli.docs"


def test_the_generator_covers_readme_and_every_page():
    assert ROOT / "README.md" in FILES and ROOT / "docs" / "cli-reference.md" in FILES
    assert len([p for p in FILES if p.parent.name == "commands"]) >= len({n.split(" ")[0] for n in NAMES})


@pytest.mark.parametrize("name", NAMES)
def test_every_command_has_a_page_with_its_table_and_help(name):
    page = _page(name)
    assert page.is_file(), f"hsd-plan {name} has no page {page.relative_to(ROOT)}"
    text = page.read_text()
    assert f"<!-- options: hsd-plan {name} -->" in text
    assert f"<!-- help: hsd-plan {name} -->" in text
    assert f"docs/commands/{page.name}" in README, f"README's command table does not link {page.name}"


def test_the_reference_holds_every_command():
    reference = (ROOT / "docs" / "cli-reference.md").read_text()
    for name in NAMES:
        assert f"### `hsd-plan {name} --help`" in reference


@pytest.mark.parametrize("name", NAMES)
def test_command_has_help_with_an_example(name):
    result = CliRunner().invoke(cli, [*name.split(" "), "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output


@pytest.mark.parametrize("name", NAMES)
def test_every_command_takes_json(name):
    """The docs say every command takes --json for machine-readable output."""
    assert any("--json" in p.opts for p in COMMANDS[name].params), f"hsd-plan {name} has no --json"


def test_option_tables_match_the_cli():
    tables = {}
    for path in FILES:
        tables.update(_tables(path.read_text()))
    assert set(tables) == set(NAMES)
    assert [line for path in FILES for line in _mismatches(path.read_text())] == []


def test_a_changed_default_fails_the_check(monkeypatch):
    """The check itself: the pages against a CLI whose defaults moved."""
    page = _page("generate").read_text()
    options = {p.name: p for p in COMMANDS["generate"].params}
    monkeypatch.setattr(options["max_new_tokens"], "default", 256)
    monkeypatch.setattr(options["raw"], "default", True)
    monkeypatch.setattr(options["dtype"], "default", "fp32")
    found = _mismatches(page)
    assert len(found) == 3 and all("hsd-plan generate" in line for line in found)
    assert gen.render(page) != page


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_resolve():
    broken = []
    for path in FILES:
        for target in LINK.findall(path.read_text()):
            file, _, anchor = target.partition("#")
            linked = (path.parent / file) if file else path
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_benchmark_pages_name_their_commit_and_date():
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    index = (ROOT / "BENCHMARKS.md").read_text()
    assert pages
    for page in pages:
        assert re.search(r"Measured at commits? [0-9a-f]{7}.*20\d\d-\d\d-\d\d", page.read_text()), page.name
        assert f"docs/benchmarks/{page.name}" in index, f"BENCHMARKS.md does not list {page.name}"


def test_ci_runs_the_readme_test_command():
    """The quick start's test command is the one CI runs (with reporting flags only after it)."""
    quick = README.split("Run the tests", 1)[1]
    command = re.search(r"```bash\n(.+)\n```", quick).group(1).strip()
    ci = (ROOT / ".ci" / "run").read_text()
    runs = [line.split("#")[0].strip() for line in ci.splitlines() if "pytest" in line and not line.lstrip().startswith("#")]
    assert runs and all(r == command or r.startswith(command + " -") for r in runs), (command, runs)
