"""``hsd-plan profiles show|export|import``: what the database holds, as text or versioned JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..store import check_db, open_db
from ..store.exchange import check_export_path, document_rows, export_document, import_document, read_document, write_document
from ..store.machines import hardware_ids
from .options import FORCE_HELP, db_option, json_option
from .render import Bars, format_profiles

__all__ = ["profiles"]


@click.group()
def profiles() -> None:
    """Show, export and import the profiling database."""


@profiles.command("show")
@db_option
@json_option
def profiles_show(db_url: str | None, as_json: bool) -> None:
    """Show what the database holds: every machine's latency (each with the id that
    hsd-plan solve --hardware takes), the workloads, the models and the acceptance pairs.

    Example:

        hsd-plan profiles show --json

        hsd-plan profiles show --db postgresql://ann@db.lan/team
    """
    db = open_db(db_url, create=False)
    doc = export_document(db)
    click.echo(doc.model_dump_json() if as_json else format_profiles(doc, hardware_ids(db)))


@profiles.command("export")
@click.argument("file")
@click.option("--force", is_flag=True, help=FORCE_HELP.replace("--out file", "export"))
@db_option
@json_option
def profiles_export(file: str, force: bool, db_url: str | None, as_json: bool) -> None:
    """Write the whole database to FILE as versioned JSON.

    The file is written atomically; an existing export is replaced only with --force, and an
    SQLite file (the database itself above all) never. From a PostgreSQL server to a file, and
    with import into SQLite, profiles move between the two unchanged.

    Example:

        hsd-plan profiles export my-machine.json

        hsd-plan profiles export team.json --db postgresql://ann@db.lan/team
    """
    url = check_db(db_url, create=False)
    database = url.database if url.get_backend_name() == "sqlite" else None  # a server's database is no file here
    target = check_export_path(file, database, force)  # refused before the database is read
    doc = export_document(open_db(db_url, create=False))
    write_document(doc, target)
    if as_json:
        rows = {name: len(getattr(doc, name)) for name in type(doc).model_fields if name != "schema_version"}
        click.echo(json.dumps({"file": file, "exported": rows}))
        return
    click.echo(f"exported {len(doc.latency)} latency points and {len(doc.acceptance)} acceptance pairs to {file}")


@profiles.command("import")
@click.argument("file")
@db_option
@json_option
def profiles_import(file: str, db_url: str | None, as_json: bool) -> None:
    """Merge an exported FILE into the database (rows already present are skipped).

    Example:

        hsd-plan profiles import my-machine.json --db team.db

        hsd-plan profiles import my-machine.json --db postgresql://ann@db.lan/team
    """
    doc = read_document(Path(file), "FILE")  # checked whole before the database is even opened
    db = open_db(db_url)
    bars = Bars(enabled=not as_json)
    bars.start("importing", document_rows(doc))
    try:
        added = import_document(db, doc, progress=bars.step)
    finally:
        bars.close()
    click.echo(json.dumps(added) if as_json else "imported: " + ", ".join(f"{v} {k}" for k, v in added.items()))
