"""Hidden values masked in every read: a root stack keeps the texts of its tree's hidden
values (encrypted, store/crypto.Encrypted), so reads mask those given by environments and
parent stacks too, not only the stack's own parameters.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("stacks") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON(), nullable=True))  # store/crypto.Encrypted


def downgrade() -> None:
    with op.batch_alter_table("stacks") as batch:
        batch.drop_column("secrets")
