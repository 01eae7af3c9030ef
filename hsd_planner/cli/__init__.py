"""The ``hsd-plan`` command line: thin click wrappers over the library, one module per command
(``generate``, ``profile``, ``profiles``, ``solve``, ``export``, ``validate``, ``demo``,
``distill``, ``heads``, ``steer``, ``vocab``). :mod:`.render` holds the shared output: a report
as text or ``--json`` (``emit``), the progress bars, and the text of the reports of generate,
profile, profiles, solve, validate, export and demo; the trainers (:mod:`.distill`, :mod:`.heads`,
:mod:`.steer`), :mod:`.vocab` and the batch schedules (:mod:`.batch`) format their own short text
beside their command. Shared options are declared once (:mod:`.options`, :mod:`.training_options`; their
values parsed by :mod:`.values`, the model loader made by :mod:`.loader`), and :mod:`.docs`
writes the generated option tables and help of docs/.

Every :class:`HSDError` (and a pydantic validation error of typed input) becomes one line
``Error: ...`` on stderr and exit status 1, never a traceback; a malformed option or a command
group without its command exits 2, Ctrl-C 130, each with one line too. A refused command takes
back what it wrote to the model cache (:func:`~hsd_runtime.models.cache.taken_back_on_refusal`).
Imports every other subpackage; nothing imports it.
"""

from __future__ import annotations

import click
from pydantic import ValidationError

from hsd_runtime.models.cache import taken_back_on_refusal

from ..errors import HSDError
from ..store import DatabaseError
from ..store.failures import describe_error
from .demo import demo
from .distill import distill
from .export import export_command
from .generate import generate
from .heads import heads
from .profile import profile
from .profiles import profiles
from .solve import solve_command
from .steer import steer
from .validate import validate
from .vocab import vocab

__all__ = ["cli"]


class _UsageError(click.ClickException):
    """A bad option value or a missing argument: one line, exit status 2 as click gives usage errors."""

    exit_code = 2


class _Interrupted(click.ClickException):
    """Ctrl-C: one line instead of click's bare "Aborted!", exit status 130 as shells give SIGINT."""

    exit_code = 130


class _Group(click.Group):
    """Turns every error a user can act on into one line on stderr (exit status 1; 2 for usage)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            with taken_back_on_refusal():  # a refused command leaves the model cache as it found it
                return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare command group: name its commands, not its whole help
            group = exc.ctx.command if exc.ctx else None
            names = ", ".join(sorted(group.commands)) if isinstance(group, click.Group) else "a command"
            path = exc.ctx.command_path.split(" ", 1)[-1] if exc.ctx else ""
            raise _UsageError(f"hsd-plan {path} needs a command: {names} (see hsd-plan {path} --help)") from None
        except click.UsageError as exc:  # click prints usage and a hint too; one line says it all
            command = f" (see hsd-plan {exc.ctx.command_path.split(' ', 1)[-1]} --help)" if exc.ctx and " " in exc.ctx.command_path else ""
            message = " ".join(exc.format_message().split())  # click lists choices one per line: one line here
            raise _UsageError(message + command) from None
        except HSDError as exc:
            raise click.ClickException(str(exc)) from None
        except DatabaseError as exc:  # a database that failed under us (disk full, locked, dropped, a server gone)
            raise click.ClickException(f"database error: {describe_error(getattr(exc, 'orig', None) or exc)}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            msg = first["msg"].removeprefix("Value error, ")  # a validator's own sentence, as written
            raise click.ClickException(f"{where}: {msg}" if where else msg) from None
        except KeyboardInterrupt:
            raise _Interrupted("interrupted (Ctrl-C)") from None


@click.group(cls=_Group)
@click.version_option(package_name="hsd-plan")
def cli() -> None:
    """Choose, solve and validate hierarchies of speculative-decoding drafters.

    A chain lists models smallest first and the target last, e.g.
    ngram,smollm2-135m:layers=8,smollm2-135m; each level below the target has a proposal
    width T (--widths 4,2).
    """


for _command in (generate, profile, profiles, solve_command, export_command, validate, demo, distill, heads, steer, vocab):
    cli.add_command(_command)
