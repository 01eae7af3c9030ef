"""A lookup drafter's proposal lengths over the rounds a decoder visits: a short or empty proposal
makes a short verification pass (nullable: model drafters always propose their width, and older
rows predate the measure).

Revision ID: 0017_drafted
Revises: 0016_visit_base
Create Date: 2026-11-26 03:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0017_drafted"
down_revision = "0016_visit_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("acceptance_prompts") as batch:
        batch.add_column(sa.Column("visit_drafted", sa.JSON(), nullable=True))
    with op.batch_alter_table("acceptance") as batch:
        batch.add_column(sa.Column("drafted", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("acceptance") as batch:
        batch.drop_column("drafted")
    with op.batch_alter_table("acceptance_prompts") as batch:
        batch.drop_column("visit_drafted")
