"""The virtual lab end to end through the real CLI: lab up, node import, manage, power, lab down."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.test_bmc import boot_order
from undercloud.config import Home
from undercloud.lab import lab as labmod

pytestmark = pytest.mark.integration


def domstate(name: str) -> str:
    return labmod.virsh("domstate", name).stdout.strip()


@pytest.fixture
def lab_home(uc_home):
    """A home whose lab is always taken down, even when the test fails."""
    reason = labmod.available()
    if reason:
        pytest.skip(reason)
    yield uc_home
    labmod.Lab(uc_home).down()


def lab_up(*args: str):
    r = run_cli("lab", "up", *args, "-f", "json", timeout=180)
    if r.returncode != 0 and "libvirtd" in r.stderr:
        pytest.skip(f"libvirt cannot start here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bmc", ["redfish", "ipmi"])
def test_lab_up_import_manage_power_down(lab_home: Home, bmc: str):
    status = lab_up("--nodes", "2", "--bmc", bmc, "--memory", "256", "--disk", "1")
    instance = lab_home.instance
    assert status["status"] == "up" and status["netns"] == f"{instance}-lab"
    env_path = status["instackenv"]
    assert oct(os.stat(env_path).st_mode & 0o777) == "0o600"  # it holds the BMC password
    names = [n["name"] for n in json.loads(Path(env_path).read_text())["nodes"]]
    assert names == [f"{instance}-node-0", f"{instance}-node-1"]

    r = run_cli("node", "import", env_path, "-f", "json")
    assert r.returncode == 0, r.stderr
    r = run_cli("node", "manage", *names, "--wait", "-f", "json", timeout=300)
    assert r.returncode == 0, r.stderr
    assert {n["provision_state"] for n in json.loads(r.stdout)} == {"manageable"}

    # A wrong password is caught by manage and leaves the node in enroll. (Checked before the
    # boot-device changes: after those, pyghmi's lab BMC leaves a new login from the same client
    # unanswered, where a real BMC refuses the password.)
    data = json.loads(Path(env_path).read_text())
    wrong = dict(data["nodes"][1], pm_password="wrong-password")
    assert run_cli("node", "delete", names[1]).returncode == 0
    bad = lab_home.path / "bad.json"
    bad.write_text(json.dumps({"nodes": [wrong]}))
    assert run_cli("node", "import", str(bad)).returncode == 0
    r = run_cli("node", "manage", names[1], "--wait", timeout=120)
    assert r.returncode == 1 and "refused the credentials of user 'admin'" in r.stderr
    shown = run_cli("node", "show", names[1], "-f", "json").stdout
    assert json.loads(shown)["provision_state"] == "enroll"
    assert "wrong-password" not in shown + r.stderr

    r = run_cli("node", "power", "on", names[0], "-f", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["power_state"] == "on"
    assert domstate(names[0]) == "running" and domstate(names[1]) == "shut off"
    r = run_cli("node", "power", "off", names[0], "-f", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["power_state"] == "off" and domstate(names[0]) == "shut off"

    for device, first in (("disk", "hd"), ("pxe", "network")):  # the lab's VMs start PXE first
        r = run_cli("node", "boot-device", "set", names[0], device, "--persistent", timeout=120)
        assert r.returncode == 0, r.stderr
        assert boot_order(names[0])[0] == first

    if bmc == "redfish":  # inspection reads the Redfish System inventory
        r = run_cli("node", "inspect", names[0], "--wait", "-f", "json", timeout=180)
        assert r.returncode == 0, r.stderr
        props = json.loads(r.stdout)[0]["properties"]
        assert props["cpus"] == 1 and props["cpu_arch"] == "x86_64"


    r = run_cli("lab", "status", "-f", "json")
    assert json.loads(r.stdout)["status"] == "up"
    r = run_cli("lab", "down", timeout=180)
    assert r.returncode == 0, r.stderr
    listed = labmod.virsh("list", "--all", "--name").stdout.split()
    assert not [n for n in listed if n.startswith(instance)]
    assert not Path(f"/run/netns/{instance}-lab").exists()
    assert not list(labmod.IMAGES.glob(f"{instance}-*"))
    assert json.loads(run_cli("lab", "status", "-f", "json").stdout)["status"] == "down"


def test_lab_refuses_a_second_up_and_bad_options(lab_home: Home):
    r = run_cli("lab", "up", "--nodes", "0")
    assert r.returncode == 1 and "--nodes must be between 1 and 64" in r.stderr and "Traceback" not in r.stderr
    lab_up("--nodes", "1", "--memory", "256", "--disk", "1")
    r = run_cli("lab", "up", "--nodes", "1")
    assert r.returncode == 1 and "already up" in r.stderr


@pytest.mark.timeout(600)
def test_a_uefi_lab_boots_ovmf_reports_it_and_down_removes_its_variable_store(lab_home: Home):
    r = run_cli("lab", "up", "--nodes", "1", "--boot-mode", "efi")
    assert r.returncode == 2 and "'efi' is not one of 'bios', 'uefi'" in r.stderr and "Traceback" not in r.stderr
    status = lab_up("--nodes", "1", "--boot-mode", "uefi", "--memory", "256", "--disk", "1")
    assert status["boot_mode"] == "uefi"
    node = json.loads(Path(status["instackenv"]).read_text())["nodes"][0]
    assert node["capabilities"] == "boot_mode:uefi"  # Ironic's capability, for the scheduler and the deploy
    name = node["name"]
    loader = ET.fromstring(labmod.virsh("dumpxml", "--inactive", name).stdout).find("os/loader")
    assert loader is not None and loader.get("type") == "pflash" and loader.text == str(labmod.OVMF_CODE)
    from undercloud.provisioning import drivers
    from undercloud.provisioning.instackenv import parse

    spec = parse(Path(status["instackenv"]).read_text(), "instackenv.json")[0]
    assert spec.properties["capabilities"] == {"boot_mode": "uefi"}
    bmc = drivers.get(spec.driver, spec.driver_info)
    assert bmc.management.boot_mode() == "uefi"  # what the Redfish emulator reports for an OVMF domain
    bmc.power.set("on")
    assert domstate(name) == "running"
    nvram = labmod.NVRAM / f"{name}_VARS.fd"
    assert nvram.stat().st_size == labmod.OVMF_VARS.stat().st_size  # libvirt's copy of the template
    r = run_cli("lab", "down", timeout=180)
    assert r.returncode == 0, r.stderr
    assert not nvram.exists()
