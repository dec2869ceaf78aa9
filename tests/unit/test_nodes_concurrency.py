"""Node work under load (issue 17): a pool sized from the store, work beyond it queued, and a
busy store is waited for — never a reason to fail a node."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from tests.conftest import own_store_url
from undercloud.provisioning import nodes as nodes_mod
from undercloud.provisioning import states
from undercloud.provisioning.nodes import NodeService, default_workers, patient, store_busy
from undercloud.store import Store, db
from undercloud.store.nodes import Node


def locked() -> sa_exc.OperationalError:
    return sa_exc.OperationalError("UPDATE nodes ...", {}, Exception("database is locked"))


def inventory(n: int) -> str:
    return json.dumps({"nodes": [{"name": f"c-{i}", "pm_type": "fake", "pm_addr": f"c-{i}"} for i in range(n)]})


def wait_for(svc: NodeService, state: str, n: int) -> None:
    import time

    deadline = time.monotonic() + 120
    while True:
        with svc.store.session() as s:
            done = s.scalar(select(func.count()).select_from(Node).where(Node.provision_state == state))
            bad = s.scalar(select(func.count()).select_from(Node).where(Node.last_error.is_not(None)))
        assert bad == 0
        if done == n:
            return
        assert time.monotonic() < deadline, f"{done} of {n} reached {state}"
        time.sleep(0.05)


def test_patient_waits_out_a_busy_store_and_nothing_else(monkeypatch):
    monkeypatch.setattr(nodes_mod.time, "sleep", lambda s: None)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise locked() if len(calls) % 2 else sa_exc.TimeoutError("QueuePool limit reached")
        return "ok"

    assert patient(flaky) == "ok" and len(calls) == 4
    assert store_busy(locked()) and store_busy(sa_exc.TimeoutError())
    broken = sa_exc.OperationalError("x", {}, Exception("no such table: nodes"))
    assert not store_busy(broken)
    with pytest.raises(sa_exc.OperationalError):
        patient(lambda: (_ for _ in ()).throw(broken))


def test_a_busy_store_during_node_work_does_not_fail_the_node(tmp_path, monkeypatch):
    svc = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema())
    svc.import_nodes(inventory(3))
    real = svc.record
    failures = {"n": 0}

    def record(ident):
        if failures["n"] < 5:
            failures["n"] += 1
            raise locked()
        return real(ident)

    monkeypatch.setattr(svc, "record", record)
    for i in range(3):
        svc.act(f"c-{i}", "manage")
    wait_for(svc, states.MANAGEABLE, 3)
    assert failures["n"] == 5
    svc.close()


def test_more_work_than_connections_queues_and_completes(tmp_path, monkeypatch):
    for kind in db.POOL:  # three connections for 40 callers and the workers
        monkeypatch.setitem(db.POOL, kind, (1, 2))
    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    assert store.capacity == 3
    svc = NodeService(store)
    assert svc.workers == default_workers(store) == 2
    n = 150
    svc.import_nodes(inventory(n))
    with ThreadPoolExecutor(40) as pool:
        list(pool.map(lambda i: svc.act(f"c-{i}", "manage"), range(n)))
    wait_for(svc, states.MANAGEABLE, n)
    with ThreadPoolExecutor(40) as pool:
        list(pool.map(lambda i: svc.act(f"c-{i}", "provide"), range(n)))
    wait_for(svc, states.AVAILABLE, n)
    svc.close()


def test_workers_follow_the_store():
    class S:
        def __init__(self, capacity):
            self.capacity = capacity

    assert default_workers(S(64)) == 16 and default_workers(S(24)) == 6 and default_workers(S(3)) == 2
    assert default_workers(S(1000)) == 16
