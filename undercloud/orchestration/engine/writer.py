"""Batched persistence of a walk: rows, stacks and events go to the store in one
transaction per flush (SQLAlchemy Core executemany), never one statement per resource.

A walk's writer is fenced by its root stack's operation `generation`: each flush first
runs one UPDATE conditional on it (a row lock on PostgreSQL, the write lock on SQLite, so a
take-over waits for the flush or the flush sees the take-over), and writes nothing when the
operation moved on (`Fenced`): one statement per flush, not per row."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, delete, insert, update

from undercloud.orchestration.limits import LIMITS, cut
from undercloud.store import Store
from undercloud.store.stacks import Stack, StackEvent, StackResource

RES = StackResource.__table__
STACKS = Stack.__table__
EVENTS = StackEvent.__table__
RES_COLUMNS = [c.name for c in RES.columns if c.name != "id"]
RES_MUTABLE = [c for c in RES_COLUMNS if c not in ("uuid", "stack_id", "root_id", "name", "created_at")]
STACK_COLUMNS = [c.name for c in STACKS.columns]
log = logging.getLogger("undercloud.engine")


class Fenced(Exception):
    """The operation this writer wrote for was taken over or superseded (its root stack's
    generation moved on): nothing of the flush was written, nor will be."""


@dataclass(slots=True, eq=False)
class ResourceRow:
    """A stored resource as the engine holds it: the columns of `StackResource` but its `id`.
    The engine changes it in place; the writer stores its latest state at the next flush.
    Compared by identity (the engine looks rows up in lists by `is`/`in`)."""

    uuid: str
    stack_id: str
    root_id: str
    name: str
    type: str
    action: str
    status: str
    status_reason: str = ""
    physical_id: str | None = None
    ref: Any = None  # what get_resource returns
    requires: list[str] | None = field(default_factory=list)  # names it depended on (delete order)
    properties: dict | None = None  # resolved, as last applied
    rsrc_metadata: Any = None
    attributes: dict | None = None  # stored at completion
    data: dict | None = field(default_factory=dict)  # the plugin's own state
    nested_id: str | None = None
    replaced_by: str | None = None  # the new row of a replacement, until this one is deleted
    deletion_policy: str = "Delete"
    created_at: float = 0.0
    updated_at: float | None = None

    @classmethod
    def from_store(cls, stored: Mapping[str, Any]) -> ResourceRow:
        """A row as read from the table (its `id` dropped; no data is an empty dict)."""
        row = cls(**{c: stored[c] for c in RES_COLUMNS})
        if row.data is None:
            row.data = {}
        return row

    def values(self, columns: list[str]) -> dict[str, Any]:
        return {c: getattr(self, c) for c in columns}


class Writer:
    def __init__(self, store: Store, clean: Callable[[str], str] | None = None,
                 guard: tuple[str, int] | None = None):
        self.store = store
        # (root stack id, generation): every flush writes only while the root's operation
        # still has that generation (an operation start sets the new one in the same flush)
        self.guard = guard
        self.fenced = False
        # every reason written is cut to the message limit, and passes through `clean` when the
        # walk has hidden values to mask: status reasons and events never carry more than a line
        self.clean: Callable[[str], str] | None = clean
        self.new_rows: dict[str, ResourceRow] = {}
        self.dirty_rows: dict[str, ResourceRow] = {}
        self.gone_rows: set[str] = set()
        self.new_stacks: dict[str, dict] = {}
        self.dirty_stacks: dict[str, dict] = {}
        self.gone_stacks: set[str] = set()
        self.events: list[dict] = []
        self.events_written = 0
        self.last_flush = time.monotonic()

    # -- queueing (rows are the walker's own dicts: the latest state is written) ----------
    def insert_row(self, row: ResourceRow) -> None:
        self.new_rows[row.uuid] = row

    def touch_row(self, row: ResourceRow) -> None:
        if row.uuid not in self.new_rows:
            self.dirty_rows[row.uuid] = row

    def drop_row(self, row: ResourceRow) -> None:
        if self.new_rows.pop(row.uuid, None) is None:
            self.gone_rows.add(row.uuid)
        self.dirty_rows.pop(row.uuid, None)

    def insert_stack(self, st: dict) -> None:
        self.new_stacks[st["id"]] = st

    def touch_stack(self, st: dict) -> None:
        if st["id"] not in self.new_stacks:
            self.dirty_stacks[st["id"]] = st

    def drop_stack(self, stack_id: str) -> None:
        if self.new_stacks.pop(stack_id, None) is None:
            self.gone_stacks.add(stack_id)
        self.dirty_stacks.pop(stack_id, None)

    def event(self, root_id: str, stack: dict, resource_name: str, rtype: str, physical_id: str | None,
              action: str, status: str, reason: str) -> None:
        self.events.append({
            "root_id": root_id, "stack_id": stack["id"], "stack_name": stack["name"], "path": stack["path"],
            "resource_name": resource_name, "resource_type": rtype, "physical_id": physical_id,
            "action": action, "status": status,
            "reason": self._reason(reason) if reason and (self.clean is not None or len(reason) > LIMITS.message_chars)
            else reason,
            "time": time.time(),
        })

    @property
    def pending(self) -> bool:
        return bool(self.new_rows or self.dirty_rows or self.gone_rows or self.new_stacks
                    or self.dirty_stacks or self.gone_stacks or self.events)

    def flush(self) -> None:
        """Write what is pending in one transaction; raises `Fenced` (writing nothing, then
        or later) when the guard's operation moved on."""
        self.last_flush = time.monotonic()
        if not self.pending:
            return
        if self.fenced:
            self._clear()
            raise Fenced(self.guard[0] if self.guard else "")
        try:
            self._write()
        except Fenced:
            self.fenced = True
            self._clear()
            raise
        self.events_written += len(self.events)
        self._clear()

    def _write(self) -> None:
        with self.store.engine.begin() as conn:
            if self.guard is not None:
                root_id, gen = self.guard
                # generation=generation: a write that changes nothing, for its condition and lock
                held = conn.execute(update(STACKS).where(STACKS.c.id == root_id, STACKS.c.generation == gen)
                                    .values(generation=STACKS.c.generation)).rowcount
                if held != 1:
                    log.warning("stack %s: its operation moved on from generation %d (taken over or "
                                "superseded); this walk's writes are refused", root_id, gen)
                    raise Fenced(root_id)
            if self.new_stacks:
                conn.execute(insert(STACKS), [self._cols(s, STACK_COLUMNS) for s in self.new_stacks.values()])
            if self.dirty_stacks:
                cols = [c for c in STACK_COLUMNS if c != "id"]
                stmt = update(STACKS).where(STACKS.c.id == bindparam("b_id")).values(
                    {c: bindparam(c) for c in cols})
                conn.execute(stmt, [{"b_id": s["id"], **self._cols(s, cols)} for s in self.dirty_stacks.values()])
            if self.new_rows:
                conn.execute(insert(RES), [self._clean(r.values(RES_COLUMNS)) for r in self.new_rows.values()])
            if self.dirty_rows:
                stmt = update(RES).where(RES.c.uuid == bindparam("b_uuid")).values(
                    {c: bindparam(c) for c in RES_MUTABLE})
                conn.execute(stmt, [{"b_uuid": r.uuid, **self._clean(r.values(RES_MUTABLE))}
                                    for r in self.dirty_rows.values()])
            if self.gone_rows:
                gone = list(self.gone_rows)
                for i in range(0, len(gone), 500):
                    conn.execute(delete(RES).where(RES.c.uuid.in_(gone[i:i + 500])))
            if self.gone_stacks:
                gone = list(self.gone_stacks)
                for i in range(0, len(gone), 500):
                    conn.execute(delete(STACKS).where(STACKS.c.id.in_(gone[i:i + 500])))
            if self.events:
                conn.execute(insert(EVENTS), self.events)

    def _clear(self) -> None:
        for d in (self.new_rows, self.dirty_rows, self.new_stacks, self.dirty_stacks):
            d.clear()
        self.gone_rows.clear()
        self.gone_stacks.clear()
        self.events = []


    def _reason(self, text: str) -> str:
        if self.clean is not None:
            return self.clean(text)
        return text if len(text) <= LIMITS.message_chars else cut(text)

    def _cols(self, d: dict, cols: list[str]) -> dict[str, Any]:
        out = self._clean({c: d.get(c) for c in cols})
        if "generation" in out and out["generation"] is None:  # a nested stack's row: never an operation's
            out["generation"] = 0
        return out

    def _clean(self, out: dict[str, Any]) -> dict[str, Any]:
        """`out` with its status reason as it may be stored."""
        reason = out.get("status_reason")
        if reason and (self.clean is not None or len(reason) > LIMITS.message_chars):
            out["status_reason"] = self._reason(reason)
        return out
