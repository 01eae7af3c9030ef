"""Solved plans: one solves row per hsd-plan solve, its ranked plans in plans.

Revision ID: 0002_plans
Revises: 0001_profiling
Create Date: 2026-11-21 23:54:51.309463
"""
from alembic import op
import sqlalchemy as sa


revision = '0002_plans'
down_revision = '0001_profiling'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('solves',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('target_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('setting_id', sa.Integer(), nullable=False),
    sa.Column('hardware_id', sa.Integer(), nullable=False),
    sa.Column('acceptance_model', sa.String(length=16), nullable=False),
    sa.Column('t_max', sa.Integer(), nullable=False),
    sa.Column('max_depth', sa.Integer(), nullable=True),
    sa.Column('context_len', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware.id'], name=op.f('fk_solves_hardware_id_hardware'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['setting_id'], ['settings.id'], name=op.f('fk_solves_setting_id_settings'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['target_id'], ['models.id'], name=op.f('fk_solves_target_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], name=op.f('fk_solves_workload_id_workloads'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_solves'))
    )
    with op.batch_alter_table('solves', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_solves_hardware_id'), ['hardware_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_solves_setting_id'), ['setting_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_solves_target_id'), ['target_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_solves_workload_id'), ['workload_id'], unique=False)

    op.create_table('plans',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('solve_id', sa.Integer(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('chain', sa.JSON(), nullable=False),
    sa.Column('widths', sa.JSON(), nullable=False),
    sa.Column('predicted_ms_per_token', sa.Float(), nullable=False),
    sa.Column('predicted_mean_accepted_length', sa.Float(), nullable=False),
    sa.Column('predicted_speedup', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['solve_id'], ['solves.id'], name=op.f('fk_plans_solve_id_solves'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plans'))
    )
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_plans_solve_id'), ['solve_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_plans_solve_id'))

    op.drop_table('plans')
    with op.batch_alter_table('solves', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_solves_workload_id'))
        batch_op.drop_index(batch_op.f('ix_solves_target_id'))
        batch_op.drop_index(batch_op.f('ix_solves_setting_id'))
        batch_op.drop_index(batch_op.f('ix_solves_hardware_id'))

    op.drop_table('solves')
