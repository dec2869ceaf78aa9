"""Alembic's entry for its own command line (`alembic -c undercloud/store/alembic.ini
revision --autogenerate -m ...` against a scratch store). The service does not come here:
store/migrate.py runs the same scripts on the store it opens."""

from __future__ import annotations

from alembic import context

from undercloud.store import Store
from undercloud.store.db import Base, _import_models

_import_models()
conn = context.config.attributes.get("connection")
if conn is None:
    store = Store(context.config.get_main_option("sqlalchemy.url"))
    with store.engine.connect() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()
        conn.commit()
else:
    context.configure(connection=conn, target_metadata=Base.metadata)
    with context.begin_transaction():
        context.run_migrations()
