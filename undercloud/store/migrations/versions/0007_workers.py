"""Several workers on one store: their heartbeats (store/workers.py), the worker running
each root stack's operation (`stacks.engine_id`), the worker doing a node's busy work
(`nodes.reservation`). Rows written before stay unowned: the first worker to start takes
them as a single service did.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=1024), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False))
    op.create_index("ix_workers_heartbeat_at", "workers", ["heartbeat_at"])
    with op.batch_alter_table("stacks") as batch:
        batch.add_column(sa.Column("engine_id", sa.String(length=64), nullable=True))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("reservation", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("reservation")
    with op.batch_alter_table("stacks") as batch:
        batch.drop_column("engine_id")
    op.drop_index("ix_workers_heartbeat_at", table_name="workers")
    op.drop_table("workers")
