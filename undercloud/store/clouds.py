"""OpenStack clouds the undercloud knows by name (`undercloud cloud add`): each one's
clouds.yaml entry, credentials included, encrypted at rest."""

from __future__ import annotations

import time

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base


class Cloud(Base):
    __tablename__ = "clouds"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    config: Mapped[dict] = mapped_column(Encrypted)  # the clouds.yaml entry: auth, region_name, ...
    source: Mapped[str] = mapped_column(String(1024), default="")  # the file and cloud it came from
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
