"""Addresses: one table for who holds which address of the undercloud's own networks
(container, VM and bare-metal servers, overcloud virtual IPs; store/addresses.py). What
the old allocators kept (podman labels, servers/lab-addresses.json, overcloud/<stack>/
virtual-ip) is imported by each allocator at its first use, where it knows the network.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "addresses",
        sa.Column("network", sa.String(length=255), primary_key=True),
        sa.Column("address", sa.String(length=64), primary_key=True),
        sa.Column("holder", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("holder"))


def downgrade() -> None:
    op.drop_table("addresses")
