"""The CPU capability a profile was measured with (AMX, AVX512-BF16, AVX2, ...), shown beside
its figures: the same CPU name hides machines that compute bf16 natively and ones that do not
(nullable: older rows did not record it).

Revision ID: 0007_hardware_capability
Revises: 0006_latency_samples
Create Date: 2026-11-22 07:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0007_hardware_capability'
down_revision = '0006_latency_samples'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('hardware') as batch:
        batch.add_column(sa.Column('capability', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('hardware') as batch:
        batch.drop_column('capability')
