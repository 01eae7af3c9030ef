"""Calibrated predictions with each validation: per plan the prediction from the profile scaled
by the measured drift of each model and pass size, per validation the calibrated summary
figures and the reference passes themselves (nullable: older validations have none).

Revision ID: 0012_validation_calibration
Revises: 0011_sibling_acceptance
Create Date: 2026-11-22 15:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0012_validation_calibration'
down_revision = '0011_sibling_acceptance'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('validations') as batch:
        batch.add_column(sa.Column('median_abs_error_calibrated', sa.Float(), nullable=True))
        batch.add_column(sa.Column('median_abs_speedup_error_calibrated', sa.Float(), nullable=True))
        batch.add_column(sa.Column('calibration', sa.JSON(), nullable=True))
    with op.batch_alter_table('validation_runs') as batch:
        batch.add_column(sa.Column('calibrated_ms_per_token', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('validation_runs') as batch:
        batch.drop_column('calibrated_ms_per_token')
    with op.batch_alter_table('validations') as batch:
        batch.drop_column('calibration')
        batch.drop_column('median_abs_speedup_error_calibrated')
        batch.drop_column('median_abs_error_calibrated')
