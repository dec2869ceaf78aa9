"""Small writes from many threads, committed together.

A fleet's update publishes thousands of deployments from the engine's threads while the
agents' signals arrive on the API's: each alone is one statement, and its own transaction
costs more than the statement (a commit, a wait for SQLite's single writer). Callers hand
their statements here; whoever finds no commit running commits everything queued by then
in one transaction, while the others wait for it (group commit). A batch the store refuses
is tried again one write at a time, so one bad write fails alone.

    writes = GroupCommit(store.engine)
    rows = writes.run(lambda conn: conn.execute(stmt).rowcount)   # returns once committed
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection, Engine

MAX_BATCH = 500  # writes per transaction: a batch holds SQLite's write lock this long at most


class _Write:
    __slots__ = ("op", "done", "result", "error")

    def __init__(self, op: Callable[[Connection], Any]):
        self.op, self.done, self.result, self.error = op, False, None, None


class GroupCommit:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._cond = threading.Condition()
        self._queue: list[_Write] = []
        self._committing = False

    def run(self, op: Callable[[Connection], Any]) -> Any:
        """Run `op(conn)` in a transaction shared with the writes queued beside it; returns
        its result once committed, or raises what it raised (alone)."""
        return self.wait(self.submit(op))

    def submit(self, op: Callable[[Connection], Any]) -> _Write:
        """Queue `op` without waiting: writes are committed in the order they were queued
        (a caller queues under its own lock to keep its order)."""
        w = _Write(op)
        with self._cond:
            self._queue.append(w)
        return w

    def wait(self, mine: _Write) -> Any:
        """Wait until `mine` is committed (committing the queue if nobody is); its result."""
        with self._cond:
            while not mine.done:
                if self._committing:
                    self._cond.wait()
                    continue
                self._committing = True  # this caller commits what is queued now
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._cond.release()
                try:
                    self._commit(batch)
                finally:
                    self._cond.acquire()
                    for w in batch:
                        if not w.done:  # the committer was interrupted: nobody waits forever
                            w.error, w.done = RuntimeError("the write was not committed"), True
                    self._committing = False
                    self._cond.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.result

    def _commit(self, batch: list[_Write]) -> None:
        try:
            with self.engine.begin() as conn:
                results = [w.op(conn) for w in batch]
        except Exception as exc:  # noqa: BLE001 - which write failed is found by trying each alone
            if len(batch) == 1:
                batch[0].error, batch[0].done = exc, True
                return
            for w in batch:
                try:
                    with self.engine.begin() as conn:
                        w.result = w.op(conn)
                except Exception as exc:  # noqa: BLE001 - handed to its caller
                    w.error = exc
                w.done = True
            return
        for w, r in zip(batch, results):
            w.result, w.done = r, True
