"""Facts about the store itself: a value encrypted with the store's key when the store was
made, read back at every open so that a wrong key file is one clear line at start."""

from __future__ import annotations

from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base

KEY_CHECK = "key-check"


class StoreMeta(Base):
    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(Encrypted, nullable=True)
