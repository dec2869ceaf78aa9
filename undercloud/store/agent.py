"""What the undercloud keeps for the agents on its servers.

Tokens are stored only as SHA-256 hashes (they are 32 random bytes, so a plain hash is
enough). Each deployment row holds the Heat-shaped entry of the server's `deployments`
list, and the signal that came back for it. The metadata documents served to agents are
derived from these rows and cached in memory by the service (orchestration/server_metadata.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base


class AgentServer(Base):
    __tablename__ = "agent_servers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the server id agents present
    name: Mapped[str] = mapped_column(String(255), default="")
    token_hash: Mapped[str] = mapped_column(String(64))
    # Metadata keys served beside `deployments` (e.g. a server's own metadata property).
    extra: Mapped[Any] = mapped_column(Encrypted, default=dict)
    # Time of the last change of the server's document: strictly increasing (Last-Modified).
    revision: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    # The agent's last call (written at most every SEEN_WRITE_EVERY s) and its watchdog's
    # last report: whichever worker it reached, every worker shows them.
    last_seen: Mapped[float | None] = mapped_column(Float, nullable=True)
    health: Mapped[Any] = mapped_column(Encrypted, nullable=True)


class AgentDeployment(Base):
    __tablename__ = "agent_deployments"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # new for every revision
    server_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255))
    # Who published it (a deployment resource's uuid): a new revision replaces the old.
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # Encrypted: rendered configs and their inputs carry secrets; so may what the agent sent back.
    document: Mapped[Any] = mapped_column(Encrypted)  # {id, name, group, config, inputs, outputs, options}
    signal: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    signalled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
