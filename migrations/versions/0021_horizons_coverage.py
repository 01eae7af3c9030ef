"""A solve keeps the generation length it ranked plans for (nullable: older solves ranked the
steady state), and a validation keeps, per plan, its predicted speed-up, the 90% interval of it
and whether the measured one fell inside, with the share that did over its plans (nullable: older
validations predate all three).

Revision ID: 0021_horizons_coverage
Revises: 0020_one_plan_table
Create Date: 2026-11-27 06:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_horizons_coverage"
down_revision = "0020_one_plan_table"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("solves") as batch:
        batch.add_column(sa.Column("max_new_tokens", sa.Integer(), nullable=True))
    with op.batch_alter_table("validation_runs") as batch:
        batch.add_column(sa.Column("predicted_speedup", sa.Float(), nullable=True))
        batch.add_column(sa.Column("predicted_speedup_lo", sa.Float(), nullable=True))
        batch.add_column(sa.Column("predicted_speedup_hi", sa.Float(), nullable=True))
        batch.add_column(sa.Column("covered", sa.Boolean(), nullable=True))
    with op.batch_alter_table("validations") as batch:
        batch.add_column(sa.Column("coverage", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("validations") as batch:
        batch.drop_column("coverage")
    with op.batch_alter_table("validation_runs") as batch:
        batch.drop_column("covered")
        batch.drop_column("predicted_speedup_hi")
        batch.drop_column("predicted_speedup_lo")
        batch.drop_column("predicted_speedup")
    with op.batch_alter_table("solves") as batch:
        batch.drop_column("max_new_tokens")
