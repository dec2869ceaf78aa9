"""Schema migrations (Alembic, scripts in store/migrations/versions): a new store is made by
running them all, an older one is upgraded in place when it is opened.

Stores made before Alembic have tables but no `alembic_version`: they get the columns that
were added since they were made (store/servers.add_missing_columns, the old way), are
stamped with the first revision (the schema as it was then) and upgraded from there.

On SQLite the whole upgrade is one `BEGIN IMMEDIATE` transaction (SQLite's DDL is
transactional, but the driver would commit it statement by statement): a crash mid-way
leaves the store as it was, and a second process opening the store waits for the first.
PostgreSQL's DDL is transactional too; there a transaction-scoped advisory lock makes the
second process wait.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from functools import cache
from pathlib import Path

logging.getLogger("alembic").setLevel(logging.WARNING)  # its per-step INFO lines are noise here

from alembic.config import Config  # noqa: E402
from alembic.migration import MigrationContext  # noqa: E402
from alembic.runtime.environment import EnvironmentContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from sqlalchemy import func, inspect, select  # noqa: E402
from sqlalchemy.exc import IntegrityError, OperationalError  # noqa: E402

from undercloud.errors import UndercloudError  # noqa: E402

log = logging.getLogger("undercloud.store")
HERE = Path(__file__).resolve().parent / "migrations"
BASELINE = "0001"  # the schema create_all made before Alembic
MIGRATION_LOCK = 0x756E646572  # PostgreSQL advisory lock key of the schema upgrade ("under")


@cache
def script() -> ScriptDirectory:
    return ScriptDirectory(str(HERE))


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


def head() -> str:
    return script().get_current_head()


def current(conn) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _transaction(store):
    with store.engine.connect() as conn:
        if store.is_sqlite:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # we say BEGIN and COMMIT
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.exec_driver_sql("COMMIT")
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
        else:
            with conn.begin():
                if conn.dialect.name == "postgresql":  # held to the commit: one upgrader at a time
                    conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK)))
                yield conn


def upgrade(store, target: str = "head") -> str | None:
    """Bring the store's schema to `target`; returns the revision it had (None: a new store)."""
    sd = script()
    want = sd.get_current_head() if target == "head" else target
    with store.engine.connect() as conn:
        if current(conn) == want:
            _check_key(store)
            return want
    with _transaction(store) as conn:
        was = current(conn)  # again, under the lock: another process may have done it
        if was != want:
            if was is None and inspect(conn).has_table("stacks"):
                from undercloud.store.servers import add_missing_columns

                add_missing_columns(conn)
                MigrationContext.configure(conn).stamp(sd, BASELINE)
                was = BASELINE
                log.info("store %s predates migrations: taken as revision %s", store.display_url, BASELINE)

            def steps(rev, _context):
                return sd._upgrade_revs(want, rev)

            with EnvironmentContext(config(), sd, fn=steps, destination_rev=want) as env:
                from undercloud.store.db import Base

                env.configure(connection=conn, target_metadata=Base.metadata)
                env.run_migrations()
            if was is not None:
                log.info("store %s upgraded from revision %s to %s", store.display_url, was, want)
    if store.is_sqlite and was is not None:
        # The old pages (plain values before 0002) stay in the file until the log is written
        # back over them: do it now rather than at some later checkpoint.
        with store.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    _check_key(store)
    return was


def downgrade(store, target: str) -> None:
    """For tests of the migrations themselves."""
    sd = script()
    with _transaction(store) as conn:
        def steps(rev, _context):
            return sd._downgrade_revs(target, rev)

        with EnvironmentContext(config(), sd, fn=steps, destination_rev=target) as env:
            env.configure(connection=conn)
            env.run_migrations()


def _check_key(store, tries: int = 5) -> None:
    """The store's key-check value decrypts with this key (it is written once, at creation)."""
    from undercloud.store.meta import KEY_CHECK, StoreMeta

    try:
        with store.session() as s:
            try:
                value = s.scalar(select(StoreMeta.value).where(StoreMeta.key == KEY_CHECK))
            except UndercloudError as exc:
                raise UndercloudError(f"store {store.display_url}: {exc.message}") from None
            if value is None:
                s.add(StoreMeta(key=KEY_CHECK, value={"undercloud": True}))
    except (IntegrityError, OperationalError) as exc:
        # Another opener of the new store wrote first: ours must read what it wrote. SQLite
        # refuses our write at once ("locked", no busy wait) when another connection committed
        # after our read began, so that too means: read again.
        if tries <= 1 or (isinstance(exc, OperationalError) and "locked" not in str(exc.orig)):
            raise
        _check_key(store, tries - 1)
