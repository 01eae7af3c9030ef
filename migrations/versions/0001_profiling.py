"""Profiling tables: hardware, models, workloads, settings, latency, continuations, acceptance.

Revision ID: 0001_profiling
Revises: 
Create Date: 2026-11-21 23:22:45.338875
"""
from alembic import op
import sqlalchemy as sa


revision = '0001_profiling'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('hardware',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.String(length=32), nullable=False),
    sa.Column('device', sa.String(length=16), nullable=False),
    sa.Column('device_name', sa.String(length=200), nullable=False),
    sa.Column('threads', sa.Integer(), nullable=False),
    sa.Column('torch_version', sa.String(length=40), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hardware')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_hardware_fingerprint'))
    )
    op.create_table('models',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('spec', sa.String(length=500), nullable=False),
    sa.Column('parameters', sa.Integer(), nullable=False),
    sa.Column('layers', sa.Integer(), nullable=True),
    sa.Column('vocab_size', sa.Integer(), nullable=True),
    sa.Column('tokenizer_fingerprint', sa.String(length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_models')),
    sa.UniqueConstraint('spec', name=op.f('uq_models_spec'))
    )
    op.create_table('settings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('mode', sa.String(length=8), nullable=False),
    sa.Column('temperature', sa.Float(), nullable=False),
    sa.Column('top_p', sa.Float(), nullable=False),
    sa.Column('dtype', sa.String(length=8), nullable=False),
    sa.Column('max_new_tokens', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_settings')),
    sa.UniqueConstraint('mode', 'temperature', 'top_p', 'dtype', 'max_new_tokens', name=op.f('uq_settings_mode_temperature_top_p_dtype_max_new_tokens'))
    )
    op.create_table('workloads',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workloads')),
    sa.UniqueConstraint('content_hash', name=op.f('uq_workloads_content_hash'))
    )
    op.create_table('acceptance',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('drafter_id', sa.Integer(), nullable=False),
    sa.Column('verifier_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('setting_id', sa.Integer(), nullable=False),
    sa.Column('alpha', sa.Float(), nullable=False),
    sa.Column('positions', sa.Integer(), nullable=False),
    sa.Column('prompts', sa.Integer(), nullable=False),
    sa.Column('run_lengths', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['drafter_id'], ['models.id'], name=op.f('fk_acceptance_drafter_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['setting_id'], ['settings.id'], name=op.f('fk_acceptance_setting_id_settings'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['verifier_id'], ['models.id'], name=op.f('fk_acceptance_verifier_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], name=op.f('fk_acceptance_workload_id_workloads'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_acceptance')),
    sa.UniqueConstraint('drafter_id', 'verifier_id', 'workload_id', 'setting_id', name=op.f('uq_acceptance_drafter_id_verifier_id_workload_id_setting_id'))
    )
    with op.batch_alter_table('acceptance', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_acceptance_drafter_id'), ['drafter_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_setting_id'), ['setting_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_verifier_id'), ['verifier_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_workload_id'), ['workload_id'], unique=False)

    op.create_table('acceptance_prompts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('drafter_id', sa.Integer(), nullable=False),
    sa.Column('verifier_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('setting_id', sa.Integer(), nullable=False),
    sa.Column('prompt_index', sa.Integer(), nullable=False),
    sa.Column('positions', sa.Integer(), nullable=False),
    sa.Column('alpha_sum', sa.Float(), nullable=False),
    sa.Column('run_sum', sa.JSON(), nullable=False),
    sa.Column('run_count', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['drafter_id'], ['models.id'], name=op.f('fk_acceptance_prompts_drafter_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['setting_id'], ['settings.id'], name=op.f('fk_acceptance_prompts_setting_id_settings'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['verifier_id'], ['models.id'], name=op.f('fk_acceptance_prompts_verifier_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], name=op.f('fk_acceptance_prompts_workload_id_workloads'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_acceptance_prompts')),
    sa.UniqueConstraint('drafter_id', 'verifier_id', 'workload_id', 'setting_id', 'prompt_index', name=op.f('uq_acceptance_prompts_drafter_id_verifier_id_workload_id_setting_id_prompt_index'))
    )
    with op.batch_alter_table('acceptance_prompts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_acceptance_prompts_drafter_id'), ['drafter_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_prompts_setting_id'), ['setting_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_prompts_verifier_id'), ['verifier_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_acceptance_prompts_workload_id'), ['workload_id'], unique=False)

    op.create_table('continuations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('verifier_id', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=False),
    sa.Column('setting_id', sa.Integer(), nullable=False),
    sa.Column('prompt_index', sa.Integer(), nullable=False),
    sa.Column('tokens', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['setting_id'], ['settings.id'], name=op.f('fk_continuations_setting_id_settings'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['verifier_id'], ['models.id'], name=op.f('fk_continuations_verifier_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], name=op.f('fk_continuations_workload_id_workloads'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_continuations')),
    sa.UniqueConstraint('verifier_id', 'workload_id', 'setting_id', 'prompt_index', name=op.f('uq_continuations_verifier_id_workload_id_setting_id_prompt_index'))
    )
    with op.batch_alter_table('continuations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_continuations_setting_id'), ['setting_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_continuations_verifier_id'), ['verifier_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_continuations_workload_id'), ['workload_id'], unique=False)

    op.create_table('latency',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('hardware_id', sa.Integer(), nullable=False),
    sa.Column('dtype', sa.String(length=8), nullable=False),
    sa.Column('n_tokens', sa.Integer(), nullable=False),
    sa.Column('context_len', sa.Integer(), nullable=False),
    sa.Column('median_ms', sa.Float(), nullable=False),
    sa.Column('p10_ms', sa.Float(), nullable=False),
    sa.Column('p90_ms', sa.Float(), nullable=False),
    sa.Column('repeats', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware.id'], name=op.f('fk_latency_hardware_id_hardware'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_latency_model_id_models'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_latency')),
    sa.UniqueConstraint('model_id', 'hardware_id', 'dtype', 'n_tokens', 'context_len', name=op.f('uq_latency_model_id_hardware_id_dtype_n_tokens_context_len'))
    )
    with op.batch_alter_table('latency', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_latency_hardware_id'), ['hardware_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_latency_model_id'), ['model_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('latency', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_latency_model_id'))
        batch_op.drop_index(batch_op.f('ix_latency_hardware_id'))

    op.drop_table('latency')
    with op.batch_alter_table('continuations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_continuations_workload_id'))
        batch_op.drop_index(batch_op.f('ix_continuations_verifier_id'))
        batch_op.drop_index(batch_op.f('ix_continuations_setting_id'))

    op.drop_table('continuations')
    with op.batch_alter_table('acceptance_prompts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_acceptance_prompts_workload_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_prompts_verifier_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_prompts_setting_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_prompts_drafter_id'))

    op.drop_table('acceptance_prompts')
    with op.batch_alter_table('acceptance', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_acceptance_workload_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_verifier_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_setting_id'))
        batch_op.drop_index(batch_op.f('ix_acceptance_drafter_id'))

    op.drop_table('acceptance')
    op.drop_table('workloads')
    op.drop_table('settings')
    op.drop_table('models')
    op.drop_table('hardware')
