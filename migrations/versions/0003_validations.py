"""Validation runs: predicted against measured latency per plan.

Revision ID: 0003_validations
Revises: 0002_plans
Create Date: 2026-11-22 00:42:09.213139
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_validations'
down_revision = '0002_plans'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('validations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('solve_id', sa.Integer(), nullable=False),
    sa.Column('prompts_name', sa.String(length=200), nullable=False),
    sa.Column('prompts', sa.Integer(), nullable=False),
    sa.Column('max_new_tokens', sa.Integer(), nullable=False),
    sa.Column('repeats', sa.Integer(), nullable=False),
    sa.Column('median_abs_error', sa.Float(), nullable=True),
    sa.Column('regret', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['solve_id'], ['solves.id'], name=op.f('fk_validations_solve_id_solves'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_validations'))
    )
    with op.batch_alter_table('validations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_validations_solve_id'), ['solve_id'], unique=False)

    op.create_table('validation_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('validation_id', sa.Integer(), nullable=False),
    sa.Column('plan_id', sa.Integer(), nullable=True),
    sa.Column('chain', sa.JSON(), nullable=False),
    sa.Column('widths', sa.JSON(), nullable=False),
    sa.Column('predicted_ms_per_token', sa.Float(), nullable=False),
    sa.Column('measured_ms_per_token', sa.Float(), nullable=False),
    sa.Column('error', sa.Float(), nullable=False),
    sa.Column('measured_speedup', sa.Float(), nullable=False),
    sa.Column('predicted_mean_accepted_length', sa.Float(), nullable=False),
    sa.Column('measured_mean_accepted_length', sa.Float(), nullable=False),
    sa.Column('prefill_ms', sa.Float(), nullable=False),
    sa.Column('tokens', sa.Integer(), nullable=False),
    sa.Column('levels', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_validation_runs_plan_id_plans'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['validation_id'], ['validations.id'], name=op.f('fk_validation_runs_validation_id_validations'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_validation_runs'))
    )
    with op.batch_alter_table('validation_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_validation_runs_plan_id'), ['plan_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_validation_runs_validation_id'), ['validation_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('validation_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_validation_runs_validation_id'))
        batch_op.drop_index(batch_op.f('ix_validation_runs_plan_id'))

    op.drop_table('validation_runs')
    with op.batch_alter_table('validations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_validations_solve_id'))

    op.drop_table('validations')
