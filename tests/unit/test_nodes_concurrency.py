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
    real = svc._outcomes_txn  # the transaction writing what the nodes' work came to
    failures = {"n": 0}

    def outcomes_txn(outs):
        if failures["n"] < 5:
            failures["n"] += 1
            raise locked()
        return real(outs)

    monkeypatch.setattr(svc, "_outcomes_txn", outcomes_txn)
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


def test_batches_racing_each_other_and_other_node_operations(tmp_path):
    """Batched verbs from several requests at once, on the same nodes and beside power, maintenance,
    power sync, timeouts and deletion of other nodes: every node moves once per verb, with one
    event for each move, and nothing fails."""
    import time

    from undercloud.errors import Conflict
    from undercloud.store.nodes import NodeEvent

    svc = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=4)
    n, others = 60, 12
    svc.import_nodes(inventory(n + others))
    batch = [f"c-{i}" for i in range(n)]
    side = [f"c-{i}" for i in range(n, n + others)]
    for name in side[:8]:
        svc.act(name, "manage")
    wait_for(svc, states.MANAGEABLE, 8)
    errors: list[BaseException] = []

    def race(verb: str, order: list[str]) -> None:
        try:
            svc.act_many(order, verb)
        except Conflict:
            pass  # another request moved a node of this one first: the refusal stops it there
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def meanwhile(k: int, delete: bool) -> None:
        try:
            name = side[k % 8]
            svc.set_power(name, "on" if k % 2 else "off")
            svc.set_maintenance(name, True, "racing")
            svc.set_maintenance(name, False)
            svc.sync_power()
            svc.check_timeouts()
            if delete and k < 4:
                svc.delete(side[8 + k])  # enrolled, untouched: may go while others move
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    for verb, want in (("manage", states.MANAGEABLE), ("provide", states.AVAILABLE)):
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(race, verb, batch if k % 2 else batch[::-1]) for k in range(6)]
            futures += [pool.submit(meanwhile, k, verb == "manage") for k in range(6)]
            for f in futures:
                f.result()
        assert not errors, errors
        deadline = time.monotonic() + 120
        while True:
            with svc.store.session() as s:
                done = s.scalar(select(func.count()).select_from(Node).where(
                    Node.name.in_(batch), Node.provision_state == want))
            if done == n:
                break
            assert time.monotonic() < deadline, f"{done} of {n} reached {want}"
            time.sleep(0.05)
    with svc.store.session() as s:
        rows = s.execute(select(Node.name, NodeEvent.message).join(Node, Node.id == NodeEvent.node_id)
                         .where(NodeEvent.kind == "state", Node.name.in_(batch)).order_by(NodeEvent.id)).all()
        assert s.scalar(select(func.count()).select_from(Node).where(Node.last_error.is_not(None))) == 0
        assert s.scalar(select(func.count()).select_from(Node)) == n + others - 4
    per_node: dict[str, list[str]] = {}
    for name, message in rows:
        per_node.setdefault(name, []).append(message)
    want_history = ["enrolled from instackenv.json with driver fake", "enroll -> verifying (manage)",
                    "verifying -> manageable (done)", "manageable -> cleaning (provide)", "cleaning -> available (done)"]
    assert all(per_node[name] == want_history for name in batch), per_node
    svc.close()
