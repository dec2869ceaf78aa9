"""Servers deleted while their host had no live worker (Nova's local delete): the machines that
host's worker removes when it comes back (store/servers.Leftover).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_leftovers",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("hypervisor_type", sa.String(300), nullable=False),
        sa.Column("volumes", sa.JSON(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("deleted_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_server_leftovers_host", "server_leftovers", ["host"])


def downgrade() -> None:
    op.drop_index("ix_server_leftovers_host", "server_leftovers")
    op.drop_table("server_leftovers")
