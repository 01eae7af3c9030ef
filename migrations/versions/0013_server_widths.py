"""Column widths a PostgreSQL server enforces: model parameter counts as 64-bit integers (a 7B
model overflows 32 bits) and workload and prompt-set names up to 500 characters (a file name
plus its category). SQLite neither bounds text nor narrows integers, so there nothing changes.

Revision ID: 0013_server_widths
Revises: 0012_validation_calibration
Create Date: 2026-11-24 09:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0013_server_widths'
down_revision = '0012_validation_calibration'
branch_labels = None
depends_on = None

WIDENED = [
    ('models', 'parameters', sa.Integer(), sa.BigInteger()),
    ('workloads', 'name', sa.String(length=200), sa.String(length=500)),
    ('validations', 'prompts_name', sa.String(length=200), sa.String(length=500)),
]


def upgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        return
    for table, column, narrow, wide in WIDENED:
        op.alter_column(table, column, type_=wide, existing_type=narrow, existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        return
    for table, column, narrow, wide in WIDENED:
        op.alter_column(table, column, type_=narrow, existing_type=wide, existing_nullable=False)
