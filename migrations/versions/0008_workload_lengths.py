"""The token length of every prompt of a workload (chat template applied), so that solves read
the cost curves at the contexts the workload decodes at instead of a fixed 256 (nullable: older
workloads did not record them).

Revision ID: 0008_workload_lengths
Revises: 0007_hardware_capability
Create Date: 2026-11-22 07:55:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0008_workload_lengths'
down_revision = '0007_hardware_capability'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('prompt_tokens', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('prompt_tokens')
