"""Workflows the service runs for an overcloud (deploy, update, ...): one row each, with its
input (encrypted at rest, as stack parameters are), the input's digest, status, result and
the worker that runs it; and its events, the lines of progress a client follows by sequence.

One RUNNING workflow per overcloud: `start` decides under the row lock of the overcloud's
running one (a unique partial key is not portable; a conditional insert in one transaction
is) whether a request attaches (same input digest), conflicts (another) or starts anew."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import Float, Integer, String, Text, select, update
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.errors import Conflict, NotFound
from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base, Store


class Workflow(Base):
    __tablename__ = "workflows"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    stack: Mapped[str] = mapped_column(String(255), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    input: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    digest: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    result: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    runs: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time)


class WorkflowEvent(Base):
    __tablename__ = "workflow_events"

    workflow_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[float] = mapped_column(Float)
    stream: Mapped[str] = mapped_column(String(8))  # "err": a progress line; "out": a result line
    text: Mapped[str] = mapped_column(Text)


def _show(w: Workflow) -> dict[str, Any]:
    return {"id": w.id, "stack": w.stack, "kind": w.kind, "status": w.status, "digest": w.digest,
            "result": w.result, "worker": w.worker_id, "runs": w.runs,
            "created_at": w.created_at, "updated_at": w.updated_at}


class Workflows:
    def __init__(self, store: Store):
        self.store = store

    def start(self, stack: str, kind: str, input: dict, digest: str, worker: str) -> tuple[dict, bool]:
        """(the workflow, True if new): the running one of `stack` when its digest is
        `digest`; Conflict naming it when another runs."""
        with self.store.session() as s:
            running = s.execute(select(Workflow).where(Workflow.stack == stack, Workflow.status == "RUNNING")
                                .with_for_update()).scalars().first()
            if running is not None:
                if running.kind == kind and running.digest == digest:
                    return _show(running), False
                raise Conflict(f"overcloud {stack}: workflow {running.id} ({running.kind}) is running with "
                               f"another input; wait for it to end (the command that started it, run again, follows it)",
                               "workflow")
            now = time.time()
            w = Workflow(id=uuid.uuid4().hex, stack=stack, kind=kind, input=input, digest=digest, status="RUNNING",
                         worker_id=worker, runs=1, created_at=now, updated_at=now)
            s.add(w)
            s.flush()
            return _show(w), True

    def get(self, wid: str) -> dict[str, Any]:
        with self.store.session() as s:
            w = s.get(Workflow, wid)
            if w is None:
                raise NotFound(f"no workflow {wid[:64]!r}", "workflow")
            return _show(w)

    def input(self, wid: str) -> dict[str, Any]:
        with self.store.session() as s:
            return s.get(Workflow, wid).input

    def list(self, stack: str | None = None) -> list[dict[str, Any]]:
        q = select(Workflow).order_by(Workflow.created_at)
        if stack:
            q = q.where(Workflow.stack == stack)
        with self.store.session() as s:
            return [_show(w) for w in s.scalars(q)]

    def add_event(self, wid: str, text: str, stream: str = "err") -> int:
        """Appends a line; its sequence number (1, 2, ...). One writer per workflow (its runner)."""
        with self.store.session() as s:
            last = s.scalar(select(WorkflowEvent.seq).where(WorkflowEvent.workflow_id == wid)
                            .order_by(WorkflowEvent.seq.desc()).limit(1)) or 0
            s.add(WorkflowEvent(workflow_id=wid, seq=last + 1, time=time.time(), stream=stream, text=text))
        return last + 1

    def events(self, wid: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        with self.store.session() as s:
            rows = s.scalars(select(WorkflowEvent).where(WorkflowEvent.workflow_id == wid, WorkflowEvent.seq > after)
                             .order_by(WorkflowEvent.seq).limit(limit))
            return [{"seq": e.seq, "time": e.time, "stream": e.stream, "text": e.text} for e in rows]

    def finish(self, wid: str, worker: str, run: int, status: str, result: Any) -> bool:
        """Ends the workflow if `worker` still runs it as run number `run` (a claim after a
        restart or by another worker fences the run before)."""
        with self.store.engine.begin() as conn:
            return conn.execute(update(Workflow).where(Workflow.id == wid, Workflow.worker_id == worker,
                                                       Workflow.runs == run, Workflow.status == "RUNNING")
                                .values(status=status, result=result, updated_at=time.time())).rowcount == 1

    def claim(self, live: set[str], worker: str, own: bool = True, others: bool = True) -> list[str]:
        """The RUNNING workflows whose worker is not alive (with `others`) and those this
        worker ran before (with `own`: at its start), claimed by this one (one conditional
        update each: of two claimants one wins)."""
        with self.store.session() as s:
            rows = [(w.id, w.worker_id, w.runs) for w in s.scalars(select(Workflow).where(Workflow.status == "RUNNING"))]
        taken = []
        for wid, owner, runs in rows:
            if (owner == worker and not own) or (owner != worker and (owner in live or not others)):
                continue
            with self.store.engine.begin() as conn:
                if conn.execute(update(Workflow).where(Workflow.id == wid, Workflow.worker_id == owner,
                                                       Workflow.status == "RUNNING")
                                .values(worker_id=worker, runs=runs + 1, updated_at=time.time())).rowcount:
                    taken.append(wid)
        return taken
