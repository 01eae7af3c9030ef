"""The README documents every command and option the CLI has."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
COMMANDS = sorted(cli.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_with_an_example(name):
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_command_and_its_options_are_in_the_readme(name):
    assert f"hsd-plan {name}" in README
    for param in cli.commands[name].params:
        for opt in param.opts:
            if opt.startswith("--") and opt != "--help":
                assert opt in README, f"{opt} of hsd-plan {name} is missing from README.md"
