"""Each plan's bootstrap interval of predicted speed-up (5th to 95th percentile over resampled
prompts) and whether it overlaps the pick's, i.e. is statistically tied with it (nullable:
older plans have none).

Revision ID: 0009_plan_intervals
Revises: 0008_workload_lengths
Create Date: 2026-11-22 08:05:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0009_plan_intervals'
down_revision = '0008_workload_lengths'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('plans') as batch:
        batch.add_column(sa.Column('speedup_lo', sa.Float(), nullable=True))
        batch.add_column(sa.Column('speedup_hi', sa.Float(), nullable=True))
        batch.add_column(sa.Column('tied', sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('plans') as batch:
        batch.drop_column('tied')
        batch.drop_column('speedup_hi')
        batch.drop_column('speedup_lo')
