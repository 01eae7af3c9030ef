"""The README's command reference: every command's ``--help``, generated so it cannot drift.

``python -m hsd_planner.cli.docs README.md`` rewrites the section; a test checks it is current.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.testing import CliRunner

__all__ = ["help_reference", "update_readme"]

BEGIN, END = "<!-- reference: begin -->", "<!-- reference: end -->"


def _leaves(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        out += _leaves(cmd, prefix + (name,)) if isinstance(cmd, click.Group) else [prefix + (name,)]
    return out


def help_reference() -> str:
    """Markdown with the ``--help`` text of every command, 100 columns wide."""
    from . import cli

    parts = []
    for path in _leaves(cli):
        text = CliRunner().invoke(cli, [*path, "--help"], prog_name="hsd-plan", terminal_width=100).output.rstrip()
        parts.append(f"### `hsd-plan {' '.join(path)} --help`\n\n```\n{text}\n```")
    return "\n\n".join(parts)


def update_readme(path: Path) -> None:
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n\n{help_reference()}\n\n{END}{tail}")


if __name__ == "__main__":
    update_readme(Path(sys.argv[1] if len(sys.argv) > 1 else "README.md"))
