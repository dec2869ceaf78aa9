"""Servers (Nova-like instances), flavors, and the hypervisor hosts containers and VMs run on."""

from __future__ import annotations

import time

from sqlalchemy import Float, Integer, String, Text, inspect, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base


class Flavor(Base):
    __tablename__ = "flavors"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    vcpus: Mapped[int] = mapped_column(Integer)
    ram: Mapped[int] = mapped_column(Integer)   # MB
    disk: Mapped[int] = mapped_column(Integer)  # GB
    # capabilities:profile, hypervisor_type, resources:... (Nova's extra specs).
    properties: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class HypervisorHost(Base):
    """A machine that runs container or VM servers (the undercloud's own, by default)."""

    __tablename__ = "hypervisor_hosts"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    hypervisor_type: Mapped[str] = mapped_column(String(32), primary_key=True)
    vcpus: Mapped[int] = mapped_column(Integer)      # schedulable (overcommit included)
    memory_mb: Mapped[int] = mapped_column(Integer)
    disk_gb: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class Server(Base):
    __tablename__ = "servers"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), index=True)
    hypervisor_type: Mapped[str] = mapped_column(String(300))  # container, vm, baremetal, openstack:<cloud>
    flavor: Mapped[dict] = mapped_column()  # the flavor as it was at create (Nova keeps a copy too)
    image_id: Mapped[str] = mapped_column(String(36))
    image_name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255), index=True)  # hypervisor host (container, vm)
    # The flavor's sizes again, as columns: placement sums them in SQL.
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    ram: Mapped[int] = mapped_column(Integer, default=0)
    disk: Mapped[int] = mapped_column(Integer, default=0)
    node_id: Mapped[str | None] = mapped_column(String(36))    # claimed node (bare metal)
    status: Mapped[str] = mapped_column(String(16), index=True)  # BUILD ACTIVE SHUTOFF REBUILD ERROR
    task: Mapped[str | None] = mapped_column(String(32))        # deleting, powering-off, ...
    fault: Mapped[str | None] = mapped_column(Text)
    task_at: Mapped[float] = mapped_column(Float, default=time.time)  # when BUILD / REBUILD began
    networks: Mapped[list] = mapped_column(default=list)    # requested
    addresses: Mapped[dict] = mapped_column(default=dict)   # network -> [ip]
    volumes: Mapped[list] = mapped_column(default=list)     # persistent volumes kept by rebuild
    notes: Mapped[list] = mapped_column(default=list)
    metadata_: Mapped[dict] = mapped_column("metadata", Encrypted, default=dict)  # may carry stack values
    owner: Mapped[str | None] = mapped_column(String(64))   # stack resource that made it
    state: Mapped[dict] = mapped_column(default=dict)       # the realiser's own state
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time, onupdate=time.time)


class Leftover(Base):
    """A server deleted while its host had no live worker (Nova's local delete): its machine
    is still on that host, whose worker removes it when it comes back (ServersService)."""

    __tablename__ = "server_leftovers"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # the server's
    name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255), index=True)
    hypervisor_type: Mapped[str] = mapped_column(String(300))
    volumes: Mapped[list] = mapped_column(default=list)
    state: Mapped[dict] = mapped_column(default=dict)  # the realiser's, as the record had it
    deleted_at: Mapped[float] = mapped_column(Float, default=time.time)


def add_missing_columns(bind) -> list[str]:
    """Columns added to these tables before the store had migrations: added with their
    default, sizes backfilled from the flavor copy. Returns them. Only stores made before
    Alembic can lack any (store/migrate.py calls this before stamping them); new columns
    come with a migration (store/migrations/versions)."""
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            return add_missing_columns(conn)
    conn = bind
    added = []
    insp = inspect(conn)
    for table in (Server.__table__, Flavor.__table__, HypervisorHost.__table__):
        if not insp.has_table(table.name):
            continue
        have = {c["name"] for c in insp.get_columns(table.name)}
        for col in table.columns:
            if col.name in have:
                continue
            default = col.default.arg if col.default is not None and not callable(col.default.arg) else None
            ddl = f"ALTER TABLE {table.name} ADD COLUMN {col.name} {col.type.compile(conn.dialect)}"
            if isinstance(default, (int, float)):
                ddl += f" DEFAULT {default}"
            conn.execute(text(ddl))
            added.append(f"{table.name}.{col.name}")
    if any(a in added for a in ("servers.vcpus", "servers.ram", "servers.disk")):
        t = Server.__table__
        for sid, f in conn.execute(select(t.c.id, t.c.flavor)).all():
            f = f or {}
            conn.execute(update(t).where(t.c.id == sid).values(
                vcpus=int(f.get("vcpus", 0)), ram=int(f.get("ram", 0)), disk=int(f.get("disk", 0))))
    return added
