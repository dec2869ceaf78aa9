"""Servers of another cloud: a server's hypervisor type may name its cloud
(`openstack:<cloud>`, a cloud name of up to 255 characters).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("servers") as batch:
        batch.alter_column("hypervisor_type", existing_type=sa.String(length=32), type_=sa.String(length=300),
                           existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("servers") as batch:
        batch.alter_column("hypervisor_type", existing_type=sa.String(length=300), type_=sa.String(length=32),
                           existing_nullable=False)
