"""The machine's floor and the kernels a profile ran: the hardware row keeps which kernels its
models ran (prepacked or plain weights) and the last floor probe (streaming bandwidth and GEMM
throughput per dtype, medians with their p90/p10 spread); each latency point keeps the floor of
its pass computed from them (nullable: older rows have none).

Revision ID: 0010_floor_probe
Revises: 0009_plan_intervals
Create Date: 2026-11-22 10:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0010_floor_probe'
down_revision = '0009_plan_intervals'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('hardware') as batch:
        batch.add_column(sa.Column('kernels', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('bandwidth_gbs', sa.Float(), nullable=True))
        batch.add_column(sa.Column('bandwidth_spread', sa.Float(), nullable=True))
        batch.add_column(sa.Column('peak_gflops', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('peak_spread', sa.JSON(), nullable=True))
    with op.batch_alter_table('latency') as batch:
        batch.add_column(sa.Column('floor_ms', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('latency') as batch:
        batch.drop_column('floor_ms')
    with op.batch_alter_table('hardware') as batch:
        batch.drop_column('peak_spread')
        batch.drop_column('peak_gflops')
        batch.drop_column('bandwidth_spread')
        batch.drop_column('bandwidth_gbs')
        batch.drop_column('kernels')
