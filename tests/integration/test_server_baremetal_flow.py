"""The bare-metal realiser's control flow in-process, against the real nodes service, store,
scheduler and image store, with `fake` BMCs (no machine: the full path with a real BMC and
ramdisk is test_server_baremetal.py). Fast: seconds, no root, no VM.

Covers what the lab test cannot afford to repeat: the call-back's token check, a call-back
in the wrong state, a ramdisk's reported failure, the call-back timeout, delete in each
state, and the media the hook inserts (a one-shot HTTP URL serving this deploy's ISO).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid

import pytest

from tests.conftest import need, need_root
from undercloud.config import Home
from undercloud.errors import Conflict, InvalidInput
from undercloud.images.store import ImageStore
from undercloud.provisioning import states
from undercloud.provisioning.drivers import fake
from undercloud.provisioning.nodes import NodeService
from undercloud.provisioning.scheduler import Request, Scheduler
from undercloud.provisioning.servers import baremetal
from undercloud.provisioning.servers.base import ACTIVE, BUILD, DELETED, ERROR, SHUTOFF, Env, Spec
from undercloud.store import Store
from undercloud.store.addresses import AddressTable

GATEWAY = "192.0.2.1"


@pytest.fixture
def world(tmp_path, monkeypatch, request):
    """`request.param`: more instackenv fields of the node (e.g. capabilities)."""
    if not shutil.which("xorriso"):
        pytest.skip("xorriso is not installed")
    fake.reset()
    home = Home(tmp_path / "uc").ensure()
    store = Store(home.db_url).create_schema()
    made = {}  # the realiser, made below from an Env holding this node service: its deploy interface
    nodes = NodeService(store, workers=2, deploy_interface=lambda: made["realiser"])
    images = ImageStore(home, store)
    # A tiny stand-in for the deploy ramdisk ISO, and an image to deploy.
    (tmp_path / "iso").mkdir()
    (tmp_path / "iso" / "hello").write_text("ramdisk\n")
    (tmp_path / "iso" / "vmlinuz").write_bytes(b"kernel stand-in")   # what a network boot loads
    (tmp_path / "iso" / "initrd").write_bytes(b"initramfs stand-in")
    iso = tmp_path / "ramdisk.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(iso), str(tmp_path / "iso")], check=True)
    disk = b"qcow2 stand-in" * 1000
    regs = []
    for name, fmt, data in (("deploy-ramdisk", "iso", iso.read_bytes()), ("overcloud-full", "qcow2", disk)):
        sha = hashlib.sha256(data).hexdigest()
        images.put_blob([data], sha, len(data))
        regs.append({"name": name, "disk_format": fmt, "sha256": sha, "properties": {"hypervisor_type": "baremetal"}})
    images.register(regs)
    # The lab network is the lab's business (root, libvirtd): not needed to follow the flow.
    monkeypatch.setattr(baremetal, "lab_network", lambda _home: ("/proc/self/ns/net", "br-test", GATEWAY))
    monkeypatch.setattr(baremetal, "serve_api", lambda *_a: None)
    env = Env(home=home, api_port=8999, nodes=nodes, scheduler=Scheduler(store), images=images,
              addresses=AddressTable(store))
    realiser = made["realiser"] = baremetal.BaremetalRealiser(env)
    nodes.import_nodes(json.dumps({"nodes": [{
        "name": "bm-node", "pm_type": "fake", "pm_addr": "fake-bm", "pm_user": "admin", "pm_password": "s3cret",
        "ports": [{"address": "52:54:00:aa:bb:01"}], "cpu": 1, "memory": 2048, "disk": 10, "arch": "x86_64",
        "root_device": {"size": ">= 5"}, **getattr(request, "param", {})}]}))
    for verb in ("manage", "provide"):
        nodes.act("bm-node", verb)
        wait_state(nodes, {"manageable", "available"})
    yield realiser, nodes, images
    nodes.close()


def wait_state(nodes: NodeService, want: set[str], timeout: float = 10, name: str = "bm-node") -> dict:
    deadline = time.monotonic() + timeout
    while (n := nodes.get(name))["provision_state"] not in want:
        assert time.monotonic() < deadline, f"node is {n['provision_state']}, not {want}: {n['last_error']}"
        time.sleep(0.02)
    return n


def spec_for(realiser, images, nodes) -> Spec:
    sid = str(uuid.uuid4())
    node = realiser.env.scheduler.claim(Request(instance_uuid=sid))
    img = images.list(name="overcloud-full")[0]
    return Spec(id=sid, name="bm0", hypervisor_type="baremetal", flavor={"name": "baremetal"}, image=img,
                image_path=images.blob_path(img["checksum"]),
                first_boot={"server_id": sid, "token": "server-token", "url": f"http://{GATEWAY}:8999"},
                networks=[], node=node)


def deploy_request(realiser, spec: Spec | str) -> dict:
    """The request inside the ISO the hook inserted (what the ramdisk reads)."""
    iso = realiser._dir(spec if isinstance(spec, str) else spec.id) / "deploy.iso"
    out = subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/undercloud/deploy.json",
                          str(iso.with_name("req.json"))], capture_output=True)
    assert out.returncode == 0, out.stderr
    return json.loads(iso.with_name("req.json").read_text())


def test_deploy_call_back_finish_and_delete(world, monkeypatch):
    realiser, nodes, images = world
    inserted = []
    real_insert = fake.FakeMedia.insert

    def insert(self, url):  # what a BMC does at insert: fetch the media
        inserted.append(urllib.request.urlopen(url, timeout=10).read())
        real_insert(self, url)

    monkeypatch.setattr(fake.FakeMedia, "insert", insert)
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    n = wait_state(nodes, {states.DEPLOY_WAIT})
    machine = fake.machine_state("fake-bm")
    assert machine["power"] == "on" and machine["boot"].startswith("cd") and machine["media"]
    assert inserted and inserted[0] == (realiser._dir(spec.id) / "deploy.iso").read_bytes()
    assert realiser.status(spec).status == BUILD
    with pytest.raises(OSError):  # the media was served for the insert only
        urllib.request.urlopen(machine["media"], timeout=5)
    req = deploy_request(realiser, spec)
    assert req["image"]["checksum"] == spec.image["checksum"] and req["root_device"] == {"size": ">= 5"}
    assert req["network"] == {"mac": "52:54:00:aa:bb:01", "address": "192.0.2.100", "prefix": 24}
    assert req["url"] == f"http://{GATEWAY}:8999"
    # Wrong or missing token: denied, nothing moves.
    for token in ("nope", None, ""):
        with pytest.raises(baremetal.DeployDenied):
            realiser.callback(spec.id, token, True, None)
    with pytest.raises(baremetal.DeployDenied):
        realiser.callback(str(uuid.uuid4()), req["token"], True, None)
    assert nodes.get("bm-node")["provision_state"] == states.DEPLOY_WAIT
    assert realiser.callback(spec.id, req["token"], True, None)["acknowledged"] is True
    n = wait_state(nodes, {states.ACTIVE})
    assert machine["media"] is None and machine["boot"] == "disk" and machine["power"] == "on"
    assert "boot_mode" not in machine  # a node without the boot_mode capability: its firmware untouched
    st = realiser.status(spec)
    assert st.status == ACTIVE and st.addresses == {"ctlplane": ["192.0.2.100"]}
    assert not (realiser._dir(spec.id) / "deploy.iso").exists()
    with pytest.raises(Conflict, match="not waiting for this call-back"):  # a second call-back
        realiser.callback(spec.id, req["token"], True, None)
    realiser.power(spec, False)  # server power off/on = the node's, through its BMC
    assert machine["power"] == "off" and realiser.status(spec).status == SHUTOFF
    realiser.power(spec, True)
    assert machine["power"] == "on" and realiser.status(spec).status == ACTIVE
    realiser.delete(spec)
    n = wait_state(nodes, {states.AVAILABLE})
    assert n["instance_uuid"] is None and machine["power"] == "off"
    assert realiser.status(spec).status == DELETED
    assert not realiser._dir(spec.id).exists()


@pytest.mark.parametrize("world", [{"capabilities": "boot_mode:uefi"}], indirect=True)
def test_a_uefi_node_has_its_bmc_switched_to_uefi_before_the_ramdisk_boots(world):
    realiser, nodes, images = world
    machine = fake.machine_state("fake-bm")
    machine["boot_mode"] = "bios"
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    assert machine["boot_mode"] == "uefi" and machine["boot"].startswith("cd") and machine["power"] == "on"
    realiser.delete(spec)
    assert wait_state(nodes, {states.AVAILABLE})["instance_uuid"] is None


def test_a_ramdisk_failure_fails_the_deploy_with_its_reason_and_undeploy_recovers(world):
    realiser, nodes, images = world
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    token = deploy_request(realiser, spec)["token"]
    realiser.callback(spec.id, token, False, "image checksum mismatch: x\nsecond line dropped")
    n = wait_state(nodes, {states.DEPLOY_FAILED})
    assert n["last_error"] == "deploy ramdisk: image checksum mismatch: x"
    st = realiser.status(spec)
    assert st.status == ERROR and st.reason == "node bm-node: deploy failed: deploy ramdisk: image checksum mismatch: x"
    assert fake.machine_state("fake-bm")["power"] == "off"
    realiser.delete(spec)
    assert wait_state(nodes, {states.AVAILABLE})["instance_uuid"] is None


def test_no_call_back_times_out_naming_it_and_delete_recovers(world, monkeypatch):
    realiser, nodes, images = world
    monkeypatch.setattr(baremetal, "CALLBACK_TIMEOUT", 0.2)
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    time.sleep(0.3)
    st = realiser.status(spec)
    assert st.status == ERROR
    n = nodes.get("bm-node")
    assert n["provision_state"] == states.DEPLOY_FAILED
    assert n["last_error"] == "timed out after 0 s in 'wait call-back': the deploy ramdisk on node bm-node never called back"
    realiser.delete(spec)
    assert wait_state(nodes, {states.AVAILABLE})["instance_uuid"] is None


def test_delete_while_waiting_aborts_then_undeploys(world):
    realiser, nodes, images = world
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    realiser.delete(spec)
    n = wait_state(nodes, {states.AVAILABLE})
    events = [e["message"] for e in nodes.events("bm-node")]
    assert any("wait call-back -> deploy failed (abort)" in e for e in events)
    assert n["instance_uuid"] is None and realiser.status(spec).status == DELETED


def test_a_bmc_error_in_the_deploy_step_names_the_bmc_and_hides_the_password(world, monkeypatch):
    realiser, nodes, images = world

    def broken(self, url):
        raise fake.DriverError(f"cannot reach {self.driver.where}: connection refused (password s3cret)")

    monkeypatch.setattr(fake.FakeMedia, "insert", broken)
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    n = wait_state(nodes, {states.DEPLOY_FAILED})
    assert n["last_error"] == "cannot reach fake BMC fake-bm: connection refused (password ******)"
    assert "s3cret" not in json.dumps(nodes.events("bm-node"))


def test_create_refuses_what_it_cannot_deploy(world):
    realiser, nodes, images = world
    spec = spec_for(realiser, images, nodes)
    spec.image = {**spec.image, "disk_format": "oci", "name": "x"}
    with pytest.raises(baremetal.RealiserError, match="image x is oci; bare-metal servers take qcow2 or raw"):
        realiser.create(spec)
    spec.image = images.list(name="overcloud-full")[0]  # a good image, but no deploy ramdisk
    images.delete("deploy-ramdisk")
    with pytest.raises(baremetal.RealiserError, match="no deploy-ramdisk ISO in the image store"):
        realiser.create(spec)
    assert nodes.get("bm-node")["provision_state"] == states.AVAILABLE


def start_inspection(nodes) -> str:
    """bm-node managed, then inspected until it waits for the ramdisk; returns its id."""
    nodes.act("bm-node", "manage")
    wait_state(nodes, {states.MANAGEABLE})
    nodes.act("bm-node", "inspect")
    wait_state(nodes, {states.INSPECT_WAIT})
    return nodes.get("bm-node")["uuid"]


def test_inspection_boots_the_ramdisk_and_applies_what_it_reports(world):
    realiser, nodes, images = world
    node_id = start_inspection(nodes)
    machine = fake.machine_state("fake-bm")
    assert machine["power"] == "on" and machine["media"]
    req = deploy_request(realiser, f"inspect-{node_id}")
    assert req["mode"] == "inspect" and req["server_id"] == f"inspect-{node_id}"
    assert req["network"] == {"mac": "52:54:00:aa:bb:01", "address": "192.0.2.100", "prefix": 24}
    with pytest.raises(baremetal.DeployDenied):
        realiser.callback(req["server_id"], "wrong", True, None, {"cpus": 64})
    found = {"cpus": 4, "memory_mb": 2048, "local_gb": 7, "cpu_arch": "x86_64",
             "macs": ["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"], "disks": [{"name": "/dev/vda"}]}
    realiser.callback(req["server_id"], req["token"], True, None, found)
    n = wait_state(nodes, {states.MANAGEABLE})
    assert {k: n["properties"][k] for k in ("cpus", "memory_mb", "local_gb", "cpu_arch")} == \
        {"cpus": 4, "memory_mb": 2048, "local_gb": 7, "cpu_arch": "x86_64"}
    assert n["ports"] == ["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]  # a NIC found on the machine
    assert machine["power"] == "off" and machine["media"] is None
    assert not realiser._dir(f"inspect-{node_id}").exists()
    assert baremetal.Addresses(realiser.env.home, GATEWAY, realiser.env.addresses).held() == {}


def test_without_a_ramdisk_image_inspection_reads_the_bmc(world):
    realiser, nodes, images = world
    images.delete("deploy-ramdisk")
    nodes.act("bm-node", "manage")
    wait_state(nodes, {states.MANAGEABLE})
    nodes.act("bm-node", "inspect")
    n = wait_state(nodes, {states.MANAGEABLE, states.INSPECT_FAILED, states.INSPECT_WAIT})
    assert n["provision_state"] == states.MANAGEABLE  # the fake BMC's inventory, as before
    assert fake.machine_state("fake-bm")["media"] is None


def test_a_network_booted_node_without_a_port_is_inspected_through_its_bmc(world):
    """Network boot needs a MAC to arm (PxeBoot.needs_mac): without a port the ramdisk is not
    booted and the BMC's inventory is read instead; nothing is armed."""
    realiser, nodes, images = world
    nodes.delete("bm-node")
    nodes.import_nodes(json.dumps({"nodes": [{
        "name": "bm-node", "pm_type": "fake", "pm_addr": "fake-bm", "pm_user": "admin", "pm_password": "s3cret",
        "boot_interface": "pxe", "cpu": 1, "memory": 2048, "disk": 10, "arch": "x86_64"}]}))
    nodes.act("bm-node", "manage")
    wait_state(nodes, {states.MANAGEABLE})
    nodes.act("bm-node", "inspect")
    n = wait_state(nodes, {states.MANAGEABLE, states.INSPECT_FAILED, states.INSPECT_WAIT})
    assert n["provision_state"] == states.MANAGEABLE, n["last_error"]
    machine = fake.machine_state("fake-bm")
    assert machine["boot"] != "pxe" and machine["media"] is None
    assert not realiser._dir(f"inspect-{n['uuid']}").exists()
    assert realiser.netboot._hosts() == []


def test_a_node_that_is_a_clouds_server_deploys_through_nova_rescue(world, monkeypatch):
    """pm_type openstack (QuintupleO's virtual power): the ramdisk ISO goes to the cloud's
    Glance as a rescue image, the server is rescued with it, the ramdisk takes the address
    of the server's port and calls this host's address on its route there (served from
    now on, and again at every start); after the call-back the image is gone and the
    server boots its disk. Inspection reads the flavor: no ramdisk boots for it."""
    from tests.openstack_support import FakeCloud
    from undercloud.provisioning.drivers import openstack as os_driver

    realiser, nodes, images = world
    cloud = FakeCloud()
    srv = cloud._create_server("bm-0", "img", "f-1", [], {})
    cloud.boot(srv)
    config = {"auth": {"auth_url": "http://127.0.0.1:5000/v3"}}
    monkeypatch.setattr(nodes, "cloud_config", lambda name: config)  # the service's clouds
    monkeypatch.setattr(os_driver, "_connections", {("host", json.dumps(config, sort_keys=True)): cloud})
    monkeypatch.setattr(os_driver, "route_source", lambda address: "10.9.0.1")
    listened = []
    realiser.env.listen = listened.append
    nodes.delete("bm-node")  # the only node left to claim is the cloud's server
    nodes.import_nodes(json.dumps({"nodes": [{"name": "os-node", "pm_type": "openstack", "cloud": "host",
                                              "server": "bm-0"}]}))
    for verb, state in (("manage", states.MANAGEABLE), ("inspect", states.MANAGEABLE), ("provide", states.AVAILABLE)):
        nodes.act("os-node", verb)
        n = wait_state(nodes, {state}, name="os-node")
    assert n["properties"]["memory_mb"] == 1024 and not realiser.root.exists()  # the flavor's; no ramdisk
    spec = spec_for(realiser, images, nodes)
    spec.first_boot["url"] = realiser.agent_url(spec)
    assert spec.first_boot["url"] == "https://10.9.0.1:8999" and listened == ["10.9.0.1"]
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT}, name="os-node")
    (upload,) = cloud.uploads
    assert upload["bytes"] == (realiser._dir(spec.id) / "deploy.iso").read_bytes()
    (image,) = cloud.imgs
    assert srv.status == "RESCUE" and [a for _n, a in cloud.actions][-1] == f"rescue {image}"
    req = deploy_request(realiser, spec)
    assert req["network"] == {"mac": "fa:16:3e:00:00:01", "address": "10.9.0.201", "prefix": 24}
    assert req["url"] == "https://10.9.0.1:8999"  # the ramdisk calls back over TLS (the boot files stay plain)
    baremetal.BaremetalRealiser(realiser.env).startup()  # a restarted service serves there again
    # (and the guests' listener the lab's relay leads to)
    assert listened == ["10.9.0.1", baremetal.GUEST_RELAY, "10.9.0.1"]
    realiser.callback(spec.id, req["token"], True, None)
    wait_state(nodes, {states.ACTIVE}, name="os-node")
    assert (srv.status, cloud.imgs, srv.metadata) == ("ACTIVE", {}, {})
    assert [a for _n, a in cloud.actions][-1] == "unrescue"  # ending the rescue boots the disk
    assert realiser.status(spec).addresses == {"ctlplane": ["10.9.0.201"]}
    realiser.delete(spec)
    n = wait_state(nodes, {states.AVAILABLE}, name="os-node")
    assert n["instance_uuid"] is None and srv.status == "SHUTOFF"
    assert baremetal.Addresses(realiser.env.home, GATEWAY, realiser.env.addresses).held() == {}  # no lab address was taken


def enroll_pxe_node(nodes) -> None:
    """bm-node again, booting from the network, available."""
    nodes.delete("bm-node")
    nodes.import_nodes(json.dumps({"nodes": [{
        "name": "bm-node", "pm_type": "fake", "pm_addr": "fake-bm", "pm_user": "admin", "pm_password": "s3cret",
        "boot_interface": "pxe", "ports": [{"address": "52:54:00:aa:bb:01"}], "cpu": 1, "memory": 2048,
        "disk": 10, "arch": "x86_64"}]}))
    for verb in ("manage", "provide"):
        nodes.act("bm-node", verb)
        wait_state(nodes, {"manageable", "available"})


@pytest.fixture
def pxe_world(world, monkeypatch):
    """`world` with its node booting from the network (`boot_interface: pxe`), and a lab
    network of its own: a bridge at GATEWAY in a namespace of this test, where the real
    dnsmasq answers."""
    need_root()
    need("dnsmasq")
    realiser, nodes, images = world
    ns = f"ucpxe{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for argv in (("link", "add", "br-test", "type", "bridge"), ("addr", "add", f"{GATEWAY}/24", "dev", "br-test"),
                     ("link", "set", "br-test", "up")):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        monkeypatch.setattr(baremetal, "lab_network", lambda _home: (f"/run/netns/{ns}", "br-test", GATEWAY))
        enroll_pxe_node(nodes)
        yield realiser, nodes, images
    finally:
        realiser.netboot.stop()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_pxe_node_is_deployed_by_network_boot_answered_only_while_armed(pxe_world):
    realiser, nodes, images = pxe_world
    mac = "52:54:00:aa:bb:01"
    netboot = realiser.netboot
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    machine = fake.machine_state("fake-bm")
    assert machine["power"] == "on" and machine["boot"] == "pxe" and machine["media"] is None
    assert not (realiser._dir(spec.id) / "deploy.iso").exists()
    # DHCP answers this MAC with its address, and no other.
    dhcp = netboot._dhcp()
    assert dhcp.running()
    assert dhcp.hosts_file.read_text() == f"{mac},192.0.2.100,bm-node\n"
    assert f"dhcp-boot=tag:ipxe,http://{GATEWAY}:8999/v1/deploy/boot/${{mac}}" in dhcp.config()
    # The iPXE script: kernel and initramfs under this boot's secret, the request's URL and
    # the node's address on the kernel command line.
    node_ip = "192.0.2.100"   # what DHCP gives the MAC: the boot routes answer that address only
    script = netboot.script(mac.upper(), node_ip)
    entry = netboot.armed(mac)
    base = f"http://{GATEWAY}:8999/v1/deploy/boot/{mac}/{entry['secret']}"
    assert script.startswith("#!ipxe\n")
    assert f"kernel {base}/vmlinuz initrd=initrd " in script and f"initrd --name initrd {base}/initrd" in script
    assert f"undercloud.request={base}/request undercloud.ip=192.0.2.100/24 BOOTIF={mac}" in script
    assert "console=ttyS0" in script
    assert netboot.script("52:54:00:aa:bb:99", node_ip) is None and netboot.script("${mac}", node_ip) is None
    assert netboot.script(mac, "192.0.2.101") is None
    assert netboot.file(mac, entry["secret"], "vmlinuz", node_ip).read_bytes() == b"kernel stand-in"
    assert netboot.file(mac, entry["secret"], "initrd", node_ip).read_bytes() == b"initramfs stand-in"
    for secret, name in (("wrong", "vmlinuz"), (entry["secret"], "../armed"), (entry["secret"], "hello")):
        assert netboot.file(mac, secret, name, node_ip) is None
    assert netboot.file(mac, entry["secret"], "vmlinuz", "192.0.2.101") is None
    assert netboot.request(mac, "wrong", node_ip) is None
    req = json.loads(netboot.request(mac, entry["secret"], node_ip))
    assert req["network"] == {"mac": mac, "address": "192.0.2.100", "prefix": 24}
    assert req["image"]["checksum"] == spec.image["checksum"]
    assert base64.b64decode(req["config_drive"])[32769:32774] == b"CD001"  # the config drive ISO
    # The ramdisk calls back: boot from disk, and the network boot is gone.
    realiser.callback(spec.id, req["token"], True, None)
    wait_state(nodes, {states.ACTIVE})
    assert machine["boot"] == "disk" and machine["power"] == "on"
    assert netboot.armed(mac) is None and netboot.script(mac, node_ip) is None
    assert not dhcp.running()
    realiser.delete(spec)
    n = wait_state(nodes, {states.AVAILABLE})
    assert n["instance_uuid"] is None and machine["power"] == "off"


def test_a_pxe_deploy_given_up_disarms_its_network_boot(pxe_world):
    realiser, nodes, images = pxe_world
    spec = spec_for(realiser, images, nodes)
    realiser.create(spec)
    wait_state(nodes, {states.DEPLOY_WAIT})
    assert realiser.netboot.armed("52:54:00:aa:bb:01") is not None
    realiser.delete(spec)   # abort, then undeploy
    wait_state(nodes, {states.AVAILABLE})
    assert realiser.netboot.armed("52:54:00:aa:bb:01") is None
    assert not realiser.netboot._dhcp().running()


def test_a_pxe_node_is_inspected_by_network_boot(pxe_world):
    realiser, nodes, images = pxe_world
    mac = "52:54:00:aa:bb:01"
    node_id = start_inspection(nodes)
    machine = fake.machine_state("fake-bm")
    assert machine["power"] == "on" and machine["boot"] == "pxe" and machine["media"] is None
    entry = realiser.netboot.armed(mac)
    req = json.loads(realiser.netboot.request(mac, entry["secret"], entry["address"]))
    assert req["mode"] == "inspect" and req["server_id"] == f"inspect-{node_id}" and "config_drive" not in req
    realiser.callback(req["server_id"], req["token"], True, None,
                      {"cpus": 4, "memory_mb": 2048, "local_gb": 7, "cpu_arch": "x86_64", "macs": [mac]})
    n = wait_state(nodes, {states.MANAGEABLE})
    assert n["properties"]["cpus"] == 4 and machine["power"] == "off"
    assert realiser.netboot.armed(mac) is None and not realiser.netboot._dhcp().running()


def test_a_boot_interface_the_driver_lacks_is_refused_at_import(world):
    realiser, nodes, images = world
    with pytest.raises(InvalidInput, match=r"boot_interface: 'pxe' is not one of pm_type openstack's \(virtual-media\)"):
        nodes.import_nodes(json.dumps({"nodes": [{"name": "n2", "pm_type": "openstack", "cloud": "c", "server": "s",
                                                  "boot_interface": "pxe"}]}))


def test_a_configured_provisioning_network_serves_the_deploy_instead_of_the_lab(world, monkeypatch):
    """undercloud.conf names an interface of this host (a bridge of its own, TEST-NET-2): the node
    is answered there, takes an address of its DHCP range, and the API listens on local_ip."""
    need_root()
    need("dnsmasq")
    realiser, nodes, images = world
    link = f"ucprov{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", link, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "198.51.100.1/24", "dev", link], check=True)
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
        (realiser.env.home.path / "undercloud.conf").write_text(
            f"[DEFAULT]\nlocal_interface = {link}\nlocal_ip = 198.51.100.1/24\n[ctlplane-subnet]\n"
            "cidr = 198.51.100.0/24\ndhcp_start = 198.51.100.10\ndhcp_end = 198.51.100.19\ngateway = 198.51.100.254\n")
        listened = []
        monkeypatch.setattr(baremetal, "lab_network", lambda _home: pytest.fail("the lab network was used"))
        env = dataclasses.replace(realiser.env, listen=listened.append)
        realiser = baremetal.BaremetalRealiser(env)   # reads undercloud.conf, takes over the nodes' hooks
        enroll_pxe_node(nodes)
        assert realiser.network_info() == {"network": f"provisioning-{link}", "subnet": "198.51.100.0/24",
                                           "gateway": "198.51.100.1", "virtual_ips": [f"198.51.100.{h}" for h in
                                                                                      range(250, 254)]}
        spec = spec_for(realiser, images, nodes)
        spec.first_boot.pop("url")
        realiser.create(spec)
        wait_state(nodes, {states.DEPLOY_WAIT})
        assert listened and set(listened) == {"198.51.100.1"}
        dhcp = realiser.netboot._dhcp()
        assert dhcp.running() and dhcp.netns is None and dhcp.interface == link
        assert dhcp.hosts_file.read_text() == "52:54:00:aa:bb:01,198.51.100.10,bm-node\n"
        assert "dhcp-option=option:router,198.51.100.254" in dhcp.config()
        entry = realiser.netboot.armed("52:54:00:aa:bb:01")
        req = json.loads(realiser.netboot.request("52:54:00:aa:bb:01", entry["secret"], "198.51.100.10"))
        assert req["network"] == {"mac": "52:54:00:aa:bb:01", "address": "198.51.100.10", "prefix": 24}
        assert req["url"] == "https://198.51.100.1:8999"
        assert "http://198.51.100.1:8999/v1/deploy/boot/" in realiser.netboot.script("52:54:00:aa:bb:01",
                                                                                     "198.51.100.10")
        realiser.callback(spec.id, req["token"], True, None)
        wait_state(nodes, {states.ACTIVE})
        assert not dhcp.running()
        realiser.delete(spec)
        wait_state(nodes, {states.AVAILABLE})
        assert realiser.env.addresses.on(f"provisioning-{link}") == {}
    finally:
        realiser.netboot.stop()
        subprocess.run(["ip", "link", "del", link], check=False)
