"""Races closed: a root stack's operation generation (bumped by every operation start and
every take-over; each write of a walk is conditional on it, so a fenced walk writes
nothing), and when a node was claimed (the periodic loop releases a claim whose server row
never came).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("stacks") as batch:
        batch.add_column(sa.Column("generation", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("claimed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("claimed_at")
    with op.batch_alter_table("stacks") as batch:
        batch.drop_column("generation")
