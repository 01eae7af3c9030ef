"""A fingerprint of each model's files (config and weights), so that a plan whose model changed
on disk since it was profiled is refused instead of silently running another model (nullable:
packaged aliases and older rows have none).

Revision ID: 0005_model_sources
Revises: 0004_visited_runs
Create Date: 2026-11-22 07:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0005_model_sources'
down_revision = '0004_visited_runs'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('source_fingerprint', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.drop_column('source_fingerprint')
