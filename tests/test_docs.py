"""The README documents every command and option the CLI has."""

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


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


def test_readme_reference_matches_the_help_text():
    from hsd_planner.cli.docs import BEGIN, END, help_reference

    section = README.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert section == help_reference().strip(), "run: python -m hsd_planner.cli.docs README.md"
