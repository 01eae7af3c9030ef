"""Alembic environment: runs on the connection hsd-plan hands over, or on the configured URL."""

from alembic import context
from sqlalchemy import create_engine

from hsd_planner.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    # batch mode (copy-and-move tables) is SQLite's way to alter a table; a server alters in place
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    with create_engine(config.get_main_option("sqlalchemy.url")).connect() as conn:
        _run(conn)
