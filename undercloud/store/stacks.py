"""Stacks, their resources and events (the orchestration engine's state).

A nested stack is a row like any other, with `parent_id`/`parent_resource` set and the
same `root_id` as its whole tree, so one query loads a tree. The engine writes these tables
in batches (SQLAlchemy Core executemany), never row by row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.names import NAME_MAX  # a stack's name, root or nested (Heat's limit too)
from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base


class Stack(Base):
    __tablename__ = "stacks"
    # One root stack per name (NULL parent_ids are distinct in a plain unique index).
    __table_args__ = (Index("uq_stacks_root_name", "name", unique=True, sqlite_where=text("parent_id IS NULL"),
                            postgresql_where=text("parent_id IS NULL")),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX), index=True)
    root_id: Mapped[str] = mapped_column(String(36), index=True)
    parent_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    parent_resource: Mapped[str | None] = mapped_column(String(255), nullable=True)
    path: Mapped[str] = mapped_column(String(1024), default="")  # dotted resource path from the root
    action: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    # Root stacks: the Bundle (template files) and user parameters; nested stacks: the
    # parameters their parent resource passed (resolved properties). Encrypted: hidden
    # parameters, and environments carrying them, are among them.
    bundle: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    parameters: Mapped[Any] = mapped_column(Encrypted, default=dict)
    # What the stack converged to before the current update: the rollback target.
    prev_bundle: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    prev_parameters: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    # The operation under way (kind, rollback flag, timeout, cancel request), for resume.
    operation: Mapped[Any] = mapped_column(JSON, nullable=True)
    outputs: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    # Root stacks: the texts of every hidden value of the tree (service.py masks them in each
    # read), whatever gave it (parameters, environments, a parent's properties).
    secrets: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Root stacks: the worker running the operation under way (store/workers.py).
    engine_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Root stacks: the operation's generation, bumped by every operation start and every
    # take-over (compare-and-set). Each flush of a walk is conditional on the generation it
    # started with, so a walk whose operation was taken over (fenced) writes nothing more.
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class StackResource(Base):
    __tablename__ = "stack_resources"
    __table_args__ = (Index("ix_stack_resources_stack_name", "stack_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    stack_id: Mapped[str] = mapped_column(String(36))
    root_id: Mapped[str] = mapped_column(String(36), index=True)
    name: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    physical_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    ref: Mapped[str | None] = mapped_column(Text, nullable=True)  # what get_resource returns
    requires: Mapped[Any] = mapped_column(JSON, nullable=True)  # names it depended on (delete order)
    # Encrypted: resolved values (hidden parameters passed on, rendered configs, tokens).
    properties: Mapped[Any] = mapped_column(Encrypted, nullable=True)  # resolved, as last applied
    rsrc_metadata: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    attributes: Mapped[Any] = mapped_column(Encrypted, nullable=True)  # stored at completion
    data: Mapped[Any] = mapped_column(Encrypted, nullable=True)  # the plugin's own state (e.g. a signal token)
    nested_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # Set on the old resource of a replacement until it is deleted (kept for rollback).
    replaced_by: Mapped[str | None] = mapped_column(String(36), nullable=True)
    deletion_policy: Mapped[str] = mapped_column(String(16), default="Delete")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class StackEvent(Base):
    __tablename__ = "stack_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    root_id: Mapped[str] = mapped_column(String(36), index=True)
    stack_id: Mapped[str] = mapped_column(String(36))
    stack_name: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(String(1024), default="")  # dotted nested-stack path
    resource_name: Mapped[str] = mapped_column(String(255))
    physical_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    resource_type: Mapped[str] = mapped_column(String(255), default="")
    action: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    time: Mapped[float] = mapped_column(Float)
