"""Every sample of a latency point, taken one per interleaved round, so that a sweep resumes
where it stopped and its spread can be judged (nullable: older rows kept only their summary).

Revision ID: 0006_latency_samples
Revises: 0005_model_sources
Create Date: 2026-11-22 07:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006_latency_samples'
down_revision = '0005_model_sources'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('latency') as batch:
        batch.add_column(sa.Column('samples_ms', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('latency') as batch:
        batch.drop_column('samples_ms')
