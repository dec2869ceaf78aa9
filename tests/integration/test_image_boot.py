"""The built boot images booted under TCG, qemu straight on the image: the qcow2 to its agent
under SeaBIOS (and OVMF), the deploy ramdisk's ISO to its agent. Not `serial`
(tests/integration/conftest.py): they only read the image cache, and run beside the other
files; the builds that change what the machine shares are test_image_build's.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import extended
from tests.integration.test_image_build import _needs, boot_until, build, firmware_args  # noqa: F401 (autouse)


@pytest.mark.parametrize("firmware", ["bios", pytest.param("uefi", marks=extended(
    "the UEFI bare-metal deploy (test_server_baremetal), which boots this disk under OVMF"))])
def test_qcow2_registered_for_vm_and_baremetal_and_boots_to_the_agent(uc_home, firmware):
    """One image for both firmwares: extlinux in the MBR's active partition 1 (root, last on
    the disk, so growroot grows it), GRUB at /EFI/BOOT/BOOTX64.EFI of the ESP, partition 2."""
    r, rows = build("overcloud-full", "--type", "qcow2")
    assert r.returncode == 0, r.stderr
    assert sorted(i["hypervisor_type"] for i in rows) == ["baremetal", "vm"]
    assert len({i["checksum"] for i in rows}) == 1 and rows[0]["disk_format"] == "qcow2"
    assert os.listdir(uc_home.path / "images" / "blobs") == [rows[0]["checksum"]]  # stored once
    disk = uc_home.path / "images" / "blobs" / rows[0]["checksum"]
    # a 3 GB copy-on-write disk over the stored image (never written), as a VM node gets
    node_disk = uc_home.path / "node.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(disk), "-F", "qcow2", str(node_disk), "3G"],
                   check=True)
    console = boot_until([*firmware_args(firmware, uc_home.path), "-drive", f"file={node_disk},format=qcow2,if=virtio"],
                         r"python3\[\d+\]: undercloud-agent \d", timeout=420)
    assert "Linux version" in console
    assert ("undercloud: UEFI boot of /boot/vmlinuz-" in console) == (firmware == "uefi")
    grown = re.search(r"undercloud-growroot: / is (\d+) MB", console)
    assert grown and int(grown.group(1)) > 2500, "the root file system did not grow to the disk"


@pytest.mark.parametrize("firmware", [
    "bios",  # the one boot of this ISO under SeaBIOS in CI (the bare-metal overcloud's is an extended case)
    pytest.param("uefi", marks=extended("the UEFI bare-metal deploy (test_server_baremetal), "
                                        "which boots this ISO under OVMF"))])
def test_deploy_ramdisk_iso_boots_to_the_agent(uc_home, firmware):
    """isolinux for BIOS, GRUB (the ISO's second El Torito image) for UEFI."""
    r, rows = build("deploy-ramdisk")
    assert r.returncode == 0, r.stderr
    iso = uc_home.path / "images" / "blobs" / next(i for i in rows if i["disk_format"] == "iso")["checksum"]
    console = boot_until([*firmware_args(firmware, uc_home.path), "-cdrom", str(iso), "-boot", "d"],
                         r"undercloud-agent: starting \(undercloud-agent \d", memory="1536", timeout=420)
    assert "undercloud deploy ramdisk" in console
    assert ("undercloud: UEFI boot of /vmlinuz" in console) == (firmware == "uefi")
