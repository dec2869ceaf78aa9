"""Workflows the service runs for an overcloud (store/workflows.py) and their events.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("stack", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),  # store/crypto.Encrypted
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),  # store/crypto.Encrypted
        sa.Column("worker_id", sa.String(255), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_workflows_stack", "workflows", ["stack"])
    op.create_index("ix_workflows_status", "workflows", ["status"])
    op.create_table(
        "workflow_events",
        sa.Column("workflow_id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("stream", sa.String(8), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workflow_events")
    op.drop_index("ix_workflows_status", "workflows")
    op.drop_index("ix_workflows_stack", "workflows")
    op.drop_table("workflows")
