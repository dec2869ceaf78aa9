"""The redfish and ipmi drivers against real virtual BMCs in front of libvirt VMs.

sushy-tools' Redfish emulator and a pyghmi (virtualbmc) IPMI BMC, each in front of a TCG
domain made by the virtual lab; the domain's libvirt state is the witness.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import xml.etree.ElementTree as ET

import pytest

from undercloud.config import Home
from undercloud.lab import lab as labmod
from undercloud.provisioning import drivers, instackenv
from undercloud.provisioning.drivers import DriverError

pytestmark = pytest.mark.integration


def make_lab(tmp_path_factory, bmc: str, memory_mb: int = 256):
    reason = labmod.available()
    if reason:
        pytest.skip(reason)
    lab = labmod.Lab(Home(tmp_path_factory.mktemp(f"bmc-{bmc}") / "uc"))
    try:
        lab.up(1, bmc, memory_mb=memory_mb, disk_gb=1)
    except labmod.LabError as exc:
        lab.down()
        if "libvirtd" in str(exc):
            pytest.skip(f"libvirt cannot start here: {exc}")
        raise
    return lab


def driver_of(lab, password: str | None = None):
    text = lab.instackenv.read_text()
    if password is not None:
        data = json.loads(text)
        data["nodes"][0]["pm_password"] = password
        text = json.dumps(data)
    spec = instackenv.parse(text, str(lab.instackenv))[0]
    return drivers.get(spec.driver, spec.driver_info), spec


def domstate(name: str) -> str:
    return labmod.virsh("domstate", name).stdout.strip()


def boot_order(name: str) -> list[str]:
    """The domain's boot order as libvirt has it: <os><boot dev=..> or per-device <boot order=..>."""
    tree = ET.fromstring(labmod.virsh("dumpxml", "--inactive", name).stdout)
    devs = [b.get("dev") for b in tree.findall("os/boot")]
    if devs:
        return devs
    ordered = []
    for dev in tree.find("devices"):
        boot = dev.find("boot")
        if boot is not None:
            kind = "network" if dev.tag == "interface" else {"cdrom": "cdrom"}.get(dev.get("device"), "hd")
            ordered.append((int(boot.get("order")), kind))
    return [k for _, k in sorted(ordered)]


@pytest.fixture(scope="module")
def redfish_lab(tmp_path_factory):
    # sushy-tools reports memory in whole GiB (none below 1 GiB): 1 GiB to see it inspected.
    # The VM is never booted into an OS here, so qemu touches little of it.
    lab = make_lab(tmp_path_factory, "redfish", memory_mb=1024)
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def ipmi_lab(tmp_path_factory):
    lab = make_lab(tmp_path_factory, "ipmi")
    yield lab
    lab.down()


@pytest.fixture
def image_server(tmp_path):
    """A tiny 'ISO' served over HTTP on loopback, for virtual media."""
    (tmp_path / "boot.iso").write_bytes(b"\0" * 64 * 1024)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/boot.iso"
    server.shutdown()


def test_redfish_power_on_off(redfish_lab):
    driver, spec = driver_of(redfish_lab)
    name = spec.name
    driver.validate()
    assert driver.power.get() == "off" and domstate(name) == "shut off"
    driver.power.set("on")
    assert domstate(name) == "running" and driver.power.get() == "on"
    driver.power.set("off")
    assert domstate(name) == "shut off" and driver.power.get() == "off"


def test_redfish_boot_device(redfish_lab):
    driver, spec = driver_of(redfish_lab)
    # sushy-tools' libvirt driver writes the boot order into the domain and always reports
    # "Continuous", so only the device is checked for a one-time override
    driver.management.set_boot_device("pxe", persistent=False)
    assert driver.management.boot_device()[0] == "pxe" and boot_order(spec.name)[0] == "network"
    driver.management.set_boot_device("disk", persistent=True)
    assert driver.management.boot_device() == ("disk", True)
    assert boot_order(spec.name)[0] == "hd"


def test_redfish_virtual_media_insert_and_eject(redfish_lab, image_server):
    driver, spec = driver_of(redfish_lab)
    driver.media.insert(image_server)
    assert driver.media.url() == image_server
    xml = labmod.virsh("dumpxml", "--inactive", spec.name).stdout
    assert re.search(r"<disk type='file' device='cdrom'>.*?<source file='[^']+'", xml, re.S), xml
    driver.media.eject()
    assert driver.media.url() is None


def test_redfish_inventory(redfish_lab):
    driver, spec = driver_of(redfish_lab)
    inv = driver.management.inventory()
    assert inv["cpus"] == 1 and inv["memory_mb"] == 1024 and inv["cpu_arch"] == "x86_64"
    assert inv["macs"] == spec.macs


def test_redfish_wrong_password(redfish_lab):
    driver, _ = driver_of(redfish_lab, password="not-the-password")
    with pytest.raises(DriverError, match=r"refused the credentials of user 'admin' \(HTTP 401\)") as info:
        driver.validate()
    assert "not-the-password" not in str(info.value)


def test_ipmi_power_and_boot_device(ipmi_lab):
    driver, spec = driver_of(ipmi_lab)
    name = spec.name
    driver.validate()
    assert driver.power.get() == "off"
    driver.power.set("on")
    assert domstate(name) == "running" and driver.power.get() == "on"
    driver.management.set_boot_device("pxe", persistent=True)
    assert boot_order(name)[0] == "network"
    driver.management.set_boot_device("disk", persistent=True)
    assert boot_order(name)[0] == "hd"
    driver.power.set("reboot")
    assert domstate(name) == "running"
    assert driver.management.boot_device()[0] == "disk"  # the reboot booted the device set before it
    driver.power.set("off")
    assert domstate(name) == "shut off" and driver.power.get() == "off"


def test_ipmi_session_left_mid_login_by_pyghmi_is_replaced(ipmi_lab):
    """pyghmi, logging in again after an answer that came too late (a loaded host), leaves its
    session marked as logging in with no deadline; its next command then fails with a
    TypeError (seen in CI: a bare-metal deploy failed with an internal error). The driver
    logs in again instead."""
    from undercloud.provisioning.drivers import ipmi

    driver, _ = driver_of(ipmi_lab)
    assert driver.power.get() in ("on", "off")
    (key,) = [k for k in ipmi._sessions if k[0] == driver.info["address"] and k[1] == int(driver.info["port"])]
    stale = ipmi._sessions[key]
    session = stale.ipmi_session
    session.logging, session.logged, session.logoutexpiry = True, 0, None  # as pyghmi's _relog leaves it
    with pytest.raises(TypeError):
        stale.get_power()  # pyghmi itself, as the deploy met it
    session.logging, session.logged, session.logoutexpiry = True, 0, None
    assert driver.power.get() in ("on", "off")  # the driver: a new login, the same answer
    assert ipmi._sessions[key] is not stale


def test_ipmi_wrong_password(ipmi_lab):
    driver, _ = driver_of(ipmi_lab, password="wrong-ipmi-pw")
    with pytest.raises(DriverError, match="refused the credentials of user 'admin'") as info:
        driver.validate()
    assert "wrong-ipmi-pw" not in str(info.value)
