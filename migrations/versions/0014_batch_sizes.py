"""Batch sizes: c(n, b) latency rows (existing rows are b = 1, the key gains the batch size), the
best chain of a solve per batch size, and the batch size of each validation run.

Revision ID: 0014_batch_sizes
Revises: 0013_server_widths
Create Date: 2026-11-23 10:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0014_batch_sizes"
down_revision = "0013_server_widths"
branch_labels = None
depends_on = None

OLD_KEY = ["model_id", "hardware_id", "dtype", "n_tokens", "context_len"]


def upgrade() -> None:
    with op.batch_alter_table("latency") as batch:
        batch.add_column(sa.Column("batch_size", sa.Integer(), server_default="1", nullable=False))
        batch.drop_constraint("uq_latency_model_id_hardware_id_dtype_n_tokens_context_len", type_="unique")
        batch.create_unique_constraint(
            batch.f("uq_latency_model_id_hardware_id_dtype_n_tokens_context_len_batch_size"), [*OLD_KEY, "batch_size"]
        )
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
    with op.batch_alter_table("validation_runs") as batch:
        batch.add_column(sa.Column("batch_size", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("validation_runs") as batch:
        batch.drop_column("batch_size")
    with op.batch_alter_table("batch_plans") as batch:
        batch.drop_index(batch.f("ix_batch_plans_solve_id"))
    op.drop_table("batch_plans")
    # a latency row of b > 1 has no place in the old key: it would collide with the b = 1 row
    op.execute("DELETE FROM latency WHERE batch_size != 1")
    with op.batch_alter_table("latency") as batch:
        # the name as created: PostgreSQL's 63-character limit shortens it the same way (batch.f)
        batch.drop_constraint(batch.f("uq_latency_model_id_hardware_id_dtype_n_tokens_context_len_batch_size"), type_="unique")
        batch.create_unique_constraint(batch.f("uq_latency_model_id_hardware_id_dtype_n_tokens_context_len"), OLD_KEY)
        batch.drop_column("batch_size")
