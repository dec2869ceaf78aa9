"""Database engine and sessions. Every domain's models derive from `Base`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import JSON, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from undercloud.errors import UndercloudError


class Base(DeclarativeBase):
    type_annotation_map = {dict: JSON, list: JSON}


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def _import_models() -> None:
    # Importing registers each domain's tables on Base.metadata.
    import undercloud.store.models  # noqa: F401


class Store:
    """One database: engine, session factory, and schema creation."""

    _lock = threading.Lock()

    def __init__(self, url: str):
        self.url = url
        kwargs: dict = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        try:
            self.engine = create_engine(url, **kwargs)
        except Exception as exc:  # bad URL, missing driver
            raise UndercloudError(f"cannot open store {url!r}: {exc}") from None
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def create_schema(self) -> Store:
        _import_models()
        with self._lock:
            Base.metadata.create_all(self.engine)
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

    @property
    def display_url(self) -> str:
        """The URL without a password, for status output."""
        return self.engine.url.render_as_string(hide_password=True)
