"""``python -m hsd_planner`` runs the ``hsd-plan`` command line."""

from .cli import cli

cli(prog_name="hsd-plan")
