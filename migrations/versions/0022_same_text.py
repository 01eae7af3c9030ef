"""A validation keeps, per plan decoded greedily, how many of its sequences made exactly the tokens
of the autoregressive run beside them, and how many were compared (nullable: sampled validations
and older rows have neither).

Revision ID: 0022_same_text
Revises: 0021_horizons_coverage
Create Date: 2026-11-27 15:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_same_text"
down_revision = "0021_horizons_coverage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("validation_runs") as batch:
        batch.add_column(sa.Column("same_text", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("text_runs", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("validation_runs") as batch:
        batch.drop_column("text_runs")
        batch.drop_column("same_text")
