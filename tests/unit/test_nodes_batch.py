"""Node verbs in batches (issue 42): shared transactions, one BMC session per BMC, each node's
own events and its own failure."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import event, select

from tests.conftest import own_store_url
from undercloud.errors import Conflict, NotFound
from undercloud.provisioning import nodes as nodes_mod
from undercloud.provisioning import states
from undercloud.provisioning.drivers import fake
from undercloud.provisioning.nodes import BootDiskDeploy, NodeService
from undercloud.store import Store
from undercloud.store.nodes import NodeEvent

SECRET = "batch-secret-77"


def entry(name: str, addr: str, i: int, **extra) -> dict:
    return {"name": name, "pm_type": "fake", "pm_addr": addr, "pm_user": "admin", "pm_password": SECRET,
            "ports": [{"address": f"52:54:00:22:{i >> 8:02x}:{i & 255:02x}"}], **extra}


def env(*entries) -> str:
    return json.dumps({"nodes": list(entries)})


@pytest.fixture
def svc(tmp_path):
    fake.reset()
    s = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=4)
    yield s
    s.close()


def settle(svc: NodeService, names: list[str], timeout: float = 30) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = {n["name"]: n for n in svc.list() if n["name"] in names}
        if all(states.is_stable(n["provision_state"]) for n in got.values()) and len(got) == len(names):
            return got
        assert time.monotonic() < deadline, {k: v["provision_state"] for k, v in got.items()}
        time.sleep(0.02)


def history(svc: NodeService, name: str) -> list[str]:
    return [e["message"] for e in svc.events(name) if e["kind"] in ("state", "inspect")]


def count_node_updates(store: Store, src: str) -> list[int]:
    """UPDATE statements on the nodes table moving nodes from `src`, as the database gets them."""
    seen = [0]

    def before(conn, cursor, statement, params, context, executemany):
        values = params.values() if isinstance(params, dict) else params
        if statement.lstrip().upper().startswith("UPDATE NODES") and src in values:
            seen[0] += 1

    event.listen(store.engine, "before_cursor_execute", before)
    return seen


def test_a_batch_moves_every_node_with_its_own_events_as_one_at_a_time(svc):
    n = 40
    svc.import_nodes(env(*[entry(f"b{i:02d}", f"bat-{i}", i) for i in range(n)], entry("solo", "solo", 999)),
                     "rack.json")
    names = [f"b{i:02d}" for i in range(n)]
    updates = count_node_updates(svc.store, "enroll")
    shown = svc.act_many(names, "manage")
    # one request: one transaction, one UPDATE for its 40 nodes; each answer as `act` gives it
    assert updates[0] == 1
    assert [v["name"] for v in shown] == names
    assert {v["provision_state"] for v in shown} == {"verifying"}
    assert all(v["target_state"] == "manageable" and v["allowed_verbs"] == [] for v in shown)
    assert all(v["driver_info"]["password"] == "******" and v["ports"] for v in shown)
    settle(svc, names)
    svc.act_many(names, "inspect")
    settle(svc, names)
    svc.act_many(names, "provide")
    got = settle(svc, names)
    assert {v["provision_state"] for v in got.values()} == {"available"}
    assert all(v["power_state"] == "off" and v["properties"]["memory_mb"] == 4096 for v in got.values())

    # the same verbs for one node, one request at a time: the reference history
    for verb in ("manage", "inspect", "provide"):
        svc.act("solo", verb)
        settle(svc, ["solo"])
    reference = history(svc, "solo")
    assert reference == [
        "enrolled from rack.json with driver fake",
        "enroll -> verifying (manage)", "verifying -> manageable (done)",
        "manageable -> inspecting (inspect)", "found cpus=2, memory_mb=4096, local_gb=40, cpu_arch=x86_64; MACs []",
        "inspecting -> manageable (done)",
        "manageable -> cleaning (provide)", "cleaning -> available (done)"]
    for name in names:
        assert history(svc, name) == reference, name


def test_finished_work_queued_together_shares_one_transaction(svc, monkeypatch):
    n = 30
    svc.import_nodes(env(*[entry(f"q{i}", f"q-{i}", i) for i in range(n)]))
    names = [f"q{i}" for i in range(n)]
    gate, sizes = threading.Event(), []
    real = svc._outcomes_txn

    def outcomes_txn(outs):
        sizes.append(len(outs))
        assert gate.wait(20)  # the first one holds the writer while the others finish their work
        return real(outs)

    monkeypatch.setattr(svc, "_outcomes_txn", outcomes_txn)
    svc.act_many(names, "manage")
    deadline = time.monotonic() + 20
    while not sizes or svc.writer.queue.qsize() < n - sizes[0]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.set()
    got = settle(svc, names)
    assert {v["provision_state"] for v in got.values()} == {"manageable"}
    assert sum(sizes) == n and len(sizes) <= 2  # not one transaction per node
    # within the shared transaction each node still got its own event, once
    with svc.store.session() as s:
        done = s.scalars(select(NodeEvent.node_id).where(NodeEvent.message == "verifying -> manageable (done)")).all()
    assert sorted(done) == sorted(v["uuid"] for v in got.values())


def test_one_failing_bmc_fails_its_node_only(svc):
    svc.import_nodes(env(*[entry(f"f{i}", f"rack1/sys{i}", i) for i in range(8)],
                         entry("badpw", "rack1/sys8", 8, fake_fail=["validate"]),
                         entry("nopower", "rack1/sys9", 9, fake_fail=["power"]),
                         entry("gone", "rack2/sys0", 10, fake_fail=["login"])))
    names = [f"f{i}" for i in range(8)]
    svc.act_many(["f0", "f1", "badpw", "f2", "f3", "nopower", "f4", "gone", "f5", "f6", "f7"], "manage")
    got = settle(svc, names + ["badpw", "nopower", "gone"])
    assert all(got[n]["provision_state"] == "manageable" and got[n]["last_error"] is None for n in names)
    assert got["badpw"]["provision_state"] == "enroll"
    assert got["badpw"]["last_error"] == "fake BMC rack1/sys8 refused the credentials of user 'admin'"
    assert got["nopower"]["provision_state"] == "enroll"
    assert got["nopower"]["last_error"] == "fake BMC rack1/sys9: power failed (fake)"
    assert got["gone"]["last_error"] == "fake BMC rack2/sys0: no answer to the login (fake)"
    assert history(svc, "badpw")[-1] == ("verifying -> enroll (fail): fake BMC rack1/sys8 refused the credentials "
                                          "of user 'admin'")
    assert SECRET not in json.dumps([got, [svc.events(n) for n in got]])


def test_an_inspection_that_fails_writes_nothing_of_it_and_the_batch_goes_on(svc):
    svc.import_nodes(env(entry("owner", "i-0", 1), entry("i1", "i-1", 2),
                         entry("clash", "i-2", 3), entry("i3", "i-3", 4)))
    # `clash` finds a NIC that is `owner`'s port
    from undercloud.store.nodes import Node

    with svc.store.session() as s:
        n = s.scalars(select(Node).where(Node.name == "clash")).one()
        n.driver_info = {**n.driver_info, "inventory": {"cpus": 64, "macs": ["52:54:00:22:00:01"]}}
    svc.act_many(["i1", "clash", "i3"], "manage")
    settle(svc, ["i1", "clash", "i3"])
    svc.act_many(["i1", "clash", "i3"], "inspect")
    got = settle(svc, ["i1", "clash", "i3"])
    assert got["clash"]["provision_state"] == "inspect failed"
    assert got["clash"]["last_error"] == "inspection found MAC 52:54:00:22:00:01, which belongs to node " + \
        svc.get("owner")["uuid"]
    assert got["clash"]["properties"] == {} and got["clash"]["ports"] == ["52:54:00:22:00:03"]  # nothing half-written
    assert got["i1"]["provision_state"] == got["i3"]["provision_state"] == "manageable"
    assert got["i1"]["properties"]["cpus"] == 2


def test_nodes_behind_one_bmc_share_one_login_per_batch(svc):
    # two BMCs each serving six systems (as a Redfish chassis manager does), and two alone
    svc.import_nodes(env(*[entry(f"a{i}", f"bmc-a/s{i}", i) for i in range(6)],
                         *[entry(f"b{i}", f"bmc-b/s{i}", 10 + i) for i in range(6)],
                         entry("c", "bmc-c", 20), entry("d", "bmc-d", 21)))
    batch = [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)] + ["c", "d"]
    svc.act_many(batch, "manage")
    settle(svc, batch)
    assert fake.logins == {"bmc-a": 1, "bmc-b": 1, "bmc-c": 1, "bmc-d": 1}
    svc.act_many(batch, "provide")
    settle(svc, batch)
    assert fake.logins == {"bmc-a": 2, "bmc-b": 2, "bmc-c": 2, "bmc-d": 2}
    # one request per node, one after the other: a login each
    for name in batch[:6]:
        svc.act(name, "manage")  # available -> manageable: no BMC work
        svc.act(name, "provide")
        settle(svc, [name])
    assert fake.logins["bmc-a"] == 8


def test_a_refusal_stops_the_request_there(svc):
    svc.import_nodes(env(entry("r0", "r-0", 0), entry("r1", "r-1", 1), entry("r2", "r-2", 2)))
    with pytest.raises(NotFound, match="no node named or with UUID 'nosuch'"):
        svc.act_many(["r0", "nosuch", "r1"], "manage")
    assert svc.get("r0")["provision_state"] in ("verifying", "manageable")
    assert svc.get("r1")["provision_state"] == "enroll"
    settle(svc, ["r0"])
    with pytest.raises(Conflict, match=r"cannot manage node r0 in state 'manageable' \(allowed: inspect, provide, "):
        svc.act_many(["r1", "r0", "r2"], "manage")
    assert svc.get("r2")["provision_state"] == "enroll" and svc.get("r1")["provision_state"] != "enroll"
    # the same node twice in one request: the second sees the first's move
    with pytest.raises(Conflict, match="cannot provide node r0 in state 'cleaning'"):
        svc.act_many(["r0", "r0"], "provide")
    settle(svc, ["r0", "r1"])
    assert history(svc, "r0")[-2:] == ["manageable -> cleaning (provide)", "cleaning -> available (done)"]


def test_nothing_of_a_batch_is_lost_when_its_transaction_breaks(svc, monkeypatch):
    """A bug writing one node's outcome fails that node (internal error), not its batch."""
    svc.import_nodes(env(*[entry(f"x{i}", f"x-{i}", i) for i in range(6)]))
    names = [f"x{i}" for i in range(6)]
    svc.act_many(names, "manage")
    settle(svc, names)
    ids = {svc.get(n)["uuid"]: n for n in names}
    real, victim = svc._apply_inventory, {}

    def apply_inventory(s, node_id, inv):
        if node_id == victim["id"]:
            raise RuntimeError("boom")
        return real(s, node_id, inv)

    gate, calls, real_txn = threading.Event(), [], svc._outcomes_txn

    def outcomes_txn(outs):
        calls.append([o.node_id for o in outs])
        gate.wait(20)
        return real_txn(outs)

    monkeypatch.setattr(svc, "_apply_inventory", apply_inventory)
    monkeypatch.setattr(svc, "_outcomes_txn", outcomes_txn)
    svc.act_many(names, "inspect")
    deadline = time.monotonic() + 20
    while not calls or len(calls[0]) + svc.writer.queue.qsize() < len(names):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # the victim: one that shares its batch with others
    victim["id"] = calls[0][-1] if len(calls[0]) > 1 else next(i for i in ids if i not in calls[0])
    gate.set()
    got = settle(svc, names)
    bad = ids[victim["id"]]
    assert any(victim["id"] in c and len(c) > 1 for c in calls)
    assert got[bad]["provision_state"] == "inspect failed"
    assert got[bad]["last_error"].startswith("internal error ") and "while inspecting" in got[bad]["last_error"]
    assert all(got[n]["provision_state"] == "manageable" and got[n]["properties"]["cpus"] == 2
               for n in names if n != bad)


def test_batch_size_bounds_a_transaction(svc, monkeypatch):
    monkeypatch.setattr(nodes_mod, "BATCH", 4)
    svc.import_nodes(env(*[entry(f"s{i}", f"s-{i}", i) for i in range(10)]))
    updates = count_node_updates(svc.store, "enroll")
    shown = svc.act_many([f"s{i}" for i in range(10)], "manage")
    assert len(shown) == 10 and updates[0] == 3  # 4 + 4 + 2


def test_a_request_whose_transaction_breaks_fails_alone(svc, monkeypatch):
    """Requests that share a transaction: a bug with one is that request's error; the others are
    written again on their own, each node's move and event once."""
    svc.import_nodes(env(*[entry(f"g{i}", f"g-{i}", i) for i in range(4)], entry("bad", "g-bad", 9)))
    gate, real_txn, real_view = threading.Event(), svc._acts_txn, nodes_mod.view

    entered = threading.Event()

    def acts_txn(ops):
        if not gate.is_set():
            entered.set()
            gate.wait(20)
        return real_txn(ops)

    def view(n, macs=None, deploy=None):
        if n.name == "bad":
            raise RuntimeError("a bug showing this node")
        return real_view(n, macs, deploy)

    monkeypatch.setattr(svc, "_acts_txn", acts_txn)
    monkeypatch.setattr(nodes_mod, "view", view)
    results: dict[str, object] = {}

    def ask(key, names):
        try:
            results[key] = [v["name"] for v in svc.act_many(names, "manage")]
        except Exception as exc:  # noqa: BLE001
            results[key] = exc

    first = threading.Thread(target=ask, args=("first", ["g0"]))
    first.start()  # the writer holds it at the gate while the others queue
    assert entered.wait(20)
    others = [threading.Thread(target=ask, args=(k, names)) for k, names in
              (("ok", ["g1", "g2"]), ("bad", ["g3", "bad"]))]
    for t in others:
        t.start()
    deadline = time.monotonic() + 20
    while svc.writer.queue.qsize() < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.set()
    for t in [first, *others]:
        t.join(20)
    assert results["first"] == ["g0"] and results["ok"] == ["g1", "g2"]
    assert isinstance(results["bad"], RuntimeError)
    monkeypatch.setattr(nodes_mod, "view", real_view)
    settle(svc, ["g0", "g1", "g2"])
    for name in ("g0", "g1", "g2"):
        assert history(svc, name)[1:] == ["enroll -> verifying (manage)", "verifying -> manageable (done)"]
    assert svc.get("bad")["provision_state"] == "enroll" and svc.get("g3")["provision_state"] == "enroll"


def test_deploys_behind_one_bmc_still_run_side_by_side(tmp_path):
    """Deploys are long (images, media): a batch runs them in parallel, not in turn."""
    from undercloud.provisioning.scheduler import Request, Scheduler

    both = threading.Barrier(2, timeout=10)  # each deploy waits for the other one to be in its deploy too

    class BothAtOnce(BootDiskDeploy):
        def deploy(self, node, driver):
            both.wait()
            return super().deploy(node, driver)

    fake.reset()
    svc = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=4,
                      deploy_interface=BothAtOnce)
    try:
        svc.import_nodes(env(entry("d0", "dep/s0", 0), entry("d1", "dep/s1", 1)))
        svc.act_many(["d0", "d1"], "manage")
        settle(svc, ["d0", "d1"])
        svc.act_many(["d0", "d1"], "provide")
        settle(svc, ["d0", "d1"])
        sched = Scheduler(svc.store)
        sched.claim(Request(instance_uuid="i-0"))
        sched.claim(Request(instance_uuid="i-1"))
        svc.act_many(["d0", "d1"], "deploy")
        got = settle(svc, ["d0", "d1"])
        assert {n["provision_state"] for n in got.values()} == {"active"}, [n["last_error"] for n in got.values()]
    finally:
        svc.close()
