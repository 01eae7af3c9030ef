"""Visited run lengths count the starts near a continuation's end as censored runs: the base sums
of the product-limit estimate (nullable: older rows keep their estimate, read as before).

Revision ID: 0016_visit_base
Revises: 0015_lenience
Create Date: 2026-11-26 03:10:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0016_visit_base"
down_revision = "0015_lenience"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("acceptance_prompts") as batch:
        batch.add_column(sa.Column("visit_base", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("acceptance_prompts") as batch:
        batch.drop_column("visit_base")
