"""Lenience: the e of lossy verification joins a setting's key (existing settings are exact, e = 1).

Revision ID: 0015_lenience
Revises: 0014_batch_sizes
Create Date: 2026-11-24 06:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0015_lenience"
down_revision = "0014_batch_sizes"
branch_labels = None
depends_on = None

OLD_KEY = ["mode", "temperature", "top_p", "dtype", "max_new_tokens"]


def upgrade() -> None:
    with op.batch_alter_table("settings") as batch:
        batch.add_column(sa.Column("lenience", sa.Float(), server_default="1.0", nullable=False))
        batch.drop_constraint(batch.f("uq_settings_mode_temperature_top_p_dtype_max_new_tokens"), type_="unique")
        batch.create_unique_constraint("uq_settings_key", [*OLD_KEY, "lenience"])  # the long name passes 63 characters


def downgrade() -> None:
    # a lossy setting has no place in the old key, and its measurements none without it
    op.execute("DELETE FROM settings WHERE lenience != 1.0")
    with op.batch_alter_table("settings") as batch:
        batch.drop_constraint("uq_settings_key", type_="unique")
        batch.create_unique_constraint(batch.f("uq_settings_mode_temperature_top_p_dtype_max_new_tokens"), OLD_KEY)
        batch.drop_column("lenience")
