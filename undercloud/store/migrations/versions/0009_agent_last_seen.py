"""Agents' last call and watchdog report in the store (store/agent.py), so that every
worker shows them, not only the one the agent reached.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_servers") as batch:
        batch.add_column(sa.Column("last_seen", sa.Float(), nullable=True))
        batch.add_column(sa.Column("health", sa.JSON(), nullable=True))  # store/crypto.Encrypted


def downgrade() -> None:
    with op.batch_alter_table("agent_servers") as batch:
        batch.drop_column("health")
        batch.drop_column("last_seen")
