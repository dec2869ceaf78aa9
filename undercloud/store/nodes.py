"""Nodes: the machines the undercloud manages, their NICs (ports) and their history."""

from __future__ import annotations

import time

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a UUID
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    driver: Mapped[str] = mapped_column(String(32))
    # BMC address, user, password...: encrypted; the password never leaves the service unmasked.
    driver_info: Mapped[dict] = mapped_column(Encrypted, default=dict)
    # Unique BMC identity (driver, address, port, system): one machine is enrolled once.
    bmc_key: Mapped[str] = mapped_column(String(512), unique=True)
    properties: Mapped[dict] = mapped_column(default=dict)
    resource_class: Mapped[str | None] = mapped_column(String(80))
    provision_state: Mapped[str] = mapped_column(String(32), index=True)
    target_state: Mapped[str | None] = mapped_column(String(32))
    provision_updated_at: Mapped[float] = mapped_column(Float, default=time.time)
    power_state: Mapped[str | None] = mapped_column(String(16))
    power_sync_failures: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    maintenance: Mapped[bool] = mapped_column(Boolean, default=False)
    maintenance_reason: Mapped[str | None] = mapped_column(Text)
    # Set atomically by the scheduler's claim; a node serves one server at a time.
    instance_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    instance_info: Mapped[dict] = mapped_column(default=dict)
    # When the claim was made: a claim whose server row never came (a crash between the two)
    # is released by the periodic loop after a grace (provisioning/scheduler.py).
    claimed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The worker doing the node's busy work (store/workers.py); None when the node is settled.
    reservation: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time, onupdate=time.time)


class Port(Base):
    __tablename__ = "node_ports"

    address: Mapped[str] = mapped_column(String(17), primary_key=True)  # MAC, lower case
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), index=True)


class NodeEvent(Base):
    """What happened to a node: transitions, power changes, drift, errors (no secrets)."""

    __tablename__ = "node_events"
    __table_args__ = (Index("ix_node_events_node_at", "node_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Float, default=time.time)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
