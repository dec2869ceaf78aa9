"""The store: SQLAlchemy models; SQLite (WAL) by default, PostgreSQL when asked."""

from undercloud.store.db import Base, Store

__all__ = ["Base", "Store"]
