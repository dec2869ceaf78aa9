"""Network boot hands a node's credentials to that node only (issue 43): real HTTP against
the real app (uvicorn on loopback), the real bare-metal realiser, nodes service, store and
image store, a `fake` BMC.

The provisioning network is undercloud.conf's, on `lo` (127.0.0.0/8): the node's DHCP
address is then a loopback address a test can send from (`source_address`), and a
stranger is another one. dnsmasq itself is not started (its hosts file is still written and
checked: it is what DHCP would answer); tests/integration/test_server_baremetal_flow.py
and test_server_baremetal_pxe.py run it for real.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.unit.agent_support import LiveService
from undercloud.host.dnsmasq import DhcpServer
from undercloud.provisioning import states
from undercloud.provisioning.drivers import fake
from undercloud.provisioning.scheduler import Request
from undercloud.provisioning.servers import vm_net
from undercloud.provisioning.servers.base import ACTIVE, ERROR, Spec

MAC = "52:54:00:aa:bb:01"
NODE_IP = "127.0.0.100"        # what DHCP gives MAC (the first of undercloud.conf's range)
STRANGER = "127.0.0.101"       # any other machine on the provisioning network
AGENT_TOKEN = "agent-token-" + "q" * 30   # the server's agent token, inside the config drive


@pytest.fixture
def pxe(tmp_path, monkeypatch, caplog):
    if not shutil.which("xorriso"):
        pytest.skip("xorriso is not installed")
    caplog.set_level(logging.DEBUG)
    fake.reset()
    svc = LiveService(tmp_path / "uc")
    (svc.home.path / "undercloud.conf").write_text(
        "[DEFAULT]\nlocal_interface = lo\nlocal_ip = 127.0.0.1/8\n[ctlplane-subnet]\ncidr = 127.0.0.0/8\n"
        "dhcp_start = 127.0.0.100\ndhcp_end = 127.0.0.120\n")
    # DHCP: the hosts file dnsmasq would answer from, written and checked; no dnsmasq.
    monkeypatch.setattr(DhcpServer, "start", lambda self, hosts=(): self._write_hosts(hosts))
    monkeypatch.setattr(DhcpServer, "set_hosts", lambda self, hosts: self._write_hosts(hosts))
    svc.start()
    ctx = svc.ctx
    # a stand-in deploy ramdisk ISO (kernel, initramfs) and an image to deploy
    src = tmp_path / "iso"
    src.mkdir()
    (src / "vmlinuz").write_bytes(b"kernel stand-in")
    (src / "initrd").write_bytes(b"initramfs stand-in")
    iso = tmp_path / "ramdisk.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(iso), str(src)], check=True)
    regs = []
    for name, fmt, data in (("deploy-ramdisk", "iso", iso.read_bytes()), ("overcloud-full", "qcow2", b"q" * 5000)):
        sha = hashlib.sha256(data).hexdigest()
        ctx.images.put_blob([data], sha, len(data))
        regs.append({"name": name, "disk_format": fmt, "sha256": sha, "properties": {"hypervisor_type": "baremetal"}})
    ctx.images.register(regs)
    ctx.nodes.import_nodes(json.dumps({"nodes": [{
        "name": "bm-node", "pm_type": "fake", "pm_addr": "fake-bm", "pm_user": "admin", "pm_password": "s3cret",
        "boot_interface": "pxe", "ports": [{"address": MAC}], "cpu": 1, "memory": 2048, "disk": 10,
        "arch": "x86_64"}]}))
    for verb, want in (("manage", states.MANAGEABLE), ("provide", states.AVAILABLE)):
        ctx.nodes.act("bm-node", verb)
        wait_state(ctx, {want})
    realiser = ctx.servers.realiser("baremetal")
    sid = str(uuid.uuid4())
    img = ctx.images.list(name="overcloud-full")[0]
    spec = Spec(id=sid, name="bm0", hypervisor_type="baremetal", flavor={"name": "baremetal"}, image=img,
                image_path=ctx.images.blob_path(img["checksum"]),
                first_boot={"server_id": sid, "token": AGENT_TOKEN, "url": "http://127.0.0.1:9"},
                networks=[], node=ctx.scheduler.claim(Request(instance_uuid=sid)))
    realiser.create(spec)
    wait_state(ctx, {states.DEPLOY_WAIT})
    yield svc, realiser, spec
    svc.stop()
    ctx.nodes.close()


def wait_state(ctx, want: set[str], timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while (n := ctx.nodes.get("bm-node"))["provision_state"] not in want:
        assert time.monotonic() < deadline, f"node is {n['provision_state']}, not {want}: {n['last_error']}"
        time.sleep(0.02)
    return n


def get(port: int, path: str, source: str) -> tuple[int, bytes]:
    """GET `path` from the API on 127.0.0.1:`port`, sent from the address `source`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def one_line(body: bytes) -> str:
    doc = json.loads(body)
    assert set(doc) == {"error", "where"} and "\n" not in doc["error"] and len(doc["error"]) < 400, doc
    return doc["error"]


def secret_of(script: str) -> str:
    return re.search(rf"/v1/deploy/boot/{MAC}/([^/\s]+)/request", script).group(1)


def no_secret_logged(caplog, svc, *secrets: str) -> None:
    text = caplog.text + "".join(json.dumps(e) for e in svc.ctx.nodes.events("bm-node"))
    for s in secrets:
        assert s not in text


def test_the_boot_script_and_files_answer_only_the_address_dhcp_gives_the_mac(pxe, caplog):
    svc, realiser, spec = pxe
    hosts = (realiser.netboot.root / "dhcp" / "hosts").read_text()
    assert hosts == f"{MAC},{NODE_IP},bm-node\n"   # DHCP gives the MAC exactly this address
    status, body = get(svc.port, f"/v1/deploy/boot/{MAC}", STRANGER)
    assert status == 404 and "no network boot is armed" in one_line(body)  # a stranger learns nothing
    status, body = get(svc.port, f"/v1/deploy/boot/{MAC}", "127.0.0.1")   # nor the undercloud's own host
    assert status == 404
    status, body = get(svc.port, f"/v1/deploy/boot/{MAC}", NODE_IP)
    assert status == 200
    script = body.decode()
    secret = secret_of(script)
    assert f"undercloud.ip={NODE_IP}/8" in script and spec.id in script
    # the script holds no credential: neither token is in it
    entry = json.loads(realiser.netboot._armed_file(MAC).read_text())
    assert entry["request"]["token"] not in script and AGENT_TOKEN not in script
    for name, data in (("vmlinuz", b"kernel stand-in"), ("initrd", b"initramfs stand-in")):
        assert get(svc.port, f"/v1/deploy/boot/{MAC}/{secret}/{name}", NODE_IP) == (200, data)
        assert get(svc.port, f"/v1/deploy/boot/{MAC}/{secret}/{name}", STRANGER)[0] == 404
    assert "asked from 127.0.0.101, not from the address DHCP gives it (127.0.0.100): refused" in caplog.text
    no_secret_logged(caplog, svc, secret, entry["request"]["token"], AGENT_TOKEN)


def test_the_request_from_another_address_is_refused_and_the_node_still_gets_it_once(pxe, caplog):
    svc, realiser, spec = pxe
    secret = secret_of(get(svc.port, f"/v1/deploy/boot/{MAC}", NODE_IP)[1].decode())
    url = f"/v1/deploy/boot/{MAC}/{secret}/request"
    status, body = get(svc.port, url, STRANGER)
    assert status == 403
    assert one_line(body) == ("the boot request of node bm-node is served only to the address DHCP gives it, "
                              "not to 127.0.0.101")
    assert get(svc.port, f"/v1/deploy/boot/{MAC}/{'x' * len(secret)}/request", NODE_IP)[0] == 404  # wrong secret
    assert get(svc.port, f"/v1/deploy/boot/{MAC}/%C3%A9/request", NODE_IP)[0] == 404   # not ASCII: no 500
    # the node itself: the request, with the deploy token and the config drive (agent token inside)
    status, body = get(svc.port, url, NODE_IP)
    assert status == 200
    req = json.loads(body)
    assert req["server_id"] == spec.id and req["network"]["address"] == NODE_IP
    assert AGENT_TOKEN.encode() in base64.b64decode(req["config_drive"])
    # handed out: no longer on disk, and the record says to whom
    text = realiser.netboot._armed_file(MAC).read_text()
    assert req["token"] not in text and "config_drive" not in text
    assert json.loads(text)["handed_out"]["to"] == NODE_IP
    # the deploy goes on as before: the call-back with that token finishes it
    realiser.callback(spec.id, req["token"], True, None)
    wait_state(svc.ctx, {states.ACTIVE})
    assert realiser.status(spec).status == ACTIVE and realiser.netboot.armed(MAC) is None
    assert "boot request of node bm-node is served only to the address DHCP gives it" in caplog.text
    no_secret_logged(caplog, svc, secret, req["token"], AGENT_TOKEN)


def test_a_second_request_is_refused_and_fails_the_deploy_loudly(pxe, caplog):
    svc, realiser, spec = pxe
    secret = secret_of(get(svc.port, f"/v1/deploy/boot/{MAC}", NODE_IP)[1].decode())
    url = f"/v1/deploy/boot/{MAC}/{secret}/request"
    status, body = get(svc.port, url, NODE_IP)
    assert status == 200
    token = json.loads(body)["token"]
    status, body = get(svc.port, url, NODE_IP)   # a retry, or someone who took the node's address
    assert status == 410
    error = one_line(body)
    assert re.fullmatch(r"a second request for the boot credentials of node bm-node was refused \(handed out once, "
                        r"to 127\.0\.0\.100 at \d\d:\d\d:\d\d UTC\): its deploy is failed", error), error
    node = wait_state(svc.ctx, {states.DEPLOY_FAILED})
    assert node["last_error"] == error
    st = realiser.status(spec)
    assert st.status == ERROR and "a second request for the boot credentials" in st.reason
    machine = fake.machine_state("fake-bm")
    assert machine["power"] == "off"
    assert realiser.netboot.armed(MAC) is None and realiser.netboot._hosts() == []  # DHCP no longer answers it
    # whoever got the first copy cannot finish the deploy with it
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
    conn.request("POST", f"/v1/deploy/servers/{spec.id}/callback", body=json.dumps({"ok": True}),
                 headers={"Content-Type": "application/json", "X-Deploy-Token": token})
    r = conn.getresponse()
    assert r.status == 409 and "this deploy was failed: a second request" in one_line(r.read())
    assert [r.levelname for r in caplog.records if "second request" in r.getMessage()].count("ERROR") == 1
    no_secret_logged(caplog, svc, secret, token, AGENT_TOKEN)


def test_of_two_requests_at_once_exactly_one_gets_the_credentials(pxe):
    svc, realiser, spec = pxe
    secret = secret_of(get(svc.port, f"/v1/deploy/boot/{MAC}", NODE_IP)[1].decode())
    barrier, got = threading.Barrier(4), []

    def fetch():
        barrier.wait()
        got.append(get(svc.port, f"/v1/deploy/boot/{MAC}/{secret}/request", NODE_IP)[0])

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # one 200; the first refused fails the deploy, which disarms: those after it find nothing (404)
    assert len(got) == 4 and got.count(200) == 1 and 410 in got and set(got) <= {200, 410, 404}, got
    wait_state(svc.ctx, {states.DEPLOY_FAILED})


def test_through_the_lab_relay_the_node_is_known_by_its_own_address(pxe):
    """The lab's API is a relay (vm_net.serve_api) to the API on loopback: the check sees the
    machine that connected to the relay, not the relay."""
    svc, realiser, spec = pxe
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    threading.Thread(target=vm_net._accept, args=(sock, ("127.0.0.1", svc.port)), daemon=True).start()
    relay = sock.getsockname()[1]
    try:
        assert get(relay, f"/v1/deploy/boot/{MAC}", STRANGER)[0] == 404
        status, body = get(relay, f"/v1/deploy/boot/{MAC}", NODE_IP)
        assert status == 200
        url = f"/v1/deploy/boot/{MAC}/{secret_of(body.decode())}/request"
        assert get(relay, url, STRANGER)[0] == 403
        assert get(svc.port, url, "127.0.0.1")[0] == 403   # the relay's own address is nobody's
        assert get(relay, url, NODE_IP)[0] == 200
        assert get(relay, url, NODE_IP)[0] == 410
    finally:
        sock.close()
    deadline = time.monotonic() + 10   # each relayed connection forgotten once both ends closed
    while vm_net._peers and time.monotonic() < deadline:
        time.sleep(0.02)
    assert vm_net._peers == {}


def test_an_inspection_asked_for_twice_fails_naming_it(tmp_path, pxe):
    """The inspection's request (its call-back token) is handed out once too."""
    svc, realiser, spec = pxe
    ctx = svc.ctx
    realiser.delete(spec)   # abort the deploy, undeploy: available again
    wait_state(ctx, {states.AVAILABLE})
    ctx.nodes.act("bm-node", "manage")
    wait_state(ctx, {states.MANAGEABLE})
    ctx.nodes.act("bm-node", "inspect")
    wait_state(ctx, {states.INSPECT_WAIT})
    secret = secret_of(get(svc.port, f"/v1/deploy/boot/{MAC}", NODE_IP)[1].decode())
    url = f"/v1/deploy/boot/{MAC}/{secret}/request"
    status, body = get(svc.port, url, NODE_IP)
    assert status == 200 and json.loads(body)["mode"] == "inspect"
    status, body = get(svc.port, url, NODE_IP)
    assert status == 410 and one_line(body).endswith("its inspection is failed")
    node = wait_state(ctx, {states.INSPECT_FAILED})
    assert "a second request for the boot credentials of node bm-node was refused" in node["last_error"]
    assert realiser.netboot.armed(MAC) is None and not Path(realiser._dir(f"inspect-{node['uuid']}")).exists()
