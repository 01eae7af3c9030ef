"""The README documents every command and option the CLI has, and its option tables match the CLI:
every row names real options of its command, and its default column says what click's default is,
so a changed default fails here until the README says it too."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli
from hsd_planner.demo import FAMILIES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()

# <!-- options: hsd-plan CMD --> right above a table | option | default | meaning |
TABLE = re.compile(
    r"<!-- options: hsd-plan (?P<command>[a-z -]+?) -->\n\| option \| default \| meaning \|\n\|---\|---\|---\|\n(?P<rows>(?:\|.*\|\n)+)"
)
UNDOCUMENTED = {"--help", "--db", "--json"}  # every command's, described once in the README's prose


def _leaves(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            out += _leaves(cmd, prefix + (name,))
        else:
            out.append((prefix + (name,), cmd))
    return out


LEAVES = _leaves(cli)
IDS = [" ".join(path) for path, _ in LEAVES]
COMMANDS = {" ".join(path): command for path, command in LEAVES}


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


def _params(command: click.Command, cell: str) -> list[click.Parameter]:
    """The parameters a row's option cell names (``--a/--no-a`` is one), in order."""
    out: list[click.Parameter] = []
    for name in re.findall(r"--[a-z][a-z0-9-]*", cell):
        param = next((p for p in command.params if name in (*p.opts, *p.secondary_opts)), None)
        assert param is not None, f"{name} is not an option of this command"
        if param not in out:
            out.append(param)
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _family_default(param: click.Parameter, text: str) -> bool:
    """A demo option whose default is its family's: ``qwen 6, smollm2 12``, or one value every family shares."""
    values = {name: getattr(family, param.name or "") for name, family in FAMILIES.items()}
    pairs = dict(part.split(" ", 1) for part in text.split(", ")) if " " in text else None
    if pairs is not None and set(pairs) == set(values):
        return all(_number(pairs[name]) == value for name, value in values.items())
    return len(set(values.values())) == 1 and _number(text) == next(iter(values.values()))


def _default(command: str, param: click.Parameter) -> object:
    """Click's default of ``param`` (None where it has none: an option that may be left out)."""
    default = param.get_default(click.Context(COMMANDS[command]), call=False)
    return default if isinstance(default, (str, int, float, bool, tuple, list)) else None


def _agrees(command: str, param: click.Parameter, text: str) -> bool:
    """Whether the README's default ``text`` says what click's default of ``param`` is."""
    text = text.strip("`")
    if param.required:
        return text in ("required", "(required)")
    default = _default(command, param)
    if isinstance(param, click.Option) and param.is_flag:
        return text == ("on" if default else "off")
    if default in (None, "", ()):
        if command == "demo" and param.name in FAMILIES["qwen"].__dataclass_fields__ and _number(text.split(" ")[-1]) is not None:
            return _family_default(param, text)
        return _number(text) is None and text not in ("on", "off")  # said in words: none, the newest, the built-in set...
    if isinstance(default, (int, float)):
        return _number(text) == default
    return text == str(default)


def _mismatches(text: str) -> list[str]:
    """Every disagreement between the README's option tables and the CLI, one line each."""
    out = []
    for command, rows in _tables(text).items():
        if command not in COMMANDS:
            out.append(f"a table documents hsd-plan {command}, which does not exist")
            continue
        cmd, seen = COMMANDS[command], set()
        for cell, default in rows:
            params = _params(cmd, cell)
            seen.update(params)
            parts = default.split(", ") if len(params) > 1 and ", " in default else [default] * len(params)
            if len(parts) != len(params):
                out.append(f"hsd-plan {command} {cell}: {len(params)} options, {len(parts)} defaults ({default})")
                continue
            for param, part in zip(params, parts):
                if not _agrees(command, param, part):
                    out.append(
                        f"hsd-plan {command} {param.opts[0]}: the README says {part!r}, the CLI's default is {_default(command, param)!r}"
                    )
        missing = [p.opts[0] for p in cmd.params if p not in seen and p.opts and p.opts[0] not in UNDOCUMENTED]
        if missing:
            out.append(f"hsd-plan {command}: {', '.join(missing)} missing from its option table")
    return out


@pytest.mark.parametrize("path, command", LEAVES, ids=IDS)
def test_command_has_help_with_an_example(path, command):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output


@pytest.mark.parametrize("path, command", LEAVES, ids=IDS)
def test_command_and_its_options_are_in_the_readme(path, command):
    assert f"hsd-plan {' '.join(path)}" in README
    for param in command.params:
        for opt in param.opts + param.secondary_opts:
            if opt.startswith("--") and opt != "--help":
                assert opt in README, f"{opt} of hsd-plan {' '.join(path)} is missing from README.md"


def test_readme_option_tables_match_the_cli():
    assert set(_tables(README)) >= {"generate", "profile", "solve", "export", "validate", "demo", "distill"}
    assert _mismatches(README) == []


def test_a_changed_default_fails_the_check(monkeypatch):
    """The check itself: the README's tables against a CLI whose defaults moved."""
    options = {p.name: p for p in COMMANDS["generate"].params}
    monkeypatch.setattr(options["max_new_tokens"], "default", 256)
    monkeypatch.setattr(options["raw"], "default", True)
    monkeypatch.setattr(options["dtype"], "default", "fp32")
    found = _mismatches(README)
    assert len(found) == 3 and all("hsd-plan generate" in line for line in found)
    monkeypatch.setitem(FAMILIES, "qwen", dataclasses.replace(FAMILIES["qwen"], max_prompts=99))
    assert any("hsd-plan demo --max-prompts" in line for line in _mismatches(README))


def test_readme_reference_matches_the_help_text():
    from hsd_planner.cli.docs import BEGIN, END, help_reference

    section = README.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert section == help_reference().strip(), "run: python -m hsd_planner.cli.docs README.md"


@pytest.mark.parametrize("path, command", LEAVES, ids=IDS)
def test_every_command_takes_json(path, command):
    """The README says every command takes --json for machine-readable output."""
    assert any("--json" in p.opts for p in command.params), f"hsd-plan {' '.join(path)} has no --json"


def test_ci_runs_the_readme_test_command():
    """The quick start's test command is the one CI runs (with reporting flags only after it)."""
    quick = README.split("Run the tests", 1)[1]
    command = re.search(r"```bash\n(.+)\n```", quick).group(1).strip()
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    runs = [line.split("#")[0].strip() for line in ci.splitlines() if "pytest" in line and not line.lstrip().startswith("#")]
    assert runs and all(r == command or r.startswith(command + " -") for r in runs), (command, runs)
