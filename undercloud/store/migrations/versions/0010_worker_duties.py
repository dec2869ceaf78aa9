"""A worker's duties: "all", or "servers" for a hypervisor host's worker (`serve
--hypervisor-only`), which takes over no stack operation and syncs no node's power.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("duties", sa.String(16), nullable=False, server_default="all"))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("duties")
