"""`lab up` recognises an earlier run's leftovers (the same home path gives the same instance
name): a killed run's domains, disks, processes and a namespace libvirtd does not use are
named in one line with the command that removes them, and `lab down` removes them. Fakes
stand in for libvirtd; the namespace, bridge and processes of the last test are real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from undercloud.config import Home
from undercloud.errors import Conflict
from undercloud.lab import lab as labmod
from undercloud.lab.lab import Lab


@pytest.fixture
def lab(tmp_path, monkeypatch):
    images = tmp_path / "images"
    images.mkdir()
    monkeypatch.setattr(labmod, "IMAGES", images)
    monkeypatch.setattr(labmod, "available", lambda: None)
    monkeypatch.setattr(labmod, "libvirtd_pid", lambda: None)
    return Lab(Home(tmp_path / "home"))


def fake_libvirtd(monkeypatch, domains: list[str]) -> None:
    """A libvirtd in this process's namespace (the host's) that lists `domains`."""
    monkeypatch.setattr(labmod, "libvirtd_pid", lambda: os.getpid())

    def virsh(*args, **_kw):
        assert args[:3] == ("list", "--all", "--name"), args
        return SimpleNamespace(returncode=0, stdout="\n".join(domains) + "\n")
    monkeypatch.setattr(labmod, "virsh", virsh)


def test_a_clean_host_has_no_leftovers(lab):
    assert lab.leftovers() == []


def test_domains_and_disks_of_this_instance_are_named_and_up_writes_nothing(lab, monkeypatch):
    i = lab.instance
    fake_libvirtd(monkeypatch, [f"{i}-node-1", f"{i}-node-0", "uc999999-node-0", f"x{i}-node-0"])
    (labmod.IMAGES / f"{i}-node-0.qcow2").write_bytes(b"")
    (labmod.IMAGES / "uc999999-node-0.qcow2").write_bytes(b"")  # another home's: not ours
    assert lab.leftovers() == [f"domain {i}-node-0", f"domain {i}-node-1", f"disk {labmod.IMAGES}/{i}-node-0.qcow2"]
    with pytest.raises(Conflict) as e:
        lab.up(2)
    msg = str(e.value)
    assert "\n" not in msg and f"instance {i}" in msg and msg.endswith("remove them with `undercloud lab down`")
    assert f"domain {i}-node-0, domain {i}-node-1, disk " in msg and "uc999999" not in msg
    assert not lab.state_file.exists() and not lab.dir.exists()  # refused before anything was made


def test_many_leftovers_stay_one_line(lab, monkeypatch):
    fake_libvirtd(monkeypatch, [f"{lab.instance}-node-{n}" for n in range(20)])
    with pytest.raises(Conflict, match=r"and 14 more; remove them with `undercloud lab down`$"):
        lab.up(1)


def test_a_lab_that_is_up_is_not_its_own_leftover(lab, monkeypatch):
    lab.dir.mkdir(parents=True)
    lab.state_file.write_text('{"instance": "x"}')
    fake_libvirtd(monkeypatch, [f"{lab.instance}-node-0"])
    with pytest.raises(Conflict, match="already up"):
        lab.up(1)


def _spawn(argv0: str, *args: str) -> subprocess.Popen:
    """A process whose command line reads `argv0 args...` (Python sleeping underneath)."""
    return subprocess.Popen([argv0, "-c", "import time; time.sleep(120)", *args], executable=sys.executable,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2 (a real namespace)")
def test_a_real_stale_namespace_and_stray_processes_are_named_and_removed_by_down(lab, monkeypatch):
    ns, bridge = lab.netns, lab.bridge
    assert not Path(f"/run/netns/{ns}").exists(), f"{ns} exists before the test"
    procs = []
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", ns, "link", "add", bridge, "type", "bridge"], check=True)
        bmc = _spawn(sys.executable, "undercloud.lab.ipmi_bmc", f"{lab.dir}/ipmi-bmc.json")
        dhcp = _spawn("dnsmasq", f"--conf-file={lab.home.path}/netboot/dhcp/dnsmasq.conf")
        decoy = _spawn(sys.executable, f"{lab.dir}/ipmi-bmc.json")  # reads the file: not a BMC
        procs = [bmc, dhcp, decoy]
        deadline = time.monotonic() + 10  # until /proc shows their command lines
        while not all(Path(f"/proc/{p.pid}/cmdline").read_bytes() for p in procs):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # No libvirtd: the namespace is taken over as it is (libvirtd would start in it).
        assert lab.leftovers() == [f"lab BMC (pid {bmc.pid})", f"network boot dnsmasq (pid {dhcp.pid})"]
        # A libvirtd in another namespace: this one's bridge is one libvirt cannot see.
        fake_libvirtd(monkeypatch, [])
        found = lab.leftovers()
        assert found[0].startswith(f"network namespace {ns} (not libvirtd's")
        assert found[1:] == [f"lab BMC (pid {bmc.pid})", f"network boot dnsmasq (pid {dhcp.pid})"]
        monkeypatch.setattr(labmod, "libvirtd_pid", lambda: None)  # down calls no virsh here
        removed = lab.down()
        assert f"lab BMC (pid {bmc.pid})" in removed and f"network boot dnsmasq (pid {dhcp.pid})" in removed
        assert f"bridge {bridge}" in removed and f"network namespace {ns}" in removed
        assert bmc.wait(timeout=15) is not None and dhcp.wait(timeout=15) is not None
        assert decoy.poll() is None  # not ours to stop
        assert not Path(f"/run/netns/{ns}").exists() and lab.leftovers() == []
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
