"""The image store's table. Content lives outside the database, once per sha256."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.db import Base


def _now() -> datetime:
    return datetime.now(UTC)


class Image(Base):
    __tablename__ = "images"
    __table_args__ = (Index("ix_images_name", "name"), Index("ix_images_checksum", "checksum"))

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    disk_format: Mapped[str] = mapped_column(String(16))
    size: Mapped[int]
    checksum: Mapped[str] = mapped_column(String(64))  # sha256, hex
    status: Mapped[str] = mapped_column(String(16), default="active")
    properties: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=_now)

    def as_dict(self) -> dict:
        return {
            "id": self.id, "name": self.name, "disk_format": self.disk_format, "size": self.size,
            "checksum": self.checksum, "status": self.status,
            "hypervisor_type": (self.properties or {}).get("hypervisor_type"),
            "properties": dict(self.properties or {}),
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }
