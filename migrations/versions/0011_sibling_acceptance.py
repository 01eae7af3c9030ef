"""The sibling-acceptance curve A(k) of draft trees: per prompt the sums of a_t(k) and their
count, per pair the pooled A(1..8) (nullable: the n-gram drafter has none, and rows measured
before have none until the pair is measured again).

Revision ID: 0011_sibling_acceptance
Revises: 0010_floor_probe
Create Date: 2026-11-22 14:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0011_sibling_acceptance'
down_revision = '0010_floor_probe'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('acceptance_prompts') as batch:
        batch.add_column(sa.Column('siblings_sum', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('siblings_count', sa.Integer(), nullable=True))
    with op.batch_alter_table('acceptance') as batch:
        batch.add_column(sa.Column('siblings', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('acceptance') as batch:
        batch.drop_column('siblings')
    with op.batch_alter_table('acceptance_prompts') as batch:
        batch.drop_column('siblings_count')
        batch.drop_column('siblings_sum')
