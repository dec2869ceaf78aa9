"""Several workers on one store (issue 19): heartbeats, the hash ring spreading power sync,
stack operations taken over from a worker that stopped heart-beating, nodes' busy work of a
dead worker failed. In-process here (each worker a service object with its own id, on one
store: SQLite, or PostgreSQL in the postgresql tier); tests/integration/test_workers.py runs
them as processes."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select, update

from tests.conftest import own_store_url
from tests.unit.test_engine_resume import CLOUD, CRASH, eng, template  # noqa: F401 - eng: the fixture
from tests.unit.test_nodes import env, node
from undercloud.errors import NotFound, ServiceUnavailable
from undercloud.orchestration.engine import StackService
from undercloud.provisioning.drivers import fake
from undercloud.provisioning.nodes import NodeService
from undercloud.store import Store
from undercloud.store.nodes import Node, NodeEvent
from undercloud.store.workers import HashRing, Worker, Workers

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
# The heartbeat interval of these tests: dead after 25 s without a beat. Workers here never
# beat by themselves; one dies by `stop_beating` (its last beat a minute old), never by the
# clock, so a slow machine cannot make a live one look dead.
INTERVAL = 5.0


def stop_beating(store: Store, worker_id: str) -> None:
    """What a worker killed with -9 leaves: its last heartbeat, getting old."""
    with store.engine.begin() as conn:
        conn.execute(update(Worker).where(Worker.id == worker_id).values(heartbeat_at=time.time() - 60))


def test_the_ring_gives_each_key_one_owner_and_moves_only_a_leavers_keys():
    keys = [f"node-{i}" for i in range(10_000)]
    three = HashRing(["w1", "w2", "w3"])
    owners = {k: three.owner(k) for k in keys}
    shares = {w: sum(1 for o in owners.values() if o == w) for w in ("w1", "w2", "w3")}
    assert sum(shares.values()) == len(keys)
    assert all(2_000 < n < 4_700 for n in shares.values()), shares  # spread, not one taking all
    two = HashRing(["w1", "w2"])
    moved = [k for k in keys if two.owner(k) != owners[k]]
    assert {owners[k] for k in moved} == {"w3"}  # only the leaver's keys move...
    assert len(moved) == shares["w3"]  # ...all of them
    assert HashRing([]).owner("x") is None
    assert HashRing(["w2", "w1"]).owner("node-7") == two.owner("node-7")  # order of members does not matter


def test_workers_are_alive_while_they_beat(tmp_path):
    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    a, b = (Workers(store, w, interval=INTERVAL) for w in ("wa", "wb"))
    a.join()
    b.join()
    assert a.live() == b.live() == {"wa", "wb"}
    stop_beating(store, "wb")
    assert a.live() == {"wa"}
    listed = {w["id"]: w for w in a.list()}
    assert listed["wa"]["alive"] and listed["wa"]["this"] and not listed["wb"]["alive"]
    b.beat()  # back (a process paused, not dead): alive again
    assert a.live() == {"wa", "wb"}
    b.leave()
    assert a.live() == {"wa"} and [w["id"] for w in a.list()] == ["wa"]
    b.beat()  # a worker forgotten while it ran joins again at its next beat
    assert "wb" in a.live()


def test_power_sync_spreads_nodes_over_live_workers_each_synced_once(tmp_path):
    fake.reset()
    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    ids = ("w1", "w2", "w3")
    services = {}
    for w in ids:
        workers = Workers(store, w, interval=INTERVAL)
        workers.join()
        svc = NodeService(store, workers=2)
        svc.worker_id, svc.live_workers = w, workers.live
        services[w] = svc
    n = 240
    services["w1"].import_nodes(env(*(node(i) for i in range(1, n + 1))))
    with store.engine.begin() as conn:  # settled nodes, recorded off (the lifecycle is tested elsewhere)
        conn.execute(update(Node).values(provision_state="manageable", power_state="off"))
    for i in range(1, n + 1):
        fake.machine_state(f"fake-{i}")["power"] = "on"  # every one drifted
    try:
        stats = {w: svc.sync_power() for w, svc in services.items()}
        assert sum(s["nodes"] for s in stats.values()) == n
        assert all(s["nodes"] > n // 6 and s["drift"] == s["nodes"] for s in stats.values()), stats
        with store.session() as s:
            assert set(s.scalars(select(Node.power_state))) == {"on"}
            drift_events = s.scalars(select(NodeEvent.node_id).where(NodeEvent.message.contains("BMC reports on"))).all()
        assert len(drift_events) == len(set(drift_events)) == n  # each node read by exactly one worker

        stop_beating(store, "w3")
        ring = HashRing(["w1", "w2"])
        with store.session() as s:
            node_ids = list(s.scalars(select(Node.id)))
        for i in range(1, n + 1):
            fake.machine_state(f"fake-{i}")["power"] = "off"
        after = {w: services[w].sync_power() for w in ("w1", "w2")}
        assert sum(s["nodes"] for s in after.values()) == n  # w3's nodes moved to the live two
        for w in ("w1", "w2"):
            assert after[w]["nodes"] == sum(1 for i in node_ids if ring.owner(i) == w)
            assert after[w]["nodes"] >= stats[w]["nodes"]  # each kept its own and took some of w3's
    finally:
        for svc in services.values():
            svc.close()


def test_a_hypervisor_only_worker_syncs_no_node_and_is_on_no_ring(tmp_path):
    """`serve --worker --hypervisor-only` (a hypervisor host's worker, which may not reach the
    BMCs): the others spread the nodes among themselves as if it were not there, and it
    syncs none, even when it is the only live worker."""
    fake.reset()
    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    services, workers = {}, {}
    for w, duties in (("w1", "all"), ("w2", "all"), ("hv", "servers")):
        workers[w] = Workers(store, w, interval=INTERVAL, duties=duties)
        workers[w].join()
        svc = NodeService(store, workers=2)
        svc.worker_id, svc.live_workers, svc.ring_workers = w, workers[w].live, workers[w].live_for_nodes
        services[w] = svc
    n = 60
    services["w1"].import_nodes(env(*(node(i) for i in range(1, n + 1))))
    with store.engine.begin() as conn:
        conn.execute(update(Node).values(provision_state="manageable", power_state="off"))
    try:
        assert workers["hv"].live() == {"w1", "w2", "hv"}  # alive for everything else (forwarding, ...)
        assert workers["w1"].live_for_nodes() == workers["hv"].live_for_nodes() == {"w1", "w2"}
        assert {w["id"]: w["duties"] for w in workers["w1"].list()} == {"w1": "all", "w2": "all", "hv": "servers"}
        stats = {w: svc.sync_power() for w, svc in services.items()}
        assert stats["hv"]["nodes"] == 0
        assert stats["w1"]["nodes"] + stats["w2"]["nodes"] == n
        ring = HashRing(["w1", "w2"])
        with store.session() as s:
            node_ids = list(s.scalars(select(Node.id)))
        assert stats["w1"]["nodes"] == sum(1 for i in node_ids if ring.owner(i) == "w1")
        stop_beating(store, "w1")
        stop_beating(store, "w2")
        assert services["hv"].sync_power()["nodes"] == 0  # alone: still none of its business
    finally:
        for svc in services.values():
            svc.close()


def test_busy_work_of_a_dead_worker_fails_and_a_live_ones_is_left(tmp_path):
    fake.reset()
    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    mine = Workers(store, "w1", interval=INTERVAL)
    mine.join()
    Workers(store, "w2", interval=INTERVAL).join()
    Workers(store, "w3", interval=INTERVAL).join()
    svc = NodeService(store, workers=2)
    svc.worker_id, svc.live_workers = "w1", mine.live
    try:
        svc.import_nodes(env(node(1), node(2), node(3)))
        with store.engine.begin() as conn:
            for name, worker in (("n1", "w2"), ("n2", "w3"), ("n3", "w1")):
                conn.execute(update(Node).where(Node.name == name).values(provision_state="deploying",
                                                                          reservation=worker))
        stop_beating(store, "w3")
        assert svc.recover_interrupted(at_start=False) == 1
        assert svc.get("n2")["provision_state"] == "deploy failed"
        assert "interrupted: worker w3 stopped while deploying" in svc.get("n2")["last_error"]
        assert svc.get("n1")["provision_state"] == svc.get("n3")["provision_state"] == "deploying"
        assert svc.recover_interrupted(at_start=True) == 1  # this worker's own, left by its previous run
        assert svc.get("n3")["provision_state"] == "deploy failed" and svc.get("n1")["provision_state"] == "deploying"
    finally:
        svc.close()


def engine(store: Store, worker_id: str) -> tuple[StackService, Workers]:
    workers = Workers(store, worker_id, interval=INTERVAL)
    workers.join()
    svc = StackService(store)
    svc.worker_id, svc.live_workers, svc.dead_after = worker_id, workers.live, workers.dead_after
    return svc, workers


def test_a_stack_operation_is_taken_over_from_a_dead_worker_and_done_once(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    b, b_workers = engine(eng.store, "wb")
    bundle = eng.bundle("t.yaml", template("Test::Thing", 5))
    CRASH.set()
    a.create("s", bundle, {}, wait=True)  # worker a dies inside its walk (nothing written after)
    CRASH.clear()
    sid = a.show("s")["id"]
    assert a.show("s")["stack_status"] == "CREATE_IN_PROGRESS"
    # a still heart-beats (say, a long pause): nobody takes its operation, nor may touch it
    assert b.take_over() == []
    with pytest.raises(ServiceUnavailable, match="stack s: its CREATE runs on worker wa"):
        b.delete("s")
    with pytest.raises(ServiceUnavailable, match="runs on worker wa"):
        b.cancel("s")
    stop_beating(eng.store, "wa")
    c, _ = engine(eng.store, "wc")
    taken = {"wb": b.take_over(), "wc": c.take_over()}  # two live workers race for it: one wins
    assert sorted(taken.values()) == [[], [sid]]
    winner = b if taken["wb"] else c
    winner.wait("s", 10)
    s = winner.show("s")
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert len(CLOUD) == 5 and all(v["creates"] == 1 for v in CLOUD.values())  # nothing done twice
    with eng.store.engine.connect() as conn:
        from undercloud.store.stacks import Stack

        assert conn.execute(select(Stack.engine_id).where(Stack.id == sid)).scalar() == winner.worker_id
    assert winner.take_over() == [] and b_workers.live() >= {"wb", "wc"}


def test_a_hypervisor_only_worker_takes_over_no_stack_operation(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    hv, _ = engine(eng.store, "hv")
    hv.takes_over = False  # what Context sets for `serve --hypervisor-only`
    CRASH.set()
    a.create("s", eng.bundle("t.yaml", template("Test::Thing", 3)), {}, wait=True)
    CRASH.clear()
    stop_beating(eng.store, "wa")
    assert hv.take_over() == [] and hv.take_over(at_start=True) == []
    b, _ = engine(eng.store, "wb")  # a worker of all duties does
    assert b.take_over() == [b.show("s")["id"]]
    b.wait("s", 10)
    assert b.show("s")["stack_status"] == "CREATE_COMPLETE"


def test_a_restarted_worker_resumes_its_own_operations_at_once(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    CRASH.set()
    a.create("s", eng.bundle("t.yaml", template("Test::Thing", 3)), {}, wait=True)
    CRASH.clear()
    b, _ = engine(eng.store, "wb")
    assert b.take_over(at_start=True) == []  # wa still beats: not b's to take, even at b's start
    again, _ = engine(eng.store, "wa")  # wa's next start (same home, same id): no wait for a timeout
    assert again.resume_all() == [again.show("s")["id"]]
    again.wait("s", 10)
    assert again.show("s")["stack_status"] == "CREATE_COMPLETE"
    assert all(v["creates"] == 1 for v in CLOUD.values())


def test_agents_metadata_written_by_one_worker_is_served_right_by_another(tmp_path):
    from undercloud.orchestration.server_metadata import ServerMetadata

    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    a, b = (ServerMetadata(store, lambda: "http://127.0.0.1:1") for _ in range(2))
    assert b.servers() == []  # b loaded (an empty store) before a wrote anything
    token = a.register("s1", "node-1")
    assert b.authenticate("s1", token) is not None  # unknown to b: looked up in the store at once
    assert b.authenticate("s1", "wrong") is None
    a.put_deployment("s1", {"id": "d1", "name": "step1", "config": "x"}, owner="res-1")
    assert b._get("s1").etag != a._get("s1").etag  # b's copy is behind until its next heartbeat
    assert b.refresh() == 1
    assert b._get("s1").doc == a._get("s1").doc and b._get("s1").etag == a._get("s1").etag
    b.record_signal("s1", "d1", {"deploy_status_code": 0})  # the agent answers b
    assert a.signal_of("d1") is None
    a.refresh()
    assert a.signal_of("d1") == {"deploy_status_code": 0}
    rotated = a.register("s1", "node-1")
    assert b.authenticate("s1", rotated) is not None and b.authenticate("s1", token) is None
    a.put_deployment("s1", {"id": "d2", "name": "step2", "config": "y"}, owner="res-2")
    b.record_signal("s1", "d2", {"deploy_status_code": 1})  # published on a, signalled on b before b's refresh
    a.refresh()
    assert a.signal_of("d2") == {"deploy_status_code": 1}
    a.forget("s1")
    assert b.refresh() == 1 and not b.exists("s1")
    assert b.refresh() == 0  # nothing moved: nothing reloaded


def test_a_publish_the_store_refuses_changes_no_document_an_agent_sees(tmp_path):
    """Publishing is group-committed; a write the store refuses (here: b, behind a, publishes
    an id a stored already) raises, and b's view becomes the store's, not its own guess."""
    from sqlalchemy.exc import IntegrityError

    from undercloud.orchestration.server_metadata import ServerMetadata

    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    a, b = (ServerMetadata(store, lambda: "http://127.0.0.1:1") for _ in range(2))
    a.register("s1", "node-1")
    assert b.exists("s1")
    before = b._get("s1").etag
    a.put_deployment("s1", {"id": "d1", "name": "from-a", "config": "a"}, owner="res-1")
    with pytest.raises(IntegrityError):
        b.put_deployment("s1", {"id": "d1", "name": "from-b", "config": "b"}, owner="res-2")
    assert b._get("s1").etag != before and b._get("s1").doc == a._get("s1").doc  # read back: a's
    assert b.deployment_server("d1") == "s1" and "from-b" not in b._get("s1").doc.decode()
    b.put_deployment("s1", {"id": "d2", "name": "next", "config": "c"}, owner="res-2")  # b goes on
    assert b.refresh() == 0 and a.refresh() == 1 and a._get("s1").doc == b._get("s1").doc


def test_an_agents_last_call_and_health_report_show_on_every_worker(tmp_path):
    from undercloud.orchestration import server_metadata
    from undercloud.orchestration.server_metadata import ServerMetadata

    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    a, b = (ServerMetadata(store, lambda: "http://127.0.0.1:1") for _ in range(2))
    token = a.register("s1", "node-1")
    assert [s["last_seen"] for s in b.servers()] == [None]  # never called: not checked in
    before = time.time()
    assert a.authenticate("s1", token) is not None  # the agent reached a
    assert a.servers()[0]["last_seen"] >= before and b.servers()[0]["last_seen"] is None  # until a's flush
    assert a.flush_seen() == 1 and a.flush_seen() == 0  # a's heartbeat writes the marks, once
    seen = b.servers()[0]["last_seen"]
    assert seen is not None and seen >= before
    assert a.authenticate("s1", token) is not None  # again at once: a's view moves, the store's need not
    assert a.flush_seen() == 0
    assert a.servers()[0]["last_seen"] >= seen and b.servers()[0]["last_seen"] == seen
    a._get("s1").seen_stored -= server_metadata.SEEN_WRITE_EVERY  # as if SEEN_WRITE_EVERY s had passed
    assert a.authenticate("s1", token) is not None
    assert a.flush_seen() == 1
    assert b.servers()[0]["last_seen"] == a.servers()[0]["last_seen"] > seen
    assert b.health("s1") is None
    a.record_health("s1", {"pods": [{"name": "keystone", "ready": True}]})
    got = b.health("s1")
    assert got["pods"] == [{"name": "keystone", "ready": True}] and got["reported_at"] >= before
    with store.engine.connect() as conn:  # the report is encrypted at rest like the documents
        assert "keystone" not in str(conn.exec_driver_sql("SELECT health FROM agent_servers").scalar())
    with pytest.raises(NotFound):
        a.record_health("nope", {"pods": []})


def test_image_content_a_worker_lacks_is_fetched_from_another_and_verified(tmp_path):
    import hashlib
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from undercloud.config import Home
    from undercloud.images.store import ImageStore

    content = b"golden image bytes " * 1000
    served = {"body": content}

    class Peer(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook
            self.send_response(200 if self.path == "/v1/images/img-1/file" else 404)
            self.send_header("Content-Length", str(len(served["body"])))
            self.end_headers()
            self.wfile.write(served["body"])

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
        images = ImageStore(Home(tmp_path / "worker2"), store)
        image = {"id": "img-1", "name": "golden", "checksum": hashlib.sha256(content).hexdigest(),
                 "size": len(content)}
        assert not images.ensure_blob(image).exists()  # no other worker: missing, as before
        images.peers = lambda: ["http://127.0.0.1:1", f"http://127.0.0.1:{server.server_port}"]  # one is down
        served["body"] = content[:-1] + b"X"  # a peer serving corrupt content: refused, nothing kept
        assert not images.ensure_blob(image).exists()
        assert list(images.tmp.iterdir()) == []
        served["body"] = content
        path = images.ensure_blob(image)
        assert path.read_bytes() == content and path.parent == images.blobs
        assert not images.ensure_blob({**image, "id": "img-2", "checksum": "0" * 64}).exists()  # nobody has it
    finally:
        server.shutdown()


def test_a_dead_workers_stack_can_be_deleted_and_is_then_nobodys_to_take_over(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    CRASH.set()
    a.create("s", eng.bundle("t.yaml", template("Test::Thing", 3)), {}, wait=True)
    CRASH.clear()
    stop_beating(eng.store, "wa")
    b, _ = engine(eng.store, "wb")
    c, _ = engine(eng.store, "wc")
    b.delete("s", wait=True)
    assert c.take_over() == []  # the delete took it from wa: nothing left to take over
    with pytest.raises(Exception, match="not found"):
        b.show("s")
    assert CLOUD == {}


def test_a_worker_that_looked_dead_stops_its_walk_when_another_took_it_over(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    a.create("s", eng.bundle("t.yaml", template("Test::Slow", 12)), {})  # runs on in wa: ~1.5 s of calls
    sid = a.show("s")["id"]
    deadline = time.monotonic() + 10  # create returns once its thread starts; the walk is made there
    while a.walks.get(sid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    walk = a.walks.get(sid)
    stop_beating(eng.store, "wa")  # wa's beats stopped reaching the store, its walk did not stop
    b, _ = engine(eng.store, "wb")
    assert a.fence() == []  # still wa's: nothing to stop
    assert b.take_over() == [sid]
    # wa's walk ends at its next write (refused: the generation moved on) or, with nothing to
    # write, when its heartbeat sees the row is wb's now (fence), whichever comes first
    assert set(a.fence()) <= {sid}
    a.wait("s", 10)
    assert walk is not None and walk.interrupted  # ended as at a stop, finishing nothing
    assert sid not in a.walks and sid not in a.ops
    b.wait("s", 20)
    s = b.show("s")
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]


def test_a_dead_worker_can_be_forgotten_and_a_live_one_cannot(uc_home):
    import json

    from tests.conftest import run_cli

    listed = json.loads(run_cli("service", "workers", "-f", "json").stdout)  # starts the service
    [me] = [w["id"] for w in listed if w["this"]]
    store = Store(uc_home.db_url, uc_home.path / "store.key")
    with store.session() as s:
        s.add(Worker(id="gone-1", host="elsewhere", pid=1, url="", started_at=0.0, heartbeat_at=0.0))
    assert {w["id"]: w["alive"] for w in json.loads(run_cli("service", "workers", "-f", "json").stdout)} == \
        {me: True, "gone-1": False}
    r = run_cli("service", "workers", "--forget", me)
    assert r.returncode != 0 and f"worker: worker {me} is alive" in r.stderr and "stop it first" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli("service", "workers", "--forget", "nope")
    assert r.returncode != 0 and "worker: no worker 'nope'" in r.stderr, r.stderr
    r = run_cli("service", "workers", "--forget", "gone-1", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert [w["id"] for w in json.loads(r.stdout)] == [me]


def test_service_stop_runs_the_stop_hooks_and_the_worker_leaves(uc_home):
    """`service stop` sends SIGTERM; uvicorn raises it again after its own shutdown, which
    must end in the stop hooks (walks stopped, the worker's row removed), not a kill."""
    import json

    from tests.conftest import run_cli

    listed = json.loads(run_cli("service", "workers", "-f", "json").stdout)  # starts the service
    [me] = [w["id"] for w in listed if w["this"]]
    store = Store(uc_home.db_url, uc_home.path / "store.key")
    assert Workers(store, "reader").live() >= {me}
    r = run_cli("service", "stop")
    assert r.returncode == 0, r.stderr
    with store.engine.connect() as conn:
        assert conn.execute(select(Worker.id)).scalars().all() == []  # left at once, not after 5 beats
    log = (uc_home.path / "service.log").read_text()
    assert "stopped (pid" in log and "Traceback" not in log
