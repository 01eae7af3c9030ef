"""Run lengths as a decoder visits starts, per width, and the speed-up error of validations
(nullable: older rows predate them).

Revision ID: 0004_visited_runs
Revises: 0003_validations
Create Date: 2026-11-22 02:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0004_visited_runs'
down_revision = '0003_validations'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('acceptance_prompts') as batch:
        batch.add_column(sa.Column('visit_sum', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('visit_count', sa.JSON(), nullable=True))
    with op.batch_alter_table('acceptance') as batch:
        batch.add_column(sa.Column('visited', sa.JSON(), nullable=True))
    with op.batch_alter_table('validations') as batch:
        batch.add_column(sa.Column('median_abs_speedup_error', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('validations') as batch:
        batch.drop_column('median_abs_speedup_error')
    with op.batch_alter_table('acceptance') as batch:
        batch.drop_column('visited')
    with op.batch_alter_table('acceptance_prompts') as batch:
        batch.drop_column('visit_count')
        batch.drop_column('visit_sum')
