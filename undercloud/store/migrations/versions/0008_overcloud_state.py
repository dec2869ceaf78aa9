"""Overcloud state: what `undercloud deploy` keeps of each overcloud between runs (its
secrets, deployed image sets, last deploy), encrypted (store/overcloud.py). It was kept in
the home of whoever deployed; the CLI moves a home's files here the first time it reads.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "overcloud_state",
        sa.Column("stack", sa.String(length=255), primary_key=True),
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=True),  # store/crypto.Encrypted: JSON of a token
        sa.Column("updated_at", sa.Float(), nullable=False))


def downgrade() -> None:
    op.drop_table("overcloud_state")
