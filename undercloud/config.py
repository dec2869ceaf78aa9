"""Where an undercloud instance keeps its state. `UNDERCLOUD_HOME` moves all of it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Home:
    path: Path

    @classmethod
    def current(cls) -> Home:
        env = os.environ.get("UNDERCLOUD_HOME")
        path = Path(env) if env else Path.home() / ".local" / "share" / "undercloud"
        return cls(path.resolve())

    def ensure(self) -> Home:
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    @property
    def instance(self) -> str:
        """A short name unique to this home, carried by everything made on the host."""
        return "uc" + hashlib.sha256(str(self.path).encode()).hexdigest()[:6]

    @property
    def db_url(self) -> str:
        return os.environ.get("UNDERCLOUD_DB") or f"sqlite:///{self.path / 'undercloud.db'}"

    def file(self, name: str) -> Path:
        return self.path / name
