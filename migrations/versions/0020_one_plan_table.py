"""One plan table: a plan carries the batch size it was solved for (existing plans are b = 1), and
the best chain of a solve per batch size (its schedule) moves from ``batch_plans`` into ``plans``
as rows of kind ``schedule``, rank 0.

Revision ID: 0020_one_plan_table
Revises: 0019_host_ms
Create Date: 2026-11-27 03:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_one_plan_table"
down_revision = "0019_host_ms"
branch_labels = None
depends_on = None

PREDICTION = "chain, widths, predicted_ms_per_token, predicted_mean_accepted_length, predicted_speedup"


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("batch_size", sa.Integer(), server_default="1", nullable=False))
    op.execute(
        f"INSERT INTO plans (solve_id, batch_size, rank, kind, {PREDICTION}) "
        f"SELECT solve_id, batch_size, 0, 'schedule', {PREDICTION} FROM batch_plans ORDER BY solve_id, batch_size"
    )
    with op.batch_alter_table("batch_plans") as batch:
        batch.drop_index(batch.f("ix_batch_plans_solve_id"))
    op.drop_table("batch_plans")


def downgrade() -> None:
    op.create_table(
        "batch_plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("solve_id", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("chain", sa.JSON(), nullable=False),
        sa.Column("widths", sa.JSON(), nullable=False),
        sa.Column("predicted_ms_per_token", sa.Float(), nullable=False),
        sa.Column("predicted_mean_accepted_length", sa.Float(), nullable=False),
        sa.Column("predicted_speedup", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["solve_id"], ["solves.id"], name=op.f("fk_batch_plans_solve_id_solves"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_plans")),
        sa.UniqueConstraint("solve_id", "batch_size", name=op.f("uq_batch_plans_solve_id_batch_size")),
    )
    with op.batch_alter_table("batch_plans") as batch:
        batch.create_index(batch.f("ix_batch_plans_solve_id"), ["solve_id"], unique=False)
    op.execute(
        f"INSERT INTO batch_plans (solve_id, batch_size, {PREDICTION}) "
        f"SELECT solve_id, batch_size, {PREDICTION} FROM plans WHERE kind = 'schedule' ORDER BY solve_id, batch_size"
    )
    # a validation run of a schedule's plan keeps its row, without the plan (as ON DELETE SET NULL
    # would, whether or not the database enforces foreign keys)
    op.execute("UPDATE validation_runs SET plan_id = NULL WHERE plan_id IN (SELECT id FROM plans WHERE kind = 'schedule')")
    op.execute("DELETE FROM plans WHERE kind = 'schedule'")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("batch_size")
