"""A model's host work per pass beside the pass itself (the decoding loop's bookkeeping, drafting
and verification), stored with its latency curve (nullable: older rows predate the measure, and a
profile that generated nothing to measure it on leaves it out).

Revision ID: 0019_host_ms
Revises: 0018_kernels_width
Create Date: 2026-11-27 01:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0019_host_ms"
down_revision = "0018_kernels_width"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("latency") as batch:
        batch.add_column(sa.Column("host_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("latency") as batch:
        batch.drop_column("host_ms")
