"""The scheduler: filters, the 'why nothing fits' message, and claims under concurrency."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import own_store_url
from undercloud.errors import Conflict, InvalidInput
from undercloud.provisioning.drivers import fake
from undercloud.provisioning.nodes import NodeService
from undercloud.provisioning.scheduler import Request, Scheduler
from undercloud.store import Store


@pytest.fixture
def store(tmp_path):
    fake.reset()
    return Store(own_store_url(tmp_path / "uc.db")).create_schema()


def enrol(store: Store, specs: list[dict]) -> NodeService:
    """Import fake nodes and take them all to available."""
    svc = NodeService(store, workers=4)
    nodes = [{"name": f"n{i}", "pm_type": "fake", "pm_addr": f"f{i}", **spec} for i, spec in enumerate(specs)]
    svc.import_nodes(json.dumps({"nodes": nodes}))
    for verb, want in (("manage", "manageable"), ("provide", "available")):
        for n in nodes:
            svc.act(n["name"], verb)
        deadline = time.monotonic() + 10
        while any(svc.get(n["name"])["provision_state"] != want for n in nodes):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    svc.close()
    return svc


def test_picks_a_node_matching_profile_and_sizes(store):
    enrol(store, [{"capabilities": "profile:compute", "memory": 8192, "cpu": 4},
                  {"capabilities": "profile:control", "memory": 8192, "cpu": 4, "disk": 100}])
    node = Scheduler(store).claim(Request(instance_uuid="i-1", profile="control", memory_mb=4096, local_gb=50))
    assert node["name"] == "n1" and node["instance_uuid"] == "i-1"


def test_explains_why_nothing_fits(store):
    enrol(store, [{"capabilities": "profile:compute", "memory": 8192},
                  {"capabilities": "profile:compute", "memory": 8192},
                  {"capabilities": "profile:control", "memory": 2048}])
    with pytest.raises(Conflict) as info:
        Scheduler(store).claim(Request(instance_uuid="i-1", profile="control", memory_mb=4096))
    assert str(info.value) == ("no node fits server i-1: 3 available nodes; 2 lack profile:control; "
                               "1 has 2048 MB < 4096 MB")


def test_other_filters(store):
    enrol(store, [{"resource_class": "gpu"}, {"capabilities": "boot_mode:bios", "arch": "aarch64"},
                  {"hypervisor_type": "vm", "cpu": 1}])
    sched = Scheduler(store)
    with pytest.raises(Conflict) as info:
        sched.claim(Request(instance_uuid="x", capabilities={"boot_mode": "uefi"}))
    assert str(info.value) == ("no node fits server x: 3 available nodes; 2 lack boot_mode:uefi; "
                               "1 has resource_class gpu, not baremetal")
    assert sched.claim(Request(instance_uuid="a", resource_class="gpu"))["name"] == "n0"
    assert sched.claim(Request(instance_uuid="b", hypervisor_type="vm"))["name"] == "n2"
    with pytest.raises(Conflict, match="is aarch64, not x86_64"):
        sched.claim(Request(instance_uuid="c", cpu_arch="x86_64"))


def test_claim_is_idempotent_and_release_gives_back(store):
    enrol(store, [{}])
    sched = Scheduler(store)
    first = sched.claim(Request(instance_uuid="i-1"))
    assert sched.claim(Request(instance_uuid="i-1"))["uuid"] == first["uuid"]
    with pytest.raises(Conflict, match="0 available nodes .besides 1 claimed."):
        sched.claim(Request(instance_uuid="i-2"))
    assert sched.release("i-1")
    assert sched.claim(Request(instance_uuid="i-2"))["uuid"] == first["uuid"]


def test_maintenance_and_non_available_nodes_are_never_picked(store):
    svc = enrol(store, [{}, {}])
    svc.set_maintenance("n0", True, "broken fan")
    svc.act("n1", "manage")  # back to manageable
    with pytest.raises(Conflict, match="0 available nodes .besides 1 in maintenance."):
        Scheduler(store).claim(Request(instance_uuid="i-1"))


def test_concurrent_claims_never_share_a_node(store):
    enrol(store, [{} for _ in range(30)])
    sched = Scheduler(store)
    barrier = threading.Barrier(16)

    def claim(i: int):
        if i < 16:
            barrier.wait()
        try:
            return sched.claim(Request(instance_uuid=f"i-{i}"))["uuid"]
        except Conflict:
            return None

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(claim, range(40)))
    won = [g for g in got if g]
    assert len(won) == 30 and len(set(won)) == 30  # every node once, 10 requests refused
    with store.session() as s:
        from undercloud.store.nodes import Node

        held = {n.instance_uuid for n in s.query(Node).all()}
    assert len(held) == 30


def test_request_from_dict_refuses_unknown_fields():
    with pytest.raises(InvalidInput, match="unknown request field.s.: flavor"):
        Request.from_dict({"instance_uuid": "x", "flavor": "big"})
    with pytest.raises(InvalidInput, match="instance_uuid: required"):
        Request.from_dict({})
