"""Clouds: OpenStack clouds known by name, their clouds.yaml entries encrypted
(store/clouds.py).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clouds",
        sa.Column("name", sa.String(length=255), primary_key=True),
        sa.Column("config", sa.JSON(), nullable=False),  # store/crypto.Encrypted: JSON of a token
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False))


def downgrade() -> None:
    op.drop_table("clouds")
