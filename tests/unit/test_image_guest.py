"""guest-tiny: the catalog entry and `guest` output type, how it is registered (never for the
undercloud's own servers), and the guest's DHCP event script (classless static routes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from undercloud.errors import UndercloudError
from undercloud.images import build, catalog, disk, elements
from undercloud.images.build import Artifact, Builder, Result

ELEMENT = elements.SHIPPED / "guest-tiny"
SCRIPT = ELEMENT / "static" / "usr" / "share" / "guest-tiny" / "initramfs" / "etc" / "udhcpc" / "default.script"


def test_guest_tiny_is_a_guest_target_without_agent_or_systemd_and_not_in_all():
    [t] = catalog.targets("guest-tiny")
    assert (t.name, t.type) == ("guest-tiny", "guest")
    els = Builder(t, lambda _m: None, Path("/tmp"), False).all_elements
    assert [e.name for e in els] == ["base", "kernel", "guest-tiny"]
    pkgs = elements.packages(els)
    assert set(pkgs) == {"busybox-static", "linux-image-cloud-amd64"}  # no systemd, no python for an agent
    assert "guest-tiny" not in {t.name for t in catalog.default_targets([])}  # a deploy does not need it
    # --type guest with extra elements: the guest defaults plus the operator's own
    [mine] = catalog.targets("my-guest", ("guest",), ("my-files",))
    assert mine.elements == ("base", "guest-tiny", "my-files")


def test_guest_output_registers_one_qcow2_without_hypervisor_type(tmp_path):
    [t] = catalog.targets("guest-tiny")
    art = Artifact("disk", tmp_path / "disk.qcow2", "a" * 64, 123, "qcow2")
    [reg] = Result(t, "k" * 64, artifacts=[art], properties={"build_key": "k" * 64}).registrations()
    assert reg["name"] == "guest-tiny" and reg["disk_format"] == "qcow2" and reg["sha256"] == "a" * 64
    assert reg["properties"]["usage"] == "guest"
    assert "hypervisor_type" not in reg["properties"]  # so no undercloud server is ever scheduled on it
    registered = [{"disk_format": "qcow2", "hypervisor_type": None}]
    assert build._covers(registered, t) and not build._covers([], t)


@pytest.mark.skipif(not all(shutil.which(x) for x in ("sfdisk", "mkfs.ext4", "extlinux", "qemu-img", "losetup")),
                    reason="disk tools (fdisk, e2fsprogs, extlinux, qemu-utils) not installed")
def test_guest_output_without_its_tree_names_the_element(tmp_path):
    with pytest.raises(UndercloudError, match=r"no /guest/boot/extlinux/extlinux.conf \(add the guest-tiny element\)"):
        disk.qcow2(tmp_path / "guest", tmp_path, lambda _t: None, min_mb=16, spare_mb=4,
                   tree="/guest/", element="guest-tiny")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


# ---- the guest's udhcpc event script, run by sh with a stand-in `ip` ----------------------
@pytest.fixture
def dhcp(tmp_path):
    bin_dir, root = tmp_path / "bin", tmp_path / "root"
    bin_dir.mkdir()
    (root / "etc").mkdir(parents=True)
    calls = tmp_path / "ip.calls"
    (bin_dir / "ip").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (bin_dir / "ip").chmod(0o755)

    def run(event: str, **lease: str) -> tuple[list[str], list[str]]:
        calls.write_text("")
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GUEST_TINY_ROOT": str(root), "interface": "eth0", **lease}
        r = subprocess.run(["sh", str(SCRIPT), event], env=env, capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return calls.read_text().splitlines(), r.stdout.splitlines()

    run.root = root
    return run


def test_dhcp_applies_classless_static_routes_and_ignores_the_router(dhcp):
    ip_calls, out = dhcp("bound", ip="192.168.77.15", mask="24", router="192.168.77.254", mtu="1450",
                         staticroutes="169.254.169.254/32 192.168.77.1 10.9.0.0/16 0.0.0.0",
                         dns="192.168.77.1", domain="example.test")
    assert ip_calls == [
        "link set eth0 mtu 1450",
        "-4 addr flush dev eth0",
        "addr add 192.168.77.15/24 dev eth0",
        "route replace 169.254.169.254/32 via 192.168.77.1 dev eth0",
        "route replace 10.9.0.0/16 dev eth0",  # gateway 0.0.0.0: on the link
    ]  # RFC 3442: with option 121 the router option is not used
    assert out == ["guest-tiny: address 192.168.77.15/24", "guest-tiny: route 169.254.169.254/32 via 192.168.77.1",
                   "guest-tiny: route 10.9.0.0/16 via 0.0.0.0"]
    assert (dhcp.root / "run" / "guest-tiny" / "address").read_text() == "192.168.77.15/24\n"
    assert (dhcp.root / "etc" / "resolv.conf").read_text() == "nameserver 192.168.77.1\nsearch example.test\n"
    # a renewal of the same lease keeps the address (no flush) and says nothing
    ip_calls, out = dhcp("renew", ip="192.168.77.15", mask="24", staticroutes="169.254.169.254/32 192.168.77.1")
    assert ip_calls == ["route replace 169.254.169.254/32 via 192.168.77.1 dev eth0"] and out == []


def test_dhcp_without_static_routes_uses_the_router_and_deconfig_forgets_the_address(dhcp):
    ip_calls, out = dhcp("bound", ip="10.0.0.5", mask="16", router="10.0.0.1 10.0.0.2")
    assert ip_calls == ["-4 addr flush dev eth0", "addr add 10.0.0.5/16 dev eth0",
                        "route replace default via 10.0.0.1 dev eth0"]
    assert out == ["guest-tiny: address 10.0.0.5/16", "guest-tiny: route default via 10.0.0.1"]
    ip_calls, _ = dhcp("deconfig")
    assert ip_calls == ["-4 addr flush dev eth0", "link set eth0 up"]
    assert not (dhcp.root / "run" / "guest-tiny" / "address").exists()
