"""The generated parts of the documentation: every command's ``--help`` and option table, from click.

Marked blocks in README.md and ``docs/**/*.md`` are regenerated in place, so they cannot drift:

- ``<!-- options: hsd-plan CMD -->`` above a table ``| option | default | meaning |``: one row per
  option of ``CMD``, its default and its help text;
- ``<!-- help: hsd-plan CMD -->`` above a fenced block: the ``--help`` text of ``CMD``;
- ``<!-- families -->`` above a table: the ``hsd-plan demo`` families and their budgets;
- ``<!-- reference: begin -->`` ... ``<!-- reference: end -->``: every command's ``--help``.

``python -m hsd_planner.cli.docs`` rewrites every file that is out of date (run it in the
repository root; name files to rewrite only those); ``--check`` changes nothing and exits 1,
naming the stale files. A test runs the check.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

__all__ = [
    "BEGIN",
    "END",
    "command_path",
    "commands",
    "doc_files",
    "families_table",
    "help_reference",
    "help_text",
    "option_table",
    "render",
    "stale_files",
    "update_files",
    "update_readme",
]

BEGIN, END = "<!-- reference: begin -->", "<!-- reference: end -->"
WIDTH = 100  # columns of the --help text

_OPTIONS = re.compile(r"(<!-- options: hsd-plan (?P<command>[a-z -]+?) -->\n)(?:\|.*\|\n)*")
_HELP = re.compile(r"(<!-- help: hsd-plan (?P<command>[a-z -]+?) -->\n)(?:```\n.*?\n```\n)?", re.S)
_FAMILIES = re.compile(r"(<!-- families -->\n)(?:\|.*\|\n)*")
_REFERENCE = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
_DEFAULT_HINT = re.compile(r"\s*\[(?:env (?P<env>[A-Z_]+); )?default:? (?P<value>[^\]]*)\]")


def _leaves(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, (*prefix, name))
        else:
            yield (*prefix, name), cmd


def commands() -> dict[str, click.Command]:
    """Every runnable command by its path (``"profiles show"``), in order."""
    from . import cli

    return {" ".join(path): cmd for path, cmd in _leaves(cli)}


def command_path(name: str) -> list[str]:
    """``"heads train"`` -> ``["heads", "train"]``, refusing a command that does not exist."""
    if name not in commands():
        raise click.ClickException(f"a docs marker names hsd-plan {name}, which is not a command")
    return name.split(" ")


def help_text(name: str) -> str:
    """The ``--help`` of ``hsd-plan NAME``, 100 columns wide."""
    from . import cli

    result = CliRunner().invoke(cli, [*command_path(name), "--help"], prog_name="hsd-plan", terminal_width=WIDTH)
    return result.output.rstrip()


def help_reference() -> str:
    """Markdown with the ``--help`` text of every command."""
    return "\n\n".join(f"### `hsd-plan {name} --help`\n\n```\n{help_text(name)}\n```" for name in commands())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(command: click.Command, param: click.Parameter) -> str:
    """The default column: ``required``, ``on``/``off`` for a flag, the value, or the help's words."""
    if param.required:
        return "required"
    default = param.get_default(click.Context(command), call=False)
    if isinstance(param, click.Option) and param.is_flag:
        return "on" if default else "off"
    if isinstance(param, click.Option) and isinstance(param.show_default, str):
        return param.show_default
    hint = _DEFAULT_HINT.search(getattr(param, "help", None) or "")
    if hint:
        return f"`${hint['env']}`, else {hint['value']}" if hint["env"] else hint["value"]
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)) if default else "none"
    if isinstance(default, (str, int, float)) and default != "":
        return str(default)
    return "none"  # None, or click's marker of an option left out


def _meaning(param: click.Parameter) -> str:
    """The help text without its default hint, with the choices where the help does not list them."""
    text = _DEFAULT_HINT.sub("", getattr(param, "help", None) or "").strip()
    kind = param.type
    if isinstance(kind, click.Choice):
        choices = ", ".join(f"`{c}`" for c in kind.choices)
        text = f"{text} One of {choices}." if text else f"One of {choices}."
    elif not text and isinstance(param, click.Argument):
        text = "Positional argument."
    elif not text:
        text = f"{kind.name}: {kind._describe_range()}" if isinstance(kind, (click.IntRange, click.FloatRange)) else kind.name
    return _cell(text)


def _names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return f"`{param.human_readable_name}`"
    long = [o for o in param.opts if o.startswith("--")] or param.opts
    names = "/".join([*long, *param.secondary_opts])
    return f"`{names}`"


def option_table(name: str) -> str:
    """``| option | default | meaning |`` with one row per parameter of ``hsd-plan NAME`` (``--help`` left out)."""
    command = commands()[" ".join(command_path(name))]
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for param in command.params:
        if "--help" in param.opts:
            continue
        rows.append(f"| {_names(param)} | {_cell(_default(command, param))} | {_meaning(param)} |")
    return "\n".join(rows)


def families_table() -> str:
    """The ``hsd-plan demo`` families: candidates, workload and budget, each the CLI's default for that family."""
    from ..demo import FAMILIES

    rows = [
        "| `--family` | candidates (target last) | prompts | profiling / held-out prompts | new tokens | rounds | repeats | on `--engine llamacpp` |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in FAMILIES.items():
        rows.append(
            f"| `{name}` | `{f.models}` | {f.prompts or 'the built-in set'} | {f.max_prompts} / {f.validate_prompts} | "
            f"{f.max_new_tokens} | {f.rounds} | {f.repeats} | `{f.llamacpp_models}` |"
        )
    return "\n".join(rows)


def render(text: str) -> str:
    """``text`` with every marked block regenerated."""
    text = _OPTIONS.sub(lambda m: f"{m[1]}{option_table(m['command'])}\n", text)
    text = _HELP.sub(lambda m: f"{m[1]}```\n{help_text(m['command'])}\n```\n", text)
    text = _FAMILIES.sub(lambda m: f"{m[1]}{families_table()}\n", text)
    return _REFERENCE.sub(lambda _: f"{BEGIN}\n\n{help_reference()}\n\n{END}", text)


def doc_files(root: Path) -> list[Path]:
    """README.md and every Markdown page under ``docs/``."""
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def stale_files(files: list[Path]) -> list[Path]:
    """The files whose generated blocks differ from what the CLI says now."""
    return [p for p in files if render(p.read_text()) != p.read_text()]


def update_files(files: list[Path]) -> list[Path]:
    """Regenerate the blocks of ``files``; return the ones that changed."""
    changed = stale_files(files)
    for path in changed:
        path.write_text(render(path.read_text()))
    return changed


def update_readme(path: Path) -> None:
    """Regenerate one file's blocks."""
    update_files([path])


USAGE = """usage: python -m hsd_planner.cli.docs [--check] [FILE ...]

Regenerate the blocks generated from the command line in README.md and docs/ (or in the FILEs
given); --check only names the files that are out of date, exiting 1 if any is."""


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(USAGE)
        return 0
    flags = [a for a in argv if a.startswith("-") and a != "--check"]
    if flags:
        print(f"unknown option {flags[0]}\n{USAGE}", file=sys.stderr)
        return 2
    check = "--check" in argv
    names = [a for a in argv if a != "--check"]
    files = [Path(n) for n in names] if names else doc_files(Path.cwd())
    if not files:
        print("no README.md or docs/ here: run this in the repository root", file=sys.stderr)
        return 1
    if check:
        stale = stale_files(files)
        for path in stale:
            print(f"out of date: {path} (run: python -m hsd_planner.cli.docs)", file=sys.stderr)
        return 1 if stale else 0
    for path in update_files(files):
        print(f"regenerated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
