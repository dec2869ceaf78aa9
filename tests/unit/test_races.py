"""Races closed (issue 43): operation starts are a compare-and-set on the root stack's
generation, a walk whose operation another worker took over writes nothing more, claims
without a server are given back by the periodic pass, and a deleted server's agent token is
refused at once. Real stores (SQLite, or PostgreSQL with UNDERCLOUD_TEST_STORE=postgresql),
real threads; the only hooks make a race certain instead of likely."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from tests.conftest import HTTPS
from tests.unit.test_engine_resume import eng  # noqa: F401 - the fixture
from tests.unit.test_workers import engine, stop_beating
from undercloud.errors import Conflict
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import Plugin
from undercloud.store.stacks import Stack, StackEvent, StackResource

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def values(prefix: str, n: int = 3) -> str:
    return "heat_template_version: 2018-08-31\nresources:\n" + "".join(
        f"  {prefix}{i}: {{type: OS::Heat::Value, properties: {{value: {prefix}}}}}\n" for i in range(n))


@pytest.mark.parametrize("workers", [1, 2])
def test_of_two_updates_at_once_one_runs_and_the_other_is_refused(eng, workers):  # noqa: F811
    """Both requests read the stack COMPLETE before either writes (the barrier in template
    validation makes the race certain): the start is decided by the store, not the read."""
    a, _ = engine(eng.store, "wa")
    b = engine(eng.store, "wb")[0] if workers == 2 else a
    a.create("s", eng.bundle("base.yaml", values("base")), {}, wait=True)
    bundles = {"x": eng.bundle("x.yaml", values("x")), "y": eng.bundle("y.yaml", values("y"))}
    both_read = threading.Barrier(2, timeout=20)
    for svc in {a, b}:
        load = svc._load
        svc._load = lambda *args, _load=load: (both_read.wait(), _load(*args))[1]  # after the status check
    results: dict[str, object] = {}

    def update(svc, which: str) -> None:
        try:
            results[which] = svc.update("s", bundles[which], {}, wait=True)
        except Conflict as exc:
            results[which] = exc

    threads = [threading.Thread(target=update, args=(svc, w)) for svc, w in ((a, "x"), (b, "y"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    refused = [w for w, r in results.items() if isinstance(r, Conflict)]
    ran = [w for w, r in results.items() if not isinstance(r, Conflict)]
    assert len(refused) == 1 and len(ran) == 1, results
    assert "another operation started meanwhile" in str(results[refused[0]])
    assert results[refused[0]].status == 409  # what the API answers
    winner = ran[0]
    a.wait("s", 20)
    b.wait("s", 20)
    shown = a.show("s")
    assert shown["stack_status"] == "UPDATE_COMPLETE", shown["stack_status_reason"]
    with eng.store.engine.connect() as conn:
        stored = conn.execute(select(Stack.bundle).where(Stack.name == "s")).scalar()
        names = sorted(conn.execute(select(StackResource.name)).scalars())
        started = conn.execute(select(StackEvent.reason).where(StackEvent.reason == "Stack UPDATE started")).all()
    assert stored == bundles[winner]  # the stored template is the one that ran
    assert names == [f"{winner}{i}" for i in range(3)]
    assert len(started) == 1  # the refused update wrote nothing, not even its event


def test_a_create_of_a_name_taken_meanwhile_writes_nothing(eng):  # noqa: F811
    a, _ = engine(eng.store, "wa")
    a.create("s", eng.bundle("base.yaml", values("base")), {}, wait=True)
    with pytest.raises(Conflict, match="already exists"):
        a.create("s", eng.bundle("x.yaml", values("x")), {}, wait=True)
    with eng.store.engine.connect() as conn:
        assert conn.execute(select(Stack.id)).all() and len(conn.execute(select(Stack.id)).all()) == 1


HELD = threading.Event()    # the fenced worker's calls are under way
OPEN = threading.Event()    # ...and may return
TAKEN = threading.Event()   # calls started from now on are the new owner's: they do not wait


class Gate(Plugin):
    type_name = "Test::Gate"
    blocking = True

    def create(self) -> None:
        if not TAKEN.is_set():
            HELD.set()
            OPEN.wait(20)
        self.physical_id = f"gate-{self.uuid}"


def test_a_fenced_walk_writes_nothing_after_the_take_over_and_the_new_owners_finish_stands(eng):  # noqa: F811
    registry.register(Gate)
    for e in (HELD, OPEN, TAKEN):
        e.clear()
    try:
        a, _ = engine(eng.store, "wa")
        a.create("s", eng.bundle("t.yaml", "heat_template_version: 2018-08-31\nresources:\n"
                                 "  g0: {type: Test::Gate}\n  g1: {type: Test::Gate}\n"), {})
        sid = a.show("s")["id"]
        assert HELD.wait(10)
        walk = a.walks[sid]
        stop_beating(eng.store, "wa")  # wa's beats stop reaching the store; its walk goes on (no fence call)
        b, _ = engine(eng.store, "wb")
        TAKEN.set()
        assert b.take_over() == [sid]
        b.wait("s", 20)
        done = b.show("s")
        assert done["stack_status"] == "CREATE_COMPLETE", done["stack_status_reason"]

        def snapshot():
            with eng.store.engine.connect() as conn:
                return (conn.execute(select(Stack.__table__).where(Stack.id == sid)).mappings().one(),
                        conn.execute(select(StackResource.__table__).order_by(StackResource.id)).mappings().all(),
                        conn.execute(select(StackEvent.__table__).order_by(StackEvent.id)).mappings().all())

        before = snapshot()
        OPEN.set()  # wa's calls return: its walk goes on to write their results and its finish
        a.wait("s", 20)
        assert sid not in a.ops
        assert walk.interrupted and walk.writer.fenced  # its writes were refused, and it stopped
        after = snapshot()
        assert after == before  # nothing of wa's landed: rows, events, the stack row
        assert after[0]["engine_id"] == "wb" and after[0]["action"] == "CREATE" and after[0]["status"] == "COMPLETE"
        completed = [e for e in after[2] if e["reason"] == "Stack CREATE completed successfully"]
        assert len(completed) == 1
    finally:
        OPEN.set()
        registry.unregister("Test::Gate")


def test_a_take_over_bumps_the_generation_and_a_stale_claim_loses(eng):  # noqa: F811
    from tests.unit.test_engine_resume import CRASH, template

    a, _ = engine(eng.store, "wa")
    CRASH.set()
    a.create("s", eng.bundle("t.yaml", template("Test::Thing", 2)), {}, wait=True)  # dies in its walk
    CRASH.clear()
    sid = a.show("s")["id"]
    stop_beating(eng.store, "wa")
    b, _ = engine(eng.store, "wb")
    c, _ = engine(eng.store, "wc")
    with eng.store.engine.connect() as conn:
        seen = conn.execute(select(Stack.generation).where(Stack.id == sid)).scalar()
    assert b._claim(sid, "wa", seen) == seen + 1
    assert c._claim(sid, "wb", seen) is None  # read before b's claim: lost, even were wb dead
    b.wait("s", 1)


# ---- claims without a server --------------------------------------------------------------
def test_a_claim_without_a_server_row_is_released_by_one_periodic_pass(tmp_path):
    from tests.conftest import own_store_url
    from undercloud.provisioning import periodic
    from undercloud.provisioning.nodes import NodeService
    from undercloud.provisioning.scheduler import CLAIM_GRACE, Request, Scheduler
    from undercloud.store import Store
    from undercloud.store.nodes import Node, NodeEvent
    from undercloud.store.servers import Server

    store = Store(own_store_url(tmp_path / "s.db")).create_schema()
    nodes, sched = NodeService(store), Scheduler(store)
    try:
        with store.session() as s:
            for name in ("n1", "n2", "n3"):
                s.add(Node(id=f"id-{name}", name=name, driver="fake", driver_info={}, bmc_key=f"fake:{name}",
                           resource_class="baremetal", provision_state="available",
                           properties={"cpus": 2, "memory_mb": 4096, "local_gb": 20}))
        claimed = {i: sched.claim(Request.from_dict({"instance_uuid": i}))["uuid"]
                   for i in ("orphan", "kept", "fresh")}
        with store.session() as s:  # the create of "kept" wrote its row; "orphan"'s died before it
            s.add(Server(id="kept", name="kept", hypervisor_type="baremetal", flavor={}, vcpus=1, ram=1, disk=1,
                         image_id="i", image_name="i", node_id=claimed["kept"], status="BUILD", task="spawning",
                         networks=[], addresses={}, volumes=[], notes=[], metadata_={}, state={}))
            # two of them claimed longer ago than the grace
            s.execute(update(Node).where(Node.id.in_([claimed["orphan"], claimed["kept"]]))
                      .values(claimed_at=time.time() - CLAIM_GRACE - 1))
        periodic.housekeeping(nodes, sched)
        with store.session() as s:
            held = dict(s.execute(select(Node.id, Node.instance_uuid)).all())
            events = s.scalars(select(NodeEvent.message).where(NodeEvent.kind == "claim")).all()
        assert held[claimed["orphan"]] is None  # given back
        assert held[claimed["kept"]] == "kept"  # its server exists
        assert held[claimed["fresh"]] == "fresh"  # within the grace: a create may be writing its row
        assert len(events) == 1 and "claim of server orphan released" in events[0]
        assert sched.claim(Request.from_dict({"instance_uuid": "next"}))["uuid"] == claimed["orphan"]
    finally:
        nodes.close()


# ---- a deleted server's token ----------------------------------------------------------------
def test_a_deleted_servers_agent_token_is_refused_as_soon_as_the_delete_returns(tmp_path):
    import hashlib

    from undercloud.api.app import create_app
    from undercloud.api.context import Context
    from undercloud.config import Home
    from undercloud.provisioning.servers.fake import FakeRealiser

    ctx = Context(Home(tmp_path / "home"))
    try:
        servers = ctx.servers  # the service's own wiring (its Env revokes through ctx.server_metadata)
        fake = FakeRealiser(servers.env, "container")
        servers._realisers["container"] = fake
        servers.startup()
        fake.delete = lambda spec: fake.calls.append(("delete", spec.id))  # the teardown takes its time
        sha = hashlib.sha256(b"x").hexdigest()
        ctx.images.put_blob([b"x"], sha, 1)
        ctx.images.register([{"name": "img", "disk_format": "oci", "sha256": sha,
                              "properties": {"hypervisor_type": "container"}}])
        tokens = {}
        for name in ("a", "b"):
            tokens[name] = ctx.server_metadata.register(f"id-{name}", name)
            servers.create(id=f"id-{name}", name=name, flavor="container", image="img",
                           first_boot=ctx.server_metadata.agent_config(f"id-{name}", tokens[name]))
        api = TestClient(create_app(ctx), base_url=HTTPS)

        def agent(name: str) -> int:
            return api.get(f"/v1/agent/servers/id-{name}/metadata",
                           headers={"X-Server-Token": tokens[name]}).status_code

        assert agent("a") == 200 and agent("b") == 200
        r = api.delete("/v1/servers/a?wait=0", headers={"X-Undercloud-Token": ctx.admin_token})
        assert r.status_code == 200 and r.json()["deleted"] is False  # the teardown goes on
        assert agent("a") == 401  # refused at once
        assert agent("b") == 200  # another server's token is untouched
        fresh = type(ctx.server_metadata)(ctx.store, lambda: "")  # another worker's view, from the store
        assert fresh.authenticate("id-a", tokens["a"]) is None
        assert fresh.authenticate("id-b", tokens["b"]) is not None
    finally:
        ctx.stacks.stop()
