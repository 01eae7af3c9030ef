"""A validation keeps, per plan, the bootstrap's own 90% interval of its predicted speed-up
before past validations widened it: the unit a later validation measures this plan's miss in.
Older rows take their stored interval, which was the bootstrap's own unless ten or more plans
had been validated before them (then wider, and their misses score smaller).

Revision ID: 0023_bootstrap_bands
Revises: 0022_same_text
Create Date: 2026-11-29 11:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0023_bootstrap_bands"
down_revision = "0022_same_text"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("validation_runs") as batch:
        batch.add_column(sa.Column("bootstrap_speedup_lo", sa.Float(), nullable=True))
        batch.add_column(sa.Column("bootstrap_speedup_hi", sa.Float(), nullable=True))
    op.execute("UPDATE validation_runs SET bootstrap_speedup_lo = predicted_speedup_lo, bootstrap_speedup_hi = predicted_speedup_hi")


def downgrade() -> None:
    with op.batch_alter_table("validation_runs") as batch:
        batch.drop_column("bootstrap_speedup_hi")
        batch.drop_column("bootstrap_speedup_lo")
