"""store/group_commit.py: writes from many threads share transactions; a bad one fails alone."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, event, select
from sqlalchemy.exc import IntegrityError

from undercloud.store.group_commit import GroupCommit

meta = MetaData()
rows = Table("rows", meta, Column("id", Integer, primary_key=True), Column("v", String))


@pytest.fixture
def engine(tmp_path):
    eng = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    meta.create_all(eng)
    commits = []
    event.listen(eng, "commit", lambda conn: commits.append(1))
    eng.commits = commits
    return eng


def insert(i, v="x"):
    return lambda conn: conn.execute(rows.insert(), {"id": i, "v": v}).rowcount


def stored(engine):
    with engine.connect() as conn:
        return dict(conn.execute(select(rows.c.id, rows.c.v)).all())


def test_writes_queued_together_are_committed_in_one_transaction_each_getting_its_result(engine):
    writes = GroupCommit(engine)
    pending = [writes.submit(insert(i)) for i in range(50)]
    assert writes.wait(pending[-1]) == 1  # the last one's caller commits all that was queued
    assert all(p.done and p.result == 1 for p in pending)
    assert len(engine.commits) == 1 and len(stored(engine)) == 50


def test_threads_writing_at_once_share_commits_and_lose_nothing(engine):
    writes = GroupCommit(engine)
    errors = []
    # the first commit is held until every thread has queued a write: the next one must share
    go, held = threading.Event(), []
    event.listen(engine, "commit", lambda conn: held or (held.append(1), go.wait(10)))

    def worker(base):
        try:
            for i in range(base, base + 40):
                assert writes.run(insert(i)) == 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(t * 1000,)) for t in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(writes._queue) < 7 and time.monotonic() < deadline:  # the 7 others wait behind it
        time.sleep(0.01)
    go.set()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(stored(engine)) == 320
    assert len(engine.commits) < 320  # some writes shared a transaction


def test_a_write_the_store_refuses_fails_alone_and_the_others_of_its_batch_are_kept(engine):
    writes = GroupCommit(engine)
    writes.run(insert(1, "first"))
    good, bad, also_good = writes.submit(insert(2)), writes.submit(insert(1, "again")), writes.submit(insert(3))
    assert writes.wait(good) == 1
    with pytest.raises(IntegrityError):
        writes.wait(bad)
    assert writes.wait(also_good) == 1
    assert stored(engine) == {1: "first", 2: "x", 3: "x"}


def test_writes_are_applied_in_the_order_they_were_queued(engine):
    writes = GroupCommit(engine)
    writes.run(insert(1, "a"))
    updates = [writes.submit(lambda conn, v=v: conn.execute(rows.update().values(v=v))) for v in "bcd"]
    writes.wait(updates[0])  # commits all three in one batch
    assert all(u.done for u in updates)
    assert stored(engine) == {1: "d"}
