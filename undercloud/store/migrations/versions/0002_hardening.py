"""Hardening: secrets encrypted at rest, one root stack per name, the store's key check.

- Columns that carry secrets (BMC passwords, stack parameters and bundles, resolved
  properties, resource data, rendered configs, server metadata) hold one Fernet token
  each (store/crypto.py); their SQL type stays JSON, so only the data changes.
- A partial unique index on root stack names (parent_id IS NULL). Stores that already
  hold two root stacks of one name (the race this closes) keep the oldest's name; the
  others get `-<id prefix>` appended, said in the log.
- store_meta with the key-check value.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from undercloud.store.crypto import crypto_of

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

log = logging.getLogger("undercloud.store")

ENCRYPTED = {  # table: (primary key, columns)
    "nodes": ("id", ["driver_info"]),
    "stacks": ("id", ["bundle", "parameters", "prev_bundle", "prev_parameters", "outputs"]),
    "stack_resources": ("id", ["properties", "rsrc_metadata", "attributes", "data"]),
    "agent_deployments": ("id", ["document", "signal"]),
    "agent_servers": ("id", ["extra"]),
    "servers": ("id", ["metadata"]),
}
BATCH = 500
ROOT_WHERE = sa.text("parent_id IS NULL")


def _recode(encode: bool) -> None:
    """Every value of the encrypted columns, encrypted (or decrypted), in batches."""
    conn = op.get_bind()
    crypto = crypto_of(conn.dialect)
    for name, (pk, cols) in ENCRYPTED.items():
        t = sa.table(name, sa.column(pk), *(sa.column(c, sa.JSON) for c in cols))
        stmt = sa.update(t).where(t.c[pk] == sa.bindparam("_pk")).values({c: sa.bindparam(c) for c in cols})
        last = None
        while True:
            q = sa.select(t).order_by(t.c[pk]).limit(BATCH)
            if last is not None:
                q = q.where(t.c[pk] > last)
            rows = conn.execute(q).mappings().all()
            if not rows:
                break
            last = rows[-1][pk]
            out = []
            for r in rows:
                vals = {}
                for c in cols:
                    v = r[c]
                    if v is None:
                        vals[c] = None
                    else:
                        vals[c] = crypto.encrypt(v) if encode else crypto.decrypt(v)
                out.append({"_pk": r[pk], **vals})
            conn.execute(stmt, out)


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":  # the plain values replaced below must not linger in free space
        conn.exec_driver_sql("PRAGMA secure_delete=ON")
    stacks = sa.table("stacks", sa.column("id"), sa.column("name"), sa.column("parent_id"),
                      sa.column("created_at"))
    seen: set[str] = set()
    for sid, name in conn.execute(sa.select(stacks.c.id, stacks.c.name).where(stacks.c.parent_id.is_(None))
                                  .order_by(stacks.c.created_at, stacks.c.id)).all():
        if name in seen:
            new = f"{name[:240]}-{sid[:8]}"
            conn.execute(sa.update(stacks).where(stacks.c.id == sid).values(name=new))
            log.warning("two root stacks were named %r: stack %s is renamed %r", name, sid, new)
        seen.add(name)
    op.create_index("uq_stacks_root_name", "stacks", ["name"], unique=True, sqlite_where=ROOT_WHERE,
                    postgresql_where=ROOT_WHERE)
    meta = op.create_table(
        "store_meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("key"),
    )
    _recode(True)
    op.bulk_insert(meta, [{"key": "key-check", "value": crypto_of(conn.dialect).encrypt({"undercloud": True})}])


def downgrade() -> None:
    _recode(False)
    op.drop_table("store_meta")
    op.drop_index("uq_stacks_root_name", table_name="stacks", sqlite_where=ROOT_WHERE,
                  postgresql_where=ROOT_WHERE)
