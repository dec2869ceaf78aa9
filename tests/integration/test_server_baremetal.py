"""Bare-metal servers end to end in the virtual lab: one libvirt node (TCG) behind the
sushy-tools Redfish emulator, deployed the Ironic direct way without PXE (virtual media
ramdisk -> image download -> call-back -> eject, boot from disk, reboot), its agent
checking in, and nothing left after delete; and the failure paths (a BMC that stops
answering, a ramdisk that never calls back, a corrupted image download); inspection. The
IPMI node deployed by network boot is test_server_baremetal_pxe.py's (its own file, so that
the tier's two workers each take one of the emulated deploys).

Needs root, libvirt/qemu, sushy-tools (skips otherwise, naming what is missing). A deploy
under TCG takes minutes on a shared 2-core machine: every wait is bounded, and the
fixture takes the lab down even when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import extended, lab_addresses, need_root, run_cli
from undercloud.images.store import sha256_file

DEPLOY_TIMEOUT = 1500  # stack create -> active (ramdisk boot, 280 MB download + write under TCG)
BOOT_TIMEOUT = 600     # active -> the deployed OS's agent checks in

SERVER = """\
heat_template_version: wallaby
resources:
  node:
    type: OS::Nova::Server
    properties: {name: bm0, image: overcloud-full, flavor: baremetal}
outputs:
  ip: {value: {get_attr: [node, first_address]}}
"""


def cli_json(*args: str, timeout: float = 120):
    r = run_cli(*args, "-f", "json", timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def node_state(name: str) -> dict:
    return cli_json("node", "show", name)


def wait_node(name: str, states: set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        n = node_state(name)
        if n["provision_state"] in states:
            return n
        assert time.monotonic() < deadline, f"node {name} not in {states} after {timeout:.0f} s: {n}"
        time.sleep(2)


@pytest.fixture
def lab(uc_home, tmp_path, request):
    """The images, a one-node Redfish lab, the node enrolled (root device hint) and available."""
    need_root()
    from undercloud.lab.lab import Lab, available

    why = available()
    if why:
        pytest.skip(f"the virtual lab cannot run here: {why}")
    params = dict(getattr(request, "param", {}))
    bmc_type = params.pop("bmc", "redfish")
    boot_mode = params.pop("boot_mode", "bios")
    for var, value in params.items():
        os.environ[var] = value  # read by the service this test starts
    try:
        for args in (("overcloud-full", "--type", "qcow2"), ("deploy-ramdisk",)):
            r = run_cli("image", "build", *args, timeout=1800)
            assert r.returncode == 0, r.stderr[-2000:]
        r = run_cli("lab", "up", "--nodes", "1", "--bmc", bmc_type, "--memory", "2048", "--disk", "8",
                    "--boot-mode", boot_mode, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        lab = Lab(uc_home)
        env = json.loads(lab.instackenv.read_text())
        env["nodes"][0]["root_device"] = {"size": ">= 5"}  # the lab disk is 8 GB: the hint must pick it
        path = tmp_path / "instackenv.json"
        path.write_text(json.dumps(env))
        r = run_cli("node", "import", str(path), "--provide", timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        node = env["nodes"][0]["name"]
        assert node_state(node)["provision_state"] == "available"
        yield {"home": uc_home, "lab": lab, "node": node, "tmp": tmp_path, "boot_mode": boot_mode}
    finally:
        for var in params:
            os.environ.pop(var, None)
        bmc = (Lab(uc_home).state().get("bmc") or {}).get("pid")
        if bmc:
            try:
                os.kill(bmc, signal.SIGCONT)  # a test may have frozen it
            except ProcessLookupError:
                pass
        run_cli("service", "stop")
        Lab(uc_home).down()


def stack_create(lab, name: str, timeout: float = DEPLOY_TIMEOUT):
    tpl = lab["tmp"] / "bm.yaml"
    tpl.write_text(SERVER)
    return run_cli("stack", "create", name, "-t", str(tpl), "--wait", timeout=timeout)


def server(ref: str = "bm0") -> dict:
    return cli_json("server", "show", ref)


def redfish(lab):
    """A driver for the lab node's BMC (what the undercloud itself uses)."""
    from undercloud.provisioning import drivers
    from undercloud.provisioning.instackenv import parse

    spec = parse(lab["lab"].instackenv.read_text(), "instackenv.json")[0]
    return drivers.get(spec.driver, spec.driver_info)


def leftovers(lab, server_id: str) -> dict:
    from undercloud.lab.lab import virsh

    home = Path(lab["home"].path)
    pool, _ = lab["lab"].media_pool()
    addresses = lab_addresses(lab["home"])
    return {
        "deploy files": (home / "baremetal" / server_id).exists(),
        "addresses": addresses,
        "media copies": virsh("vol-list", pool, check=False).stdout.count(".img"),
        "media inserted": redfish(lab).media.url(),
    }


def assert_firmware(lab) -> None:
    """The node's VM runs the firmware its lab was made with: OVMF can boot nothing but EFI
    binaries (the ISO's or the disk's GRUB), SeaBIOS nothing but BIOS boot code."""
    from undercloud.lab.lab import OVMF_CODE, virsh

    loader = ET.fromstring(virsh("dumpxml", lab["node"]).stdout).find("os/loader")
    if lab["boot_mode"] == "uefi":
        assert loader is not None and loader.text == str(OVMF_CODE)
    else:
        assert loader is None or loader.get("type") != "pflash"


@pytest.mark.parametrize("lab", [
    pytest.param({}, id="bios", marks=extended(
        "the UEFI case below (Redfish virtual media, the same deploy), the IPMI BIOS deploy (the disk's "
        "extlinux) and test_image_boot (the deploy ISO's isolinux under SeaBIOS)")),
    pytest.param({"boot_mode": "uefi"}, id="uefi")], indirect=True)
def test_baremetal_deploy_end_to_end_check_in_and_delete_leaves_nothing(lab):
    """By Redfish virtual media (the deploy ISO: isolinux under BIOS, GRUB under UEFI), then
    the deployed disk (extlinux, or GRUB from its EFI system partition)."""
    t0 = time.monotonic()
    r = stack_create(lab, "bm")
    assert r.returncode == 0, r.stderr[-3000:] + "\n" + json.dumps(node_state(lab["node"]))
    deployed = time.monotonic() - t0
    srv = server()
    assert srv["status"] == "ACTIVE" and srv["hypervisor_type"] == "baremetal"
    node = node_state(lab["node"])
    assert node["provision_state"] == "active" and node["instance_uuid"] == srv["id"]
    assert srv["instance_name"] == lab["node"]
    # The undercloud ejected the media and set boot to disk before rebooting.
    bmc = redfish(lab)
    assert bmc.media.url() is None
    assert bmc.management.boot_device() == ("disk", True)
    events = [e["message"] for e in cli_json("node", "events", lab["node"])]
    assert any("deploying -> wait call-back" in e for e in events)
    assert any("wait call-back -> active" in e for e in events)
    # The deployed OS boots from the disk the ramdisk wrote, reads the config drive there,
    # and its agent checks in over the lab network.
    deadline = time.monotonic() + BOOT_TIMEOUT
    while not (srv := server())["agent_checked_in"]:
        assert time.monotonic() < deadline, f"the deployed node's agent did not check in: {srv}"
        time.sleep(3)
    assert_firmware(lab)
    # sushy-tools reports UEFI for an OVMF domain, no mode at all for a SeaBIOS one
    assert redfish(lab).management.boot_mode() == ("uefi" if lab["boot_mode"] == "uefi" else None)
    print(f"bare metal ({lab['boot_mode']}): stack create -> active {deployed:.0f} s, "
          f"-> agent check-in {time.monotonic() - t0:.0f} s")
    ip = srv["addresses"]["ctlplane"][0]
    out = cli_json("stack", "output", "show", "bm", "--all")
    assert {o["output_key"]: o["output_value"] for o in out}["ip"] == ip

    r = run_cli("stack", "delete", "bm", "--wait", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    node = wait_node(lab["node"], {"available"}, 300)
    assert node["instance_uuid"] is None and node["power_state"] == "off"
    assert cli_json("server", "list") == []
    assert leftovers(lab, srv["id"]) == {"deploy files": False, "addresses": {}, "media copies": 0,
                                         "media inserted": None}


@pytest.mark.parametrize("lab", [{"UNDERCLOUD_DEPLOY_CALLBACK_TIMEOUT": "15"}], indirect=True)
def test_a_ramdisk_that_never_calls_back_fails_the_deploy_and_undeploy_recovers(lab):
    # 15 s is far less than a TCG ramdisk needs to boot: the call-back cannot come in time.
    r = stack_create(lab, "late", timeout=600)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    node = node_state(lab["node"])
    assert node["provision_state"] == "deploy failed"
    assert node["last_error"] == (f"timed out after 15 s in 'wait call-back': the deploy ramdisk on node "
                                  f"{lab['node']} never called back")
    assert "never called back" in server()["fault"]
    srv_id = server()["id"]
    # The operator's recovery: undeploy the node; the server delete then finds it released.
    r = run_cli("node", "undeploy", lab["node"], "--wait", timeout=600)
    assert r.returncode == 0, r.stderr
    node = wait_node(lab["node"], {"available"}, 300)
    assert node["instance_uuid"] is None and node["power_state"] == "off"
    r = run_cli("stack", "delete", "late", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert cli_json("server", "list") == []
    assert leftovers(lab, srv_id) == {"deploy files": False, "addresses": {}, "media copies": 0,
                                      "media inserted": None}


def test_a_bmc_that_stops_answering_mid_deploy_fails_it_with_the_reason(lab):
    pid = lab["lab"].state()["bmc"]["pid"]
    os.kill(pid, signal.SIGSTOP)  # the BMC hangs: connections open, nothing answers
    try:
        r = stack_create(lab, "hung", timeout=600)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    node = node_state(lab["node"])
    assert node["provision_state"] == "deploy failed"
    assert node["last_error"].startswith("cannot reach redfish BMC http://127.0.0.1:")
    assert node["driver_info"]["password"] == "******" and "password" not in node["last_error"]
    r = run_cli("stack", "delete", "hung", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert wait_node(lab["node"], {"available"}, 300)["instance_uuid"] is None


def test_a_corrupted_image_on_disk_is_refused_before_the_node_boots(lab):
    """A blob flipped on disk is caught by the undercloud's own check before anything is
    served (images/store.check_blob): the deploy fails in one line, the node is never
    touched, the content is removed and comes back from the cache. The ramdisk's own check of
    what it downloads (both checksums) is test_server_baremetal_ramdisk's."""
    images = cli_json("image", "list")
    disk = next(i for i in images if i["name"] == "overcloud-full" and i["hypervisor_type"] == "baremetal")
    blob = Path(lab["home"].path) / "images" / "blobs" / disk["checksum"]
    with open(blob, "r+b") as f:  # one flipped byte, same size: only the checksum can tell
        f.seek(1 << 20)
        b = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([b[0] ^ 0xFF]))
    r = stack_create(lab, "bad")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "overcloud-full" in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]
    assert node_state(lab["node"])["provision_state"] == "available"  # never booted
    assert not blob.exists()  # removed, never handed to the node
    r = run_cli("stack", "delete", "bad", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert wait_node(lab["node"], {"available"}, 300)["instance_uuid"] is None  # its claim given back
    r = run_cli("image", "build", "overcloud-full", "--type", "qcow2", timeout=900)  # from the cache
    assert r.returncode == 0, r.stderr[-2000:]
    assert blob.exists() and sha256_file(blob) == disk["checksum"]


def test_node_inspect_boots_the_ramdisk_and_reports_the_inventory(lab):
    name = lab["node"]
    r = run_cli("node", "manage", name, "--wait", timeout=300)  # available -> manageable
    assert r.returncode == 0, r.stderr
    r = run_cli("node", "inspect", name, "--wait", timeout=900)
    assert r.returncode == 0, r.stderr[-2000:] + json.dumps(node_state(name))
    node = node_state(name)
    props = node["properties"]
    # What the ramdisk saw: 1 vCPU, 2 GB, the 8 GiB disk (less 1, as Ironic counts), the NIC.
    assert (props["cpus"], props["memory_mb"], props["local_gb"], props["cpu_arch"]) == (1, 2048, 7, "x86_64")
    assert node["ports"] == [p["address"] for p in json.loads(lab["lab"].instackenv.read_text())["nodes"][0]["ports"]]
    events = [e["message"] for e in cli_json("node", "events", name)]
    assert any("inspecting -> inspect wait" in e for e in events)
    assert any("inspect wait -> manageable" in e for e in events)
    assert node["power_state"] == "off" and redfish(lab).media.url() is None
    assert leftovers(lab, f"inspect-{node['uuid']}") == {"deploy files": False, "addresses": {},
                                                          "media copies": 0, "media inserted": None}
