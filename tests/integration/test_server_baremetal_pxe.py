"""A bare-metal node deployed by network boot in the virtual lab: IPMI has no virtual media,
so the node boots the deploy ramdisk by PXE from the undercloud's dnsmasq, and the boot
request is served once, to the address DHCP gave the node. Apart from the virtual-media
deploys in test_server_baremetal.py (whose one-node lab fixture it uses) so that the two
emulated deploys run on both of the integration tier's workers.

Needs root, libvirt/qemu and the lab's BMC emulators (skips otherwise, naming what is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import extended, lab_addresses, run_cli
from tests.integration.test_server_baremetal import (
    BOOT_TIMEOUT,
    DEPLOY_TIMEOUT,
    SERVER,
    assert_firmware,
    cli_json,
    lab,  # noqa: F401 (the one-node lab fixture)
    node_state,
    redfish,
    server,
    wait_node,
)


@pytest.mark.parametrize("lab", [
    pytest.param({"bmc": "ipmi"}, id="bios"),
    pytest.param({"bmc": "ipmi", "boot_mode": "uefi"}, id="uefi", marks=extended(
        "the BIOS network boot above and the UEFI virtual-media deploy of test_server_baremetal.py (the same iPXE script; OVMF "
        "booting the same disk)"))], indirect=True)
def test_an_ipmi_node_is_deployed_by_network_boot_and_delete_leaves_nothing(lab):  # noqa: F811
    """IPMI has no virtual media: the node boots the ramdisk by PXE (QEMU's iPXE — under OVMF
    the EFI build in the NIC's option ROM —, DHCP from the undercloud's dnsmasq on the lab
    bridge, kernel and initramfs over HTTP). Once the ramdisk has its request (deploy and
    agent tokens), another machine on the lab network asking for it again is refused."""
    t0 = time.monotonic()
    mac = node_state(lab["node"])["ports"][0]
    armed = Path(lab["home"].path) / "netboot" / "armed" / f"{mac.replace(':', '-')}.json"
    tpl = lab["tmp"] / "bm.yaml"
    tpl.write_text(SERVER)
    log = lab["tmp"] / "create.log"   # a file, not a pipe: nothing blocks the CLI while the test looks
    with open(log, "w") as out:
        create = subprocess.Popen([sys.executable, "-m", "undercloud", "stack", "create", "bm", "-t", str(tpl),
                                   "--wait"], stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        entry = wait_handed_out(armed, create, log)
        assert entry["handed_out"]["to"] == entry["address"]   # the node took it, from its DHCP address
        assert "request" not in entry   # and its tokens are off the disk
        # the second fetch, while the ramdisk writes the image (seconds to minutes)
        status, body = from_the_lab(lab, f"/v1/deploy/boot/{mac}/{entry['secret']}/request")
        assert status == 403 and "served only to the address DHCP gives it" in body, body
        status, body = from_the_lab(lab, f"/v1/deploy/boot/{mac}")
        assert status == 404, body   # nor the script
        # the lab listener serves the machines' routes only: an admin route is 404 there, token or not
        token = lab["home"].admin_token()
        status, body = from_the_lab(lab, "/v1/nodes", {})
        assert status == 404 and '"listener"' in body, body
        status, body = from_the_lab(lab, "/v1/nodes", {"X-Undercloud-Token": token})  # in the clear: refused first
        assert status == 426 and '"scheme"' in body and token not in body, body
        create.wait(timeout=DEPLOY_TIMEOUT)
    finally:
        if create.poll() is None:
            create.kill()
            create.wait()
    assert create.returncode == 0, log.read_text()[-3000:] + "\n" + json.dumps(node_state(lab["node"]))
    deployed = time.monotonic() - t0
    srv = server()
    node = node_state(lab["node"])
    assert srv["status"] == "ACTIVE" and node["provision_state"] == "active"
    assert redfish(lab).management.boot_device()[0] == "disk"  # the lab's IPMI BMC, through the same driver
    events = [e["message"] for e in cli_json("node", "events", lab["node"])]
    assert any("wait call-back -> active" in e for e in events)
    dhcp_log = (Path(lab["home"].path) / "netboot" / "dhcp" / "dnsmasq.log").read_text()
    mac = node["ports"][0]
    assert "DHCPACK(br-" in dhcp_log and mac in dhcp_log  # the node was answered by our DHCP
    deadline = time.monotonic() + BOOT_TIMEOUT
    while not (srv := server())["agent_checked_in"]:
        assert time.monotonic() < deadline, f"the deployed node's agent did not check in: {srv}"
        time.sleep(3)
    assert_firmware(lab)
    print(f"bare metal by PXE ({lab['boot_mode']}): stack create -> active {deployed:.0f} s, "
          f"-> agent check-in {time.monotonic() - t0:.0f} s")
    r = run_cli("stack", "delete", "bm", "--wait", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    node = wait_node(lab["node"], {"available"}, 300)
    assert node["instance_uuid"] is None and node["power_state"] == "off"
    netboot = Path(lab["home"].path) / "netboot"
    assert not list((netboot / "armed").glob("*.json")) and not (netboot / "dhcp" / "dnsmasq.pid").exists()
    assert not (Path(lab["home"].path) / "baremetal" / srv["id"]).exists()
    assert lab_addresses(lab["home"]) == {}


def wait_handed_out(armed: Path, create: subprocess.Popen, log: Path) -> dict:
    """The node's armed entry once its ramdisk has taken the boot request (the request is
    dropped then; the call-back, after the image is written, disarms it)."""
    deadline = time.monotonic() + DEPLOY_TIMEOUT
    while True:
        try:
            entry = json.loads(armed.read_text())
        except (OSError, ValueError):
            entry = {}
        if entry.get("handed_out"):
            return entry
        if create.poll() is not None:
            pytest.fail(f"stack create ended ({create.returncode}) before the ramdisk was seen taking its request: "
                        + log.read_text()[-2000:])
        assert time.monotonic() < deadline, "the ramdisk did not take its boot request"
        time.sleep(0.2)


def from_the_lab(lab, path: str, headers: dict | None = None) -> tuple[int, str]:  # noqa: F811
    """GET `path` on the API's lab address from inside the lab network, from an address
    there that is not the node's (the undercloud's own on the bridge)."""
    from undercloud.provisioning.servers.vm_net import lab_network

    netns, _bridge, gateway = lab_network(lab["home"])
    code = ("import json, sys, urllib.request, urllib.error\n"
            "try:\n"
            "    req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.stdin.read()))\n"
            "    r = urllib.request.urlopen(req, timeout=20)\n"
            "    print(r.status); print(r.read(300).decode(errors='replace'))\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code); print(e.read(300).decode(errors='replace'))\n")
    out = subprocess.run(["nsenter", f"--net={netns}", sys.executable, "-c", code,
                          f"http://{gateway}:{lab['home'].api_port()}{path}"], input=json.dumps(headers or {}),
                         capture_output=True, text=True, timeout=60)  # the token on stdin, not in argv
    status, _, body = out.stdout.partition("\n")
    assert status.strip().isdigit(), out.stderr[-1000:]
    return int(status), body
