"""The kernels a hardware row names grow past 16 characters: the static engine's name its CUDA
graphs and attention backend (``static-graphs-efficient``, ``static-eager-prepacked``).

Revision ID: 0018_kernels_width
Revises: 0017_drafted
Create Date: 2026-11-27 00:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0018_kernels_width"
down_revision = "0017_drafted"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hardware") as batch:
        batch.alter_column("kernels", existing_type=sa.String(16), type_=sa.String(64), existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("hardware") as batch:
        batch.alter_column("kernels", existing_type=sa.String(64), type_=sa.String(16), existing_nullable=True)
