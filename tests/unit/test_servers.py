"""Servers in-process: flavors, image choice by name + hypervisor type, placement, the
OS::Nova::Server plugin through the real stack engine, and per-server token scope.

Machines come from FakeRealiser (no podman here); the stack engine, the store, the image
store, the scheduler with `fake`-driver nodes and the agent metadata API are the real ones.
tests/integration/test_server_container.py runs the same paths with real containers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import textwrap
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.conftest import HTTPS
from undercloud.api.app import create_app
from undercloud.api.context import Context
from undercloud.config import Home
from undercloud.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable, UndercloudError
from undercloud.orchestration.template import Bundle
from undercloud.provisioning.servers.base import Env
from undercloud.provisioning.servers.fake import FakeRealiser
from undercloud.provisioning.servers.placement import HOST_SPEC, Placement
from undercloud.provisioning.servers.service import ServersService
from undercloud.store.nodes import Node
from undercloud.store.servers import Server

ONE = """\
heat_template_version: wallaby
parameters:
  flavor: {type: string, default: container}
  image: {type: string, default: overcloud-full}
  name: {type: string, default: ctl0}
resources:
  node:
    type: OS::Nova::Server
    properties:
      name: {get_param: name}
      image: {get_param: image}
      flavor: {get_param: flavor}
      metadata: {role: controller}
      networks: [{network: ctlplane, fixed_ip: 10.254.9.9}]
outputs:
  first: {value: {get_attr: [node, first_address]}}
  net0: {value: {get_attr: [node, networks, ctlplane, 0]}}
  addr: {value: {get_attr: [node, addresses, ctlplane, 0, addr]}}
  v4: {value: {get_attr: [node, accessIPv4]}}
  name: {value: {get_attr: [node, name]}}
"""


class UC:
    """One undercloud in-process with fake machines behind the container and bare-metal types."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.ctx = Context(Home(tmp_path / "home"))
        env = Env(home=self.ctx.home, api_port=8, nodes=self.ctx.nodes, scheduler=self.ctx.scheduler,
                  images=self.ctx.images, addresses=self.ctx.addresses, lab_networks=self.ctx.lab_networks)
        self.fake = FakeRealiser(env, "container")
        self.bm = FakeRealiser(env, "baremetal", uses_nodes=True)
        self.servers = ServersService(self.ctx.store, env, realisers={"container": self.fake, "baremetal": self.bm})
        self.ctx.__dict__["servers"] = self.servers  # what Context.servers would build, with fakes
        self.servers.startup()

    def image(self, name: str, ht: str, fmt: str, content: bytes = b"x") -> dict:
        sha = hashlib.sha256(content).hexdigest()
        self.ctx.images.put_blob([content], sha, len(content))
        return self.ctx.images.register([{"name": name, "disk_format": fmt, "sha256": sha,
                                          "properties": {"hypervisor_type": ht}}])[0]

    def stack(self, name: str, text: str = ONE, **params):
        path = self.dir / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        self.ctx.stacks.create(name, Bundle.from_paths(str(path)).to_json(), params, wait=True)
        return self.ctx.stacks.show(name)

    def outputs(self, name: str) -> dict:
        return {o["output_key"]: o["output_value"] for o in self.ctx.stacks.show(name)["outputs"]}


@pytest.fixture
def uc(tmp_path):
    u = UC(tmp_path)
    yield u
    u.ctx.stacks.stop()


# ---- flavors --------------------------------------------------------------------------
def test_first_start_creates_default_flavors_once(uc):
    names = {f["name"]: f for f in uc.servers.flavors.list()}
    assert set(names) == {"baremetal", "control", "compute", "container", "vm", "vm-control"}
    assert names["control"]["properties"]["capabilities:profile"] == "control"
    assert names["container"]["hypervisor_type"] == "container"
    assert names["compute"]["hypervisor_type"] == "baremetal"
    uc.servers.flavors.delete("vm")
    uc.servers.startup()  # a restart does not bring back what the operator deleted
    assert "vm" not in {f["name"] for f in uc.servers.flavors.list()}


def test_flavor_create_and_its_bad_input(uc):
    f = uc.servers.flavors.create("ct-small", 2, 256, 5, {"hypervisor_type": "container",
                                                          "capabilities:profile": "control"})
    assert (f["vcpus"], f["ram"], f["disk"], f["hypervisor_type"]) == (2, 256, 5, "container")
    with pytest.raises(Conflict, match="exists"):
        uc.servers.flavors.create("ct-small", 1, 1, 1)
    with pytest.raises(InvalidInput, match="unknown hypervisor_type 'xen'") as e:
        uc.servers.flavors.create("x", 1, 1, 1, {"hypervisor_type": "xen"})
    assert e.value.where == "--property hypervisor_type"
    with pytest.raises(InvalidInput, match=">= 1") as e:
        uc.servers.flavors.create("x", 0, 1, 1)
    assert e.value.where == "--vcpus"
    assert "x" not in {f["name"] for f in uc.servers.flavors.list()}


def test_local_machine_is_a_hypervisor_host_for_containers_and_vms(uc):
    types = {h["hypervisor_type"] for h in uc.servers.hosts()}
    assert types == {"container", "vm"}


def test_a_host_offers_the_types_it_is_configured_for(uc, monkeypatch):
    """UNDERCLOUD_HYPERVISOR_TYPES (a hypervisor host's worker: container only, no libvirt):
    only those are registered; a type no longer offered goes, unless a server holds it."""
    monkeypatch.setenv("UNDERCLOUD_HOST", "hv-1")
    monkeypatch.setenv("UNDERCLOUD_HYPERVISOR_TYPES", "container")
    uc.servers.ensure_local_hosts()
    assert {h["hypervisor_type"] for h in uc.servers.hosts() if h["name"] == "hv-1"} == {"container"}
    monkeypatch.setenv("UNDERCLOUD_HYPERVISOR_TYPES", "vm")
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-1", name="held", flavor="container", image="overcloud-full", first_boot={})
    uc.servers._save("s-1", host="hv-1")
    uc.servers.ensure_local_hosts()  # container stays while s-1 runs there
    assert {h["hypervisor_type"] for h in uc.servers.hosts() if h["name"] == "hv-1"} == {"container", "vm"}
    uc.servers._save("s-1", host="elsewhere")
    uc.servers.ensure_local_hosts()
    assert {h["hypervisor_type"] for h in uc.servers.hosts() if h["name"] == "hv-1"} == {"vm"}
    monkeypatch.setenv("UNDERCLOUD_HYPERVISOR_TYPES", "container,xen")
    with pytest.raises(InvalidInput, match="'xen' is not a type a host realises") as e:
        uc.servers.ensure_local_hosts()
    assert e.value.where == "UNDERCLOUD_HYPERVISOR_TYPES"


# ---- image choice ---------------------------------------------------------------------
def test_image_is_chosen_by_name_and_the_flavors_hypervisor_type(uc):
    oci = uc.image("overcloud-full", "container", "oci", b"oci")
    qcow = uc.image("overcloud-full", "vm", "qcow2", b"qcow")
    assert uc.servers.choose_image("overcloud-full", "container", "container", ("oci",))["id"] == oci["id"]
    assert uc.servers.choose_image("overcloud-full", "vm", "vm", ("qcow2",))["id"] == qcow["id"]
    newer = uc.image("overcloud-full", "container", "oci", b"oci2")
    assert uc.servers.choose_image("overcloud-full", "container", "container", ("oci",))["id"] == newer["id"]


def test_image_hypervisor_mismatch_fails_saying_why_and_leaves_nothing(uc):
    uc.image("overcloud-full", "vm", "qcow2")
    st = uc.stack("s1")
    assert st["stack_status"] == "CREATE_FAILED"
    reason = st["stack_status_reason"]
    assert "no container image named 'overcloud-full'" in reason
    assert "exists for: vm (qcow2)" in reason
    assert uc.servers.list() == []
    assert uc.ctx.server_metadata.servers() == []  # no credentials left behind either
    assert uc.fake.calls == []


def test_unknown_image_and_flavor_are_named(uc):
    uc.image("overcloud-full", "container", "oci")
    st = uc.stack("s1", image="nope")
    assert "no image named 'nope'" in st["stack_status_reason"]
    st = uc.stack("s2", flavor="huge")
    assert "no flavor 'huge' (flavors: baremetal, compute, container, control, vm, vm-control)" in st["stack_status_reason"]
    assert uc.servers.list() == []


# ---- the plugin through the engine ----------------------------------------------------
def test_stack_with_a_server_create_attributes_delete(uc):
    uc.image("overcloud-full", "container", "oci")
    st = uc.stack("s1")
    assert st["stack_status"] == "CREATE_COMPLETE", st["stack_status_reason"]
    out = uc.outputs("s1")
    assert out == {"first": "10.254.9.9", "net0": "10.254.9.9", "addr": "10.254.9.9", "v4": "10.254.9.9",
                   "name": "ctl0"}
    (srv,) = uc.servers.list()
    assert (srv["status"], srv["hypervisor_type"], srv["metadata"]) == ("ACTIVE", "container", {"role": "controller"})
    # First-boot data: the agent's config with its own token, written owner-only.
    fb_dir = uc.servers.first_boot_dir(srv["id"])
    fb = json.loads((fb_dir / "config.json").read_text())
    assert fb["server_id"] == srv["id"] and fb["hostname"] == "ctl0" and fb["token"]
    assert (fb_dir / "config.json").stat().st_mode & 0o077 == 0
    assert uc.ctx.server_metadata.authenticate(srv["id"], fb["token"]) is not None
    uc.ctx.stacks.delete("s1", wait=True)
    assert uc.servers.list() == [] and uc.fake.machines == {}
    assert not fb_dir.exists()
    assert not uc.ctx.server_metadata.exists(srv["id"])


def test_image_change_rebuilds_in_place_and_flavor_change_replaces(uc):
    uc.image("overcloud-full", "container", "oci", b"a")
    new = uc.image("other", "container", "oci", b"b")
    uc.servers.flavors.create("ct2", 1, 256, 1, {"hypervisor_type": "container"})
    uc.stack("s1")
    (before,) = uc.servers.list()
    path = uc.dir / "s1.yaml"
    uc.ctx.stacks.update("s1", Bundle.from_paths(str(path)).to_json(), {"image": "other"}, wait=True)
    (after,) = uc.servers.list()
    assert after["id"] == before["id"] and after["image_id"] == new["id"]
    assert ("rebuild", before["id"]) in uc.fake.calls
    uc.ctx.stacks.update("s1", Bundle.from_paths(str(path)).to_json(), {"image": "other", "flavor": "ct2"},
                         wait=True)
    assert uc.ctx.stacks.show("s1")["stack_status"] == "UPDATE_COMPLETE"
    (replaced,) = uc.servers.list()
    assert replaced["id"] != before["id"] and replaced["flavor"] == "ct2"
    assert ("delete", before["id"]) in uc.fake.calls


def test_server_that_fails_to_boot_fails_the_resource_with_the_reason(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.fake.fail = "boot"
    st = uc.stack("s1")
    assert st["stack_status"] == "CREATE_FAILED"
    assert "went to ERROR" in st["stack_status_reason"] and "crashed at boot" in st["stack_status_reason"]
    uc.fake.fail = None
    uc.ctx.stacks.delete("s1", wait=True)  # a failed server is still removable
    assert uc.servers.list() == [] and uc.fake.machines == {}


def test_software_config_user_data_is_resolved(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.stack("s1", textwrap.dedent("""\
        heat_template_version: wallaby
        resources:
          ud:
            type: OS::Heat::SoftwareConfig
            properties: {group: ungrouped, config: "#!/bin/sh\\necho first boot\\n"}
          node:
            type: OS::Nova::Server
            properties:
              image: overcloud-full
              flavor: container
              user_data_format: SOFTWARE_CONFIG
              user_data: {get_resource: ud}
        """))
    (srv,) = uc.servers.list()
    assert srv["name"] == "s1-node"
    fb = uc.fake.machines[srv["id"]]["first_boot"]
    assert fb["user_data"] == "#!/bin/sh\necho first boot\n" and fb["user_data_format"] == "SOFTWARE_CONFIG"


# ---- bare metal placement (fake-driver nodes, the real scheduler) -----------------------
def _node(uc, name: str, profile: str | None, memory: int = 8192):
    caps = {"profile": profile} if profile else {}
    with uc.ctx.store.session() as s:
        s.add(Node(id=f"00000000-0000-0000-0000-{len(name):04d}{name[-8:]:0>8}", name=name, driver="fake",
                   driver_info={}, bmc_key=f"fake:{name}", resource_class="baremetal",
                   properties={"cpus": 2, "memory_mb": memory, "local_gb": 20, "capabilities": caps},
                   provision_state="available"))


def test_no_valid_node_names_the_reason_and_claims_nothing(uc):
    uc.image("overcloud-full", "baremetal", "qcow2")
    _node(uc, "n-compute", "compute")
    _node(uc, "n-none", None)
    st = uc.stack("s1", flavor="control")
    reason = st["stack_status_reason"]
    assert st["stack_status"] == "CREATE_FAILED"
    assert "no valid node for flavor 'control'" in reason and "2 available nodes" in reason
    assert "lack profile:control" in reason
    assert uc.servers.list() == [] and uc.bm.calls == []
    with uc.ctx.store.session() as s:
        assert all(n.instance_uuid is None for n in s.scalars(select(Node)))


def test_bare_metal_server_claims_a_matching_node_and_releases_it(uc):
    uc.image("overcloud-full", "baremetal", "qcow2")
    _node(uc, "n-compute", "compute")
    _node(uc, "n-control", "control")
    st = uc.stack("s1", flavor="control")
    assert st["stack_status"] == "CREATE_COMPLETE", st["stack_status_reason"]
    (srv,) = uc.servers.list()
    node = uc.ctx.nodes.get("n-control")
    assert srv["node"] == node["uuid"] and node["instance_uuid"] == srv["id"]
    assert uc.bm.machines[srv["id"]]["node"] == node["uuid"]
    uc.ctx.stacks.delete("s1", wait=True)
    assert uc.ctx.nodes.get("n-control")["instance_uuid"] is None


# ---- the service's own checks -----------------------------------------------------------
def test_bad_requests_are_refused_before_anything_is_written(uc):
    uc.image("overcloud-full", "container", "oci")
    base = dict(flavor="container", image="overcloud-full", first_boot={})
    with pytest.raises(InvalidInput, match="valid host name"):
        uc.servers.create(id="a", name="bad_name!", **base)
    with pytest.raises(InvalidInput, match="not an IPv4 address") as e:
        uc.servers.create(id="a", name="ok", networks=[{"network": "ctlplane", "fixed_ip": "10.0.0.300"}], **base)
    assert e.value.where == "networks[0].fixed_ip"
    with pytest.raises(InvalidInput, match="unknown network 'tenant'"):
        uc.servers.create(id="a", name="ok", networks=[{"network": "tenant"}], **base)
    with pytest.raises(InvalidInput, match="not an absolute path"):
        uc.servers.create(id="a", name="ok", volumes=["relative/path"], **base)
    with uc.ctx.store.session() as s:
        assert s.scalars(select(Server)).all() == []
    assert uc.fake.calls == []


def test_qualified_hypervisor_types_and_cloud_flavors_are_checked_before_anything_is_written(uc):
    """`openstack:<cloud>/<flavor>` names a cloud's flavor; a cloud this undercloud does not
    know, a type that takes no target and one that needs one: one line each, nothing made."""
    uc.image("overcloud-full", "vm", "qcow2")
    uc.servers.env.clouds = uc.ctx.clouds
    base = dict(name="n0", image="overcloud-full", first_boot={}, networks=[{"network": "lab"}])
    with pytest.raises(UndercloudError) as e:
        uc.servers.create(id="a", flavor="openstack:nope/m1.small", **base)
    assert e.value.message == ("cannot realise openstack:nope servers here: no cloud 'nope' "
                               "(clouds: none; `undercloud cloud add`)")
    with pytest.raises(NotFound) as e:
        uc.servers.create(id="a", flavor="container:x/m1", **base)  # not a remote type: an own flavor name
    assert e.value.message.startswith("no flavor 'container:x/m1' (flavors: ")
    with pytest.raises(UndercloudError, match="'container:x': container takes nothing after it"):
        uc.servers.realiser("container:x")
    with pytest.raises(UndercloudError, match="'openstack': openstack servers name their cloud: openstack:<cloud>"):
        uc.servers.realiser("openstack")
    with uc.ctx.store.session() as s:
        assert s.scalars(select(Server)).all() == []


def test_a_full_host_says_so(uc):
    uc.image("overcloud-full", "container", "oci")
    (host,) = [h for h in uc.servers.hosts() if h["hypervisor_type"] == "container"]
    uc.servers.flavors.create("fat", 1, host["memory_mb"] + 1, 1, {"hypervisor_type": "container"})
    with pytest.raises(Conflict, match=r"no container host can take flavor fat: .* MB free <"):
        uc.servers.create(id="a", name="ok", flavor="fat", image="overcloud-full", first_boot={})
    assert uc.servers.list() == []


def test_power_rebuild_console_show_and_not_found(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-1", name="box", flavor="container", image="overcloud-full", first_boot={})
    assert uc.servers.wait("box", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    assert uc.servers.power("box", False)["status"] == "SHUTOFF"
    with pytest.raises(Conflict, match="power on/off needs"):
        uc.servers._save("s-1", status="BUILD")
        uc.servers.power("box", True)
    uc.servers._save("s-1", status="SHUTOFF")
    assert uc.servers.power("box", True)["status"] == "ACTIVE"
    assert uc.servers.console("box") == "fake console of box\n"
    with pytest.raises(NotFound, match="no server named or with id 'nope'"):
        uc.servers.get("nope")
    uc.servers.delete("box")
    assert uc.servers.list() == []


def register_host(uc, name: str, memory_mb: int = 8192) -> None:
    from undercloud.store.servers import HypervisorHost

    with uc.ctx.store.session() as s:
        s.add(HypervisorHost(name=name, hypervisor_type="container", vcpus=8, memory_mb=memory_mb, disk_gb=100))


def test_status_sync_leaves_containers_of_another_host_to_its_worker(uc):
    uc.image("overcloud-full", "container", "oci")
    for sid, name in (("s-1", "here"), ("s-2", "far")):
        uc.servers.create(id=sid, name=name, flavor="container", image="overcloud-full", first_boot={})
        assert uc.servers.wait(name, {"ACTIVE"}, 5)["status"] == "ACTIVE"
    uc.servers._save("s-2", host="another-host")  # a worker on another host made it there
    fake = uc.servers.realiser("container")
    fake.machines["s-1"]["on"] = fake.machines["s-2"]["on"] = False  # this host's podman sees neither run
    register_host(uc, "another-host")  # its worker registered it
    stats = uc.servers.sync_status()
    assert (stats["servers"], stats["changed"]) == (1, 1)
    assert {x["name"]: x["status"] for x in uc.servers.list()} == {"here": "SHUTOFF", "far": "ACTIVE"}
    # A host that is not registered is taken for this one (a single service whose host was renamed).
    uc.servers._save("s-2", host="renamed-host")
    stats = uc.servers.sync_status()
    assert (stats["servers"], stats["changed"]) == (2, 1)
    assert uc.servers.get("far")["status"] == "SHUTOFF"


def test_a_server_of_another_host_is_asked_of_its_hosts_worker_or_waits_for_it(uc, monkeypatch):
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-2", name="far", flavor="container", image="overcloud-full", first_boot={})
    assert uc.servers.wait("far", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    uc.servers._save("s-2", host="host-b")  # made by a worker of host-b
    register_host(uc, "host-b")
    fake = uc.servers.realiser("container")
    fake.machines["s-2"]["on"] = False  # what this host would (wrongly) see of it
    # No live worker on host-b: shown as last known; what needs the machine waits, in one line.
    assert uc.servers.refresh("far")["status"] == "ACTIVE"
    for call in (lambda: uc.servers.power("far", False), lambda: uc.servers.console("far"),
                 lambda: uc.servers.rebuild("far")):
        with pytest.raises(ServiceUnavailable, match="server far runs on host host-b, where no undercloud worker"):
            call()
    assert fake.machines["s-2"]["on"] is False  # nothing done here
    # A live worker there: each request goes to it, as the API would send it.
    sent = []
    uc.servers.env.workers_on = lambda host: ["wb"] if host == "host-b" else []
    uc.servers.env.forward = lambda worker, method, path, body: (
        sent.append((worker, method, path, body)) or {"status": "SHUTOFF", "console": "far's log\n", "deleted": True})
    assert uc.servers.refresh("far")["status"] == "SHUTOFF"
    uc.servers.power("far", True)
    assert uc.servers.console("far", 7) == "far's log\n"
    uc.servers.rebuild("far", first_boot={"user_data": "x"})
    uc.servers.delete("far")
    assert uc.servers.gone("s-2")
    assert sent == [("wb", "GET", "/v1/servers/s-2", None),
                    ("wb", "POST", "/v1/servers/s-2/action", {"action": "power-on"}),
                    ("wb", "GET", "/v1/servers/s-2/console?lines=7", None),
                    ("wb", "POST", "/v1/servers/s-2/action", {"action": "rebuild", "image": None,
                                                              "first_boot": {"user_data": "x"}}),
                    ("wb", "DELETE", "/v1/servers/s-2?wait=0", None),
                    ("wb", "DELETE", "/v1/servers/s-2?wait=0", None)]
    # A worker of a host not registered yet registers it at start.
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-c")
    uc.servers.ensure_local_hosts()
    assert {(h["name"], h["hypervisor_type"]) for h in uc.servers.hosts()} >= {("host-c", "container"),
                                                                               ("host-c", "vm")}


def test_a_server_whose_hosts_worker_does_not_answer_in_time_shows_as_last_known(uc):
    """A status asked of a busy host's worker (an emulated VM loading an image) that times
    out is no failure: the server shows as last known, and the stack waiting for it asks
    again (a ServiceUnavailable here failed the server's stack resource)."""
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-3", name="slow", flavor="container", image="overcloud-full", first_boot={})
    assert uc.servers.wait("slow", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    uc.servers._save("s-3", host="host-b", status="BUILD")
    register_host(uc, "host-b")
    uc.servers.env.workers_on = lambda host: ["wb"] if host == "host-b" else []

    def timed_out(worker, method, path, body):
        raise ServiceUnavailable(f"worker {worker} did not answer (timed out); try again later")
    uc.servers.env.forward = timed_out
    assert uc.servers.refresh("slow")["status"] == "BUILD"
    with pytest.raises(ServiceUnavailable, match="did not answer"):  # what must reach the machine still fails
        uc.servers.power("slow", True)


def test_a_server_of_a_host_that_is_down_is_deleted_here_and_its_machine_removed_when_the_host_returns(
        uc, monkeypatch):
    """Nova's local delete: with no live worker on its host, a delete removes the record and
    its address at once (a stack of it is never stuck), and that host's worker removes the
    machine at its next start or status pass."""
    from undercloud.store.servers import Leftover

    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-3", name="far3", flavor="container", image="overcloud-full", first_boot={})
    assert uc.servers.wait("far3", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    uc.ctx.addresses.claim("uc-far-lab", "s-3", ["10.9.9.7"])
    uc.servers._save("s-3", host="host-b", state={"container": "uc-far3"})
    register_host(uc, "host-b")
    fake = uc.servers.realiser("container")
    uc.servers.delete("far3")
    assert not uc.servers.exists("s-3") and uc.servers.gone("s-3")
    assert uc.ctx.addresses.held("s-3") is None  # the address is free again
    with uc.ctx.store.session() as s:
        (left,) = s.scalars(select(Leftover)).all()
        assert (left.id, left.name, left.host, left.state) == ("s-3", "far3", "host-b", {"container": "uc-far3"})
    assert "s-3" in fake.machines  # the machine is on host-b: not this host's to remove
    assert uc.servers.remove_leftovers() == []
    assert {h["name"]: h["leftovers"] for h in uc.servers.hosts() if h["hypervisor_type"] == "container"}["host-b"] == 1
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-b")  # host-b's worker, back
    assert uc.servers.sync_status()["leftovers_removed"] == 1
    assert "s-3" not in fake.machines
    assert all(h["leftovers"] == 0 for h in uc.servers.hosts())
    with uc.ctx.store.session() as s:
        assert s.scalars(select(Leftover)).all() == []


def test_a_host_worker_that_does_not_answer_the_spawn_once_is_asked_again(uc, monkeypatch):
    """An emulated host's worker busy loading an image may miss the spawn's answer: while it is
    alive the spawn (idempotent there) is asked again, and the server is made, not an ERROR."""
    from undercloud.provisioning.servers import service
    from undercloud.store.servers import HypervisorHost

    uc.image("overcloud-full", "container", "oci")
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-a")
    monkeypatch.setattr(service, "SPAWN_ASK_EVERY", 0.0)
    with uc.ctx.store.session() as s:
        s.query(HypervisorHost).delete()
    register_host(uc, "host-b", memory_mb=8192)
    uc.servers.env.hosts_up = lambda: {"host-b"}
    uc.servers.env.workers_on = lambda host: {"host-b": ["wb"]}.get(host, [])
    answers, asked = [ServiceUnavailable("worker wb did not answer (timed out)"), {}], []

    def busy_once(*a):
        asked.append(a[:3])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    uc.servers.env.forward = busy_once
    uc.servers.create(id="s1", name="s1", flavor="container", image="overcloud-full", first_boot={"token": "t"},
                      scheduler_hints={HOST_SPEC: "host-b"})
    assert (uc.servers.get("s1")["status"], uc.servers.get("s1")["fault"]) == ("BUILD", None)  # host-b makes it
    assert asked == [("wb", "POST", "/v1/servers/s1/action")] * 2


def test_new_servers_go_to_a_host_that_is_up_with_room_or_to_the_one_pinned(uc, monkeypatch):
    """Placement over the registered hosts (as Nova's filters and RAM weigher): up (a live
    worker; this worker's own host always), with room; this host first, else most free
    memory; `capabilities:hypervisor_hostname` of the flavor or the scheduler hints pins one.
    A server of another host is made by that host's worker: asked with its first-boot data."""
    from undercloud.store.servers import HypervisorHost

    uc.image("overcloud-full", "container", "oci")
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-a")
    with uc.ctx.store.session() as s:
        s.query(HypervisorHost).delete()
    for name, mem in (("host-a", 512), ("host-b", 8192), ("host-c", 4096), ("host-d", 65536)):
        register_host(uc, name, memory_mb=mem)
    sent = []
    uc.servers.env.hosts_up = lambda: {"host-b", "host-c"}  # host-d's worker is dead
    uc.servers.env.workers_on = lambda host: {"host-b": ["wb"], "host-c": ["wc"]}.get(host, [])
    uc.servers.env.forward = lambda worker, method, path, body: sent.append((worker, method, path, body)) or {}
    assert {h["name"]: h["state"] for h in uc.servers.hosts()} == {
        "host-a": "up", "host-b": "up", "host-c": "up", "host-d": "down"}

    def create(sid, **kw):
        uc.servers.create(id=sid, name=sid, flavor=kw.pop("flavor", "container"), image="overcloud-full",
                          first_boot={"token": f"t-{sid}"}, **kw)
        return uc.servers.get(sid)

    assert create("s0")["host"] == "host-a"  # this host while it has room, though others have more
    assert "s0" in uc.fake.machines and sent == []
    srv = create("s1")  # host-a is full: the host with most free memory
    assert (srv["host"], srv["status"]) == ("host-b", "BUILD")
    assert "s1" not in uc.fake.machines  # not made here: host-b's worker makes it
    assert sent == [("wb", "POST", "/v1/servers/s1/action", {"action": "spawn", "first_boot": {"token": "t-s1"}})]
    with uc.ctx.store.session() as s:  # room for one more here, for the pins below
        s.get(HypervisorHost, ("host-a", "container")).memory_mb = 2048
    uc.servers.flavors.create("on-a", 1, 512, 1, {"hypervisor_type": "container", HOST_SPEC: "host-a"})
    assert create("s2", flavor="on-a")["host"] == "host-a" and "s2" in uc.fake.machines
    for kw, error in (
            ({"scheduler_hints": {HOST_SPEC: "host-d"}},
             "no container host can take flavor container: host-d has no live undercloud worker"),
            ({"scheduler_hints": {HOST_SPEC: "host-x"}},
             "no container hypervisor host 'host-x' is registered (capabilities:hypervisor_hostname of flavor "
             "container or the scheduler hints)"),
            ({"flavor": "on-a", "scheduler_hints": {HOST_SPEC: "host-b"}},
             "no container hypervisor host 'host-a and host-b' is registered")):
        with pytest.raises(Conflict) as e:
            create("s9", **kw)
        assert error in e.value.message
    assert not uc.servers.exists("s9")  # refused before anything was written
    # host-b's worker stops answering (asked again for SPAWN_ASK_FOR seconds: none here): the
    # server it was to make is an ERROR saying why.
    from undercloud.provisioning.servers import service

    monkeypatch.setattr(service, "SPAWN_ASK_FOR", 0.0)
    uc.servers.env.forward = lambda *a: (_ for _ in ()).throw(ServiceUnavailable("worker wb did not answer"))
    with pytest.raises(UndercloudError, match="server s3: spawning on host host-b failed: worker wb did not answer"):
        create("s3", scheduler_hints={HOST_SPEC: "host-b"})
    assert (uc.servers.get("s3")["status"], uc.servers.get("s3")["fault"]) == (
        "ERROR", "spawning: worker wb did not answer")
    # This host cannot make containers (no podman): placed on the other one, refused when pinned here.
    uc.servers.env.forward = lambda worker, method, path, body: sent.append((worker, method, path, body)) or {}
    monkeypatch.setattr(uc.fake, "available", lambda: "podman is not installed")
    uc.servers._available.clear()
    assert create("s4")["host"] == "host-b"
    with pytest.raises(Conflict, match="^flavor: no container host can take flavor on-a: host-a cannot realise container "
                                       "servers: podman is not installed$"):
        create("s5", flavor="on-a")
    # Many hosts that cannot: the first five say why, then how many more.
    for i in range(6):
        register_host(uc, f"host-z{i}", memory_mb=65536)
    uc.servers.env.hosts_up = lambda: set()
    with pytest.raises(Conflict) as e:
        create("s6")
    assert e.value.message.startswith("no container host can take flavor container: host-a cannot realise container "
                                      "servers: podman is not installed; host-b has no live undercloud worker; ")
    assert e.value.message.endswith("; 5 more hosts cannot") and e.value.message.count(";") == 5


def test_a_retired_host_is_forgotten_only_when_down_and_empty(uc, monkeypatch):
    uc.image("overcloud-full", "container", "oci")
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-a")
    uc.servers.ensure_local_hosts()
    register_host(uc, "host-b")
    uc.servers.create(id="s-1", name="far", flavor="container", image="overcloud-full", first_boot={})
    uc.servers._save("s-1", host="host-b")
    uc.servers.env.hosts_up = lambda: {"host-b"}
    for name, error, message in (
            ("host-x", NotFound, "no hypervisor host 'host-x' (`server hypervisors` lists them)"),
            ("host-a", Conflict, "host host-a has a live undercloud worker: stop it first"),
            ("host-b", Conflict, "host host-b has a live undercloud worker: stop it first")):
        with pytest.raises(error) as e:
            uc.servers.forget_host(name)
        assert e.value.message == message
    uc.servers.env.hosts_up = lambda: set()
    with pytest.raises(Conflict, match=r"^host: host host-b holds 1 server\(s\): delete them first"):
        uc.servers.forget_host("host-b")
    uc.servers._save("s-1", host="host-a")
    # host-b had joined host-a's lab network: it leaves it, and its address there is free again
    env = uc.servers.env
    env.lab_networks.define("ua-lab", "10.9.0.0/24", "10.9.0.1", "host-a")
    env.lab_networks.join("ua-lab", "host-a", "192.168.24.254", "10.9.0.1")
    env.lab_networks.join("ua-lab", "host-b", "192.168.24.107", env.addresses.claim("ua-lab", "host:host-b",
                                                                                     ["10.9.0.254"]))
    assert uc.servers.forget_host("host-b") == {"name": "host-b", "hypervisor_types": ["container"]}
    assert "host-b" not in {h["name"] for h in uc.servers.hosts()}
    assert [m["host"] for m in env.lab_networks.members("ua-lab")] == ["host-a"]
    assert env.addresses.on("ua-lab") == {}


def test_a_hypervisor_host_node_is_not_deleted_under_its_servers(uc, monkeypatch):
    """The node of a hypervisor host (its worker's host is named after it) is refused while
    servers run on it: deleting it would strand them on a host that never comes back."""
    uc.image("overcloud-full", "container", "oci")
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-a")
    uc.servers.ensure_local_hosts()
    uc.servers.create(id="s-node", name="hv-node", flavor="container", image="overcloud-full", first_boot={})
    register_host(uc, "hv-node")
    uc.servers.create(id="s-1", name="guest-1", flavor="container", image="overcloud-full", first_boot={})
    uc.servers._save("s-1", host="hv-node")
    with pytest.raises(Conflict) as e:
        uc.servers.delete("hv-node")
    assert e.value.message == "server hv-node is the hypervisor host of 1 server(s) (guest-1): delete them first"
    assert uc.servers.get("hv-node")["task"] != "deleting"  # nothing started
    uc.servers._save("s-1", host="host-a")
    uc.servers.delete("hv-node")
    assert not uc.servers.exists("s-node")


def test_placements_racing_from_two_workers_never_overfill_a_host(uc, monkeypatch):
    """Two workers' services on one store place six servers at once on a host with room for
    three. Reading a host's use is slowed, so that without the hosts' lock every placement
    would find the host empty: three are placed, three refused in one line."""
    import threading

    from undercloud.store.servers import HypervisorHost

    uc.image("overcloud-full", "container", "oci")
    monkeypatch.setenv("UNDERCLOUD_HOST", "host-a")
    with uc.ctx.store.session() as s:
        s.query(HypervisorHost).delete()
    register_host(uc, "host-a", memory_mb=3 * 512)
    other = ServersService(uc.ctx.store, uc.servers.env,
                           realisers={"container": FakeRealiser(uc.servers.env, "container")})
    used = Placement.used

    def slow(self, s, ht=None):
        out = used(self, s, ht)
        time.sleep(0.1)
        return out

    monkeypatch.setattr(Placement, "used", slow)
    results = {}

    def make(svc, i):
        try:
            svc.create(id=f"r{i}", name=f"r{i}", flavor="container", image="overcloud-full", first_boot={})
            results[i] = "placed"
        except Conflict as exc:
            results[i] = exc.message

    threads = [threading.Thread(target=make, args=(svc, i)) for i, svc in enumerate([uc.servers, other] * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert list(results.values()).count("placed") == 3, results
    assert all(m == "placed" or m == "no container host can take flavor container: host-a has 0 MB free < 512 MB"
               for m in results.values()), results
    (host,) = uc.servers.hosts()
    assert (host["memory_mb_used"], host["servers"]) == (1536, 3)


def test_a_host_makes_the_server_another_hosts_worker_placed_on_it_in_the_background(uc, monkeypatch):
    """The `spawn` action, on the placed host's worker: answers at once, the machine follows;
    with no first-boot data on this host and none given, it asks for it (428, as a resumed
    create does)."""
    uc.image("overcloud-full", "container", "oci")
    uc.fake.delay = 0.3
    uc.servers.create(id="s-1", name="box", flavor="container", image="overcloud-full", first_boot={"t": 1})
    uc.servers._save("s-1", status="BUILD", task="spawning")
    del uc.fake.machines["s-1"]
    shutil.rmtree(uc.servers.first_boot_dir("s-1"))  # as on a host that never had it
    client = TestClient(create_app(uc.ctx), base_url=HTTPS)
    headers = {"X-Undercloud-Token": uc.ctx.admin_token}
    r = client.post("/v1/servers/s-1/action", json={"action": "spawn"}, headers=headers)
    assert r.status_code == 428 and "first-boot data was lost" in r.json()["error"], r.text
    r = client.post("/v1/servers/s-1/action", json={"action": "spawn", "first_boot": {"t": 2}}, headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "BUILD", r.text
    assert uc.servers.wait("box", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    assert uc.servers.read_first_boot("s-1")["t"] == 2
    assert uc.fake.calls.count(("create", "s-1")) == 2  # the first create, then this host's
    # Asked again while the machine is being made (a forward retried, the engine resuming on
    # this worker): made once.
    uc.servers._save("s-1", status="BUILD", task="spawning")
    create = uc.fake.create

    def slow_create(spec):
        time.sleep(0.5)
        create(spec)

    monkeypatch.setattr(uc.fake, "create", slow_create)
    for _ in range(2):
        r = client.post("/v1/servers/s-1/action", json={"action": "spawn"}, headers=headers)
        assert r.status_code == 200 and r.json()["status"] == "BUILD", r.text
    time.sleep(0.1)
    assert uc.servers.resume("s-1")["status"] == "BUILD"  # returns while the spawn goes on
    assert uc.servers.wait("box", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    time.sleep(0.6)  # any second make would have ended by now
    assert uc.fake.calls.count(("create", "s-1")) == 3


def test_status_sync_shows_machines_changed_outside_and_a_crashed_one_powers_on(uc):
    uc.image("overcloud-full", "container", "oci")
    for sid, name in (("s-1", "box"), ("s-2", "other"), ("s-3", "busy")):
        uc.servers.create(id=sid, name=name, flavor="container", image="overcloud-full", first_boot={})
        assert uc.servers.wait(name, {"ACTIVE"}, 5)["status"] == "ACTIVE"
    fake = uc.servers.realiser("container")
    fake.machines["s-1"]["on"] = False   # stopped outside the undercloud
    del fake.machines["s-2"]             # removed outside it
    fake.machines["s-3"]["on"] = False
    uc.servers._save("s-3", task="rebuilding")  # work under way: not the sync's to judge
    assert {x["name"]: x["status"] for x in uc.servers.list()} == {"box": "ACTIVE", "busy": "ACTIVE",
                                                                    "other": "ACTIVE"}
    stats = uc.servers.sync_status()
    assert (stats["servers"], stats["changed"]) == (2, 2)
    listed = {x["name"]: x for x in uc.servers.list()}
    assert listed["box"]["status"] == "SHUTOFF" and listed["busy"]["status"] == "ACTIVE"
    assert listed["other"]["status"] == "ERROR" and "the machine is gone" in listed["other"]["fault"]
    assert uc.servers.sync_status()["changed"] == 0  # ERROR is not settled: left as it is

    # A crashed machine (ERROR) is powered on again; one that is gone says so in one line.
    uc.servers._save("s-1", status="ERROR", fault="container exited (code 137)")
    assert uc.servers.power("box", True)["status"] == "ACTIVE"
    with pytest.raises(Conflict, match=r"^server: server other: the machine is gone; `undercloud server rebuild other`"):
        uc.servers.power("other", True)
    with pytest.raises(Conflict, match=r"server busy is ACTIVE \(rebuilding\); power on/off needs"):
        uc.servers.power("busy", False)


def test_a_refresh_does_not_undo_what_a_power_call_saved_meanwhile(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-1", name="box", flavor="container", image="overcloud-full", first_boot={})
    assert uc.servers.wait("box", {"ACTIVE"}, 5)["status"] == "ACTIVE"
    fake = uc.servers.realiser("container")
    real_status = fake.status

    def racing(spec):
        seen = real_status(spec)  # ACTIVE, read before...
        fake.status = real_status
        assert uc.servers.power("box", False)["status"] == "SHUTOFF"  # ...a power off saved
        return seen

    fake.status = racing
    uc.servers.refresh("box")  # e.g. the status sync
    assert uc.servers.get("box")["status"] == "SHUTOFF"
    assert uc.servers.refresh("box")["status"] == "SHUTOFF"


# ---- token scope ------------------------------------------------------------------------
TWO = """\
heat_template_version: wallaby
resources:
  a:
    type: OS::Nova::Server
    properties: {name: a, image: overcloud-full, flavor: container, metadata: {secret_of: a}}
  b:
    type: OS::Nova::Server
    properties: {name: b, image: overcloud-full, flavor: container, metadata: {secret_of: b}}
"""


def two_servers(uc):
    """Servers a and b of one stack: their ids, each one's agent token, an API client."""
    uc.image("overcloud-full", "container", "oci")
    uc.stack("s1", TWO)
    ids = {s["name"]: s["id"] for s in uc.servers.list()}
    tok = {n: json.loads((uc.servers.first_boot_dir(i) / "config.json").read_text())["token"] for n, i in ids.items()}
    return ids, tok, TestClient(create_app(uc.ctx), base_url=HTTPS)


def test_a_server_token_reads_only_its_own_metadata(uc):
    ids, tok, api = two_servers(uc)
    own = api.get(f"/v1/agent/servers/{ids['a']}/metadata", headers={"X-Server-Token": tok["a"]})
    assert own.status_code == 200 and own.json()["secret_of"] == "a"
    other = api.get(f"/v1/agent/servers/{ids['b']}/metadata", headers={"X-Server-Token": tok["a"]})
    assert other.status_code == 401 and "secret_of" not in other.text
    assert api.get(f"/v1/agent/servers/{ids['b']}/metadata").status_code == 401
    # nor can it use the admin API
    assert api.get("/v1/servers", headers={"X-Undercloud-Token": tok["a"]}).status_code == 401


def test_a_servers_watchdog_reports_its_health_with_its_own_token(uc):
    ids, tok, api = two_servers(uc)
    admin = {"X-Undercloud-Token": uc.ctx.admin_token}
    missing = api.get("/v1/servers/a/health", headers=admin)
    assert missing.status_code == 404 and missing.json()["error"] == "server a: no health report from its agent yet"
    report = {"paused": False, "pods": {"keystone": {"config": "0123456789ab", "mode": "netns", "containers": {
        "keystone": {"state": "running", "image": "localhost/service-keystone:1", "restarts": 2}}}}}
    url = f"/v1/agent/servers/{ids['a']}/health"
    assert api.put(url, json=report, headers={"X-Server-Token": tok["b"]}).status_code == 401  # not its own
    assert api.put(url, json=report).status_code == 401
    bad = api.put(url, json={"pods": ["keystone"]}, headers={"X-Server-Token": tok["a"]})
    assert bad.status_code == 400 and bad.json()["where"] == "pods"
    assert api.put(url, content=b"{not json", headers={"X-Server-Token": tok["a"],
                                                        "Content-Type": "application/json"}).status_code == 400
    assert api.put(url, json=report, headers={"X-Server-Token": tok["a"]}).json() == {"acknowledged": True}
    got = api.get("/v1/servers/a/health", headers=admin).json()
    assert got["name"] == "a" and got["server"] == ids["a"] and got["pods"] == report["pods"]
    assert got["reported_at"] > 0 and got["paused"] is False
    assert api.get("/v1/servers/a/health", headers={"X-Server-Token": tok["a"]}).status_code == 401  # admin only


GROUP = """\
heat_template_version: wallaby
parameters:
  ComputeCount: {type: number, default: 3}
  policies: {type: json, default: []}
resources:
  ComputeServers:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: ComputeCount}
      removal_policies: {get_param: policies}
      resource_def:
        type: OS::Nova::Server
        properties: {name: "cmp-%index%", image: overcloud-full, flavor: container}
"""


def test_scale_in_names_the_nodes_the_engine_would_remove(uc):
    from undercloud.overcloud import scale

    uc.image("overcloud-full", "container", "oci")
    path = uc.dir / "group.yaml"
    path.write_text(GROUP)
    bundle = Bundle.from_paths(str(path)).to_json()
    uc.ctx.stacks.create("oc", bundle, {}, wait=True)
    api = TestClient(create_app(uc.ctx), base_url=HTTPS)

    def get(url, **kw):
        r = api.get(url, headers={"X-Undercloud-Token": uc.ctx.admin_token}, **kw)
        assert r.status_code == 200, r.text
        return r.json()

    def removed(**params):
        return scale.removed_nodes("oc", uc.ctx.stacks.update("oc", bundle, params, dry_run=True), get)

    assert removed() == {}
    assert removed(ComputeCount=1) == {"cmp-1": "Compute", "cmp-2": "Compute"}  # the highest indexes
    assert removed(ComputeCount=2, policies=[{"resource_list": ["0"]}]) == {"cmp-0": "Compute"}  # as told
    assert removed(ComputeCount=4) == {}
    assert len(uc.servers.list()) == 3  # a dry run changes nothing


def test_errors_are_one_line_undercloud_errors(uc):
    with pytest.raises(UndercloudError) as e:
        uc.servers.create(id="a", name="ok", flavor="nope", image="x", first_boot={})
    assert "\n" not in str(e.value)


def test_build_timeout_ends_in_error_naming_what_it_waited_for(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.fake.delay = 3600
    uc.fake.build_timeout = 0.2
    uc.servers.create(id="s-1", name="slow", flavor="container", image="overcloud-full", first_boot={})
    time.sleep(0.3)
    srv = uc.servers.refresh("slow")
    assert srv["status"] == "ERROR" and "not ACTIVE after 0 s" in srv["fault"]
    assert "the fake machine to boot" in srv["fault"]


def test_a_resumed_create_finishes_with_the_first_boot_data_it_had(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.servers.create(id="s-1", name="box", flavor="container", image="overcloud-full", first_boot={"token": "t1"})
    uc.fake.machines.clear()  # the service died after writing the record, before the machine existed
    uc.servers._save("s-1", status="BUILD")
    uc.servers.create(id="s-1", name="box", flavor="container", image="overcloud-full", first_boot={"token": "t2"})
    assert uc.fake.machines["s-1"]["first_boot"]["token"] == "t1"  # same token: nothing rotated
    assert [c for c in uc.fake.calls if c[0] == "create"] == [("create", "s-1")] * 2
    assert [s["id"] for s in uc.servers.list()] == ["s-1"]


UD = """\
heat_template_version: wallaby
parameters:
  name: {type: string, default: box}
  ud: {type: string, default: "#!/bin/sh\\necho one\\n"}
  policy: {type: string, default: REPLACE}
resources:
  node:
    type: OS::Nova::Server
    properties:
      name: {get_param: name}
      image: overcloud-full
      flavor: container
      user_data_format: RAW
      user_data: {get_param: ud}
      user_data_update_policy: {get_param: policy}
"""


@pytest.mark.parametrize("policy,same,rebuilt", [("REPLACE", False, False), ("IGNORE", True, False),
                                                  ("REBUILD", True, True)])
def test_user_data_update_policies_as_heat_names_them(uc, policy, same, rebuilt):
    uc.image("overcloud-full", "container", "oci")
    uc.stack("s1", UD, policy=policy)
    (before,) = uc.servers.list()
    path = uc.dir / "s1.yaml"
    uc.ctx.stacks.update("s1", Bundle.from_paths(str(path)).to_json(),
                         {"policy": policy, "ud": "#!/bin/sh\necho two\n"}, wait=True)
    assert uc.ctx.stacks.show("s1")["stack_status"] == "UPDATE_COMPLETE"
    (after,) = uc.servers.list()
    assert (after["id"] == before["id"]) is same
    assert (("rebuild", before["id"]) in uc.fake.calls) is rebuilt
    user_data = (uc.servers.first_boot_dir(after["id"]) / "user-data").read_text()
    assert user_data == ("#!/bin/sh\necho one\n" if policy == "IGNORE" else "#!/bin/sh\necho two\n")


def test_rename_changes_the_record_in_place(uc):
    uc.image("overcloud-full", "container", "oci")
    uc.stack("s1", UD)
    (before,) = uc.servers.list()
    uc.ctx.stacks.update("s1", Bundle.from_paths(str(uc.dir / "s1.yaml")).to_json(), {"name": "renamed"}, wait=True)
    (after,) = uc.servers.list()
    assert (after["id"], after["name"]) == (before["id"], "renamed")
