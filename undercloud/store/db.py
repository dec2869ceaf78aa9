"""Database engine and sessions. Every domain's models derive from `Base`.

A store is a database plus its key file (store/crypto.py). Its schema is Alembic's
(store/migrate.py): `create_schema()` makes a new store or upgrades an older one in place.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import JSON, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from undercloud.config import private_file
from undercloud.errors import UndercloudError
from undercloud.store import crypto


class Base(DeclarativeBase):
    type_annotation_map = {dict: JSON, list: JSON}


# Connections a store may hold at once (pool + overflow). Threads that use the store (API
# requests, node workers, the engine's plugins) are sized from it, so work beyond it waits
# in their queues, not at the pool; a checkout waits POOL_TIMEOUT s before it fails.
POOL = {"sqlite": (16, 48), "default": (8, 16)}
POOL_TIMEOUT = 300.0
SQLITE_BUSY_MS = 60000  # another process (or connection) writing: wait this long for it
# libpq's: a store on another host (a hypervisor host's worker reaches it over the network) that
# stops answering is an error within seconds, not a call that hangs, heartbeat and all, for
# ever. A URL's own (`?connect_timeout=3`) win.
PG_CONNECT = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
              "keepalives_count": 3, "tcp_user_timeout": 30000}


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    # Turning a new file to WAL needs a lock SQLite does not wait for: when several processes
    # open a new store at once, one of them may hold it for a moment. Ask again until it is free.
    deadline = time.monotonic() + SQLITE_BUSY_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _import_models() -> None:
    # Importing registers each domain's tables on Base.metadata.
    import undercloud.store.models  # noqa: F401


# A URL as users write it names the database, not the driver: ours for each database.
DRIVERS = {"postgresql": "psycopg", "postgres": "psycopg"}


def driver_url(url: str) -> URL:
    """The URL with our driver where it names none (`postgresql://` means psycopg 3 here, not
    SQLAlchemy's default psycopg2, which is not installed)."""
    u = make_url(url)
    if u.drivername in DRIVERS:
        u = u.set(drivername=f"postgresql+{DRIVERS[u.drivername]}")
    return u


def default_key_file(url: str) -> Path | None:
    """A SQLite file's key lives beside it (the home's store.key); other stores name theirs."""
    env = os.environ.get("UNDERCLOUD_STORE_KEY")
    if env:
        return Path(env)
    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        return Path(u.database).resolve().parent / crypto.KEY_FILE
    return None


class Store:
    """One database: engine, session factory, key, and schema."""

    def __init__(self, url: str, key_file: Path | None = None):
        self.url = url
        kwargs: dict = {"hide_parameters": True}  # errors and logs never carry the values
        try:
            parsed = driver_url(url)
            backend = parsed.get_backend_name()
        except Exception as exc:  # noqa: BLE001 - a URL SQLAlchemy cannot parse
            raise UndercloudError(f"cannot open store: {exc}") from None
        self.is_sqlite = backend == "sqlite"
        memory = self.is_sqlite and make_url(url).database in (None, "", ":memory:")
        self.connect_args: dict = {}
        if backend == "postgresql":
            self.connect_args = {k: v for k, v in PG_CONNECT.items() if k not in parsed.query}
            kwargs["connect_args"] = self.connect_args
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000}
            if not memory:  # SQLite would make it 0644; its -wal and -shm files take the file's mode
                path = Path(make_url(url).database)
                if not path.exists() and path.parent.is_dir():
                    os.close(private_file(path, os.O_WRONLY))
        size, overflow = POOL["sqlite" if self.is_sqlite else "default"]
        if not memory:
            size = int(os.environ.get("UNDERCLOUD_DB_POOL_SIZE", size))
            kwargs.update(pool_size=size, max_overflow=overflow, pool_timeout=POOL_TIMEOUT)
            self.capacity = size + overflow
        else:
            self.capacity = 1
        try:
            self.engine = create_engine(parsed, **kwargs)
        except Exception as exc:  # bad URL, missing driver
            raise UndercloudError(f"cannot open store {self.display(url)!r}: {exc}") from None
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        key_file = key_file or default_key_file(url)
        self.key_file = key_file
        key = crypto.load_key(key_file) if key_file else Fernet.generate_key()
        setattr(self.engine.dialect, crypto.ATTR, crypto.Crypto(key, f"key file {key_file}" if key_file
                                                                 else "an ephemeral key"))
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def create_schema(self) -> Store:
        """Make the schema, or bring an older store's up to date (Alembic migrations)."""
        from undercloud.store import migrate

        _import_models()
        try:
            migrate.upgrade(self)
        except OperationalError as exc:  # no server, no such database, refused login
            reason = str(exc.orig or exc).strip().splitlines()[0]
            raise UndercloudError(f"cannot open store {self.display_url}: {reason}") from None
        return self

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed on success, rolled back on any error."""
        s = self.sessions()
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()

    @staticmethod
    def display(url: str) -> str:
        try:
            return make_url(url).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001
            return "(unparsable URL)"

    @property
    def display_url(self) -> str:
        """The URL as given, without its password, for status output and errors."""
        return self.display(self.url)
