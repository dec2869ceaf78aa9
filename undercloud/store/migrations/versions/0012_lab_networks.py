"""Lab networks that span hypervisor hosts (store/lab_networks.py): each network's subnet and
first host, and each member host's tunnel end and worker address.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lab_networks",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("subnet", sa.String(64), nullable=False),
        sa.Column("gateway", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "lab_network_members",
        sa.Column("network", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("endpoint", sa.String(64), nullable=True),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("lab_network_members")
    op.drop_table("lab_networks")
