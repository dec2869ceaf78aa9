"""guest-tiny, built for real and booted under TCG the way Nova boots an instance (a qcow2
overlay on a virtio disk, virtio NIC, BIOS, serial console to a file), on a bridge in a
network namespace of the test's own making: dnsmasq gives it an address and only a
classless static route (option 121, no router) to 169.254.169.254, where a plain HTTP
server in the namespace plays the metadata service. The console must show the address,
the instance id served and the user data's output. Everything is torn down after, also on
failure; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import need, need_root, run_cli

BUILD_TIMEOUT = 1500
BOOT_TIMEOUT = 240  # TCG on 2 shared cores; a boot takes ~10 s when the machine is quiet
MAC, ADDR, SERVER = "52:54:00:77:00:15", "192.168.77.15", "192.168.77.1"
METADATA = "169.254.169.254"
USER_DATA = f"#!/bin/sh\necho hello from user-data\nping -c 2 {SERVER}\nexit 3\n"


@pytest.fixture(autouse=True)
def _needs():
    need_root()
    for tool in ("debootstrap", "qemu-system-x86_64", "qemu-img", "dnsmasq", "ip", "nsenter"):
        need(tool)


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """guest-tiny built and registered in a home of its own, downloaded as users would."""
    from undercloud import daemon
    from undercloud.config import Home

    home = tmp_path_factory.mktemp("uc") / "home"
    env = {"UNDERCLOUD_HOME": str(home)}
    try:
        start = time.monotonic()
        r = run_cli("image", "build", "guest-tiny", "-f", "json", env=env, timeout=BUILD_TIMEOUT)
        assert r.returncode == 0, r.stderr
        built = time.monotonic() - start
        again = run_cli("image", "build", "guest-tiny", "-f", "json", env=env, timeout=BUILD_TIMEOUT)
        assert again.returncode == 0 and "up to date" in again.stderr, again.stderr
        listed = json.loads(run_cli("image", "list", "--name", "guest-tiny", "-f", "json", env=env).stdout)
        out = home.parent / "guest-tiny.qcow2"
        d = run_cli("image", "download", "guest-tiny", "-o", str(out), env=env, timeout=300)
        assert d.returncode == 0, d.stderr
        print(f"\nguest-tiny: build {built:.1f} s, qcow2 {out.stat().st_size / 2**20:.1f} MB")
        yield {"rows": json.loads(r.stdout), "listed": listed, "qcow2": out}
    finally:
        daemon.stop(Home(home))


def sh(*argv: str, ns: str | None = None) -> str:
    cmd = (["nsenter", f"--net=/run/netns/{ns}"] if ns else []) + list(argv)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr.strip()}"
    return r.stdout


@contextlib.contextmanager
def lab(work: Path, metadata: dict[str, str]):
    """A namespace with bridge br0 (SERVER/24) + tap0, dnsmasq, and an HTTP server on
    METADATA:80 serving `metadata` (path -> text). Yields (namespace, start-qemu function)."""
    ns = f"ucguest-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen] = []
    for path, text in metadata.items():
        (work / "md" / path).parent.mkdir(parents=True, exist_ok=True)
        (work / "md" / path).write_text(text)
    (work / "md").mkdir(exist_ok=True)

    def spawn(*argv: str, log: str) -> subprocess.Popen:
        with open(work / log, "wb") as f:
            p = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", *argv], stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        procs.append(p)
        return p

    sh("ip", "netns", "add", ns)
    try:
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"],
                    ["ip", "link", "add", "br0", "type", "bridge"],
                    ["ip", "addr", "add", f"{SERVER}/24", "dev", "br0"], ["ip", "link", "set", "br0", "up"],
                    ["ip", "tuntap", "add", "tap0", "mode", "tap"], ["ip", "link", "set", "tap0", "master", "br0"],
                    ["ip", "link", "set", "tap0", "up"]):
            sh(*cmd, ns=ns)
        # No router option (an empty option 3): the metadata route can only come from option 121.
        spawn("dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv", "--port=0",
              "--bind-interfaces", "--interface=br0", "--except-interface=lo", "--user=root",
              "--dhcp-range=192.168.77.10,192.168.77.20,255.255.255.0,1h", f"--dhcp-host={MAC},{ADDR}",
              "--dhcp-option=3", f"--dhcp-option=option:classless-static-route,{METADATA}/32,{SERVER}",
              f"--dhcp-leasefile={work / 'leases'}", "--log-dhcp", "--log-facility=-", log="dnsmasq.log")
        spawn("python3", "-m", "http.server", "80", "--bind", METADATA, "--directory", str(work / "md"),
              log="http.log")

        def boot(disk: Path) -> subprocess.Popen:
            return spawn("qemu-system-x86_64", "-accel", "tcg", "-m", "128", "-display", "none", "-monitor", "none",
                         "-no-reboot", "-serial", f"file:{work / 'console.log'}",
                         "-qmp", f"unix:{work / 'qmp.sock'},server=on,wait=off",
                         "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
                         "-device", f"virtio-net-pci,netdev=n0,mac={MAC}",
                         "-drive", f"file={disk},format=qcow2,if=virtio", log="qemu.log")
        yield ns, boot
    finally:
        for p in reversed(procs):
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def wait_console(work: Path, qemu: subprocess.Popen, pattern: str, deadline: float) -> re.Match:
    """Wait until the serial console shows `pattern`; fail with its tail on timeout or exit."""
    console = work / "console.log"
    while True:
        text = console.read_text(errors="replace") if console.exists() else ""
        m = re.search(pattern, text, re.M)
        if m:
            return m
        if qemu.poll() is not None or time.monotonic() > deadline:
            why = f"qemu exited ({qemu.returncode}): {(work / 'qemu.log').read_text()[-500:]}" \
                if qemu.poll() is not None else f"not within {BOOT_TIMEOUT} s"
            pytest.fail(f"no {pattern!r} on the console, {why}; console:\n{text[-3000:]}\n"
                        f"dnsmasq:\n{(work / 'dnsmasq.log').read_text()[-1500:]}\n"
                        f"http:\n{(work / 'http.log').read_text()[-1000:]}")
        time.sleep(0.2)


def qmp(work: Path, command: str) -> None:
    """One QEMU monitor command (what libvirt sends for Nova), e.g. system_powerdown."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(work / "qmp.sock"))
        f = s.makefile("rw")
        f.readline()  # the greeting
        for cmd in ("qmp_capabilities", command):
            f.write(json.dumps({"execute": cmd}) + "\n")
            f.flush()
            while "return" not in (reply := json.loads(f.readline())):  # events may come first
                assert "error" not in reply, reply


def instance_disk(guest: dict, work: Path) -> Path:
    """What Nova boots: a copy-on-write overlay of the image, grown to the flavor's disk."""
    disk = work / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(guest["qcow2"]), "-F", "qcow2",
                    str(disk), "1G"], check=True, timeout=60)
    return disk


def test_registered_as_a_guest_image(guest):
    [row] = guest["rows"]
    assert (row["name"], row["disk_format"], row["hypervisor_type"]) == ("guest-tiny", "qcow2", None)
    assert row["properties"]["usage"] == "guest"
    assert [i["id"] for i in guest["listed"]] == [row["id"]]
    assert guest["qcow2"].stat().st_size == row["size"] < 40 * 2**20
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(guest["qcow2"])],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2" and info["virtual-size"] < 64 * 2**20


def test_boots_takes_dhcp_and_static_route_reads_instance_id_and_runs_user_data(guest, tmp_path):
    instance = str(uuid.uuid4())
    meta = {"openstack/latest/meta_data.json": json.dumps({"uuid": instance, "hostname": "vm-1.novalocal",
                                                          "name": "vm-1", "meta": {"uuid": "not-this-one"}}),
            "openstack/latest/user-data": USER_DATA}
    with lab(tmp_path, meta) as (_ns, boot):
        start = time.monotonic()
        qemu = boot(instance_disk(guest, tmp_path))
        deadline = start + BOOT_TIMEOUT
        wait_console(tmp_path, qemu, r"^guest-tiny: address (\S+)", deadline)
        t_addr = time.monotonic() - start
        m = wait_console(tmp_path, qemu, r"^guest-tiny: instance-id (\S+)", deadline)
        t_id = time.monotonic() - start
        wait_console(tmp_path, qemu, r"^guest-tiny: user-data exit \d+", deadline)
        # Nova's stop: the ACPI power button; the guest powers off (qemu -no-reboot exits)
        qmp(tmp_path, "system_powerdown")
        wait_console(tmp_path, qemu, r"^guest-tiny: power button: powering off", deadline)
        qemu.wait(timeout=60)
        console = (tmp_path / "console.log").read_text(errors="replace")
    print(f"\nguest-tiny under TCG: address line after {t_addr:.1f} s, instance-id after {t_id:.1f} s")
    assert f"guest-tiny: address {ADDR}/24" in console
    assert f"guest-tiny: route {METADATA}/32 via {SERVER}" in console
    assert m.group(1) == instance
    assert "guest-tiny: user-data: hello from user-data" in console
    assert "guest-tiny: user-data: 2 packets transmitted, 2 packets received, 0% packet loss" in console
    assert "guest-tiny: user-data exit 3" in console
    assert "console=ttyS0" in console  # the kernel command line from the image's extlinux.conf
    http = (tmp_path / "http.log").read_text()
    assert f'{ADDR} - - ' in http and '"GET /openstack/latest/meta_data.json HTTP/1.1" 200' in http


def test_ec2_instance_id_when_no_openstack_metadata_and_user_data_that_is_no_script(guest, tmp_path):
    meta = {"latest/meta-data/instance-id": "i-0000002a\n",
            "openstack/latest/user-data": "#cloud-config\nruncmd: [reboot]\n"}
    with lab(tmp_path, meta) as (_ns, boot):
        start = time.monotonic()
        qemu = boot(instance_disk(guest, tmp_path))
        m = wait_console(tmp_path, qemu, r"^guest-tiny: instance-id (\S+)", start + BOOT_TIMEOUT)
        wait_console(tmp_path, qemu, r"^guest-tiny: up\r?$", start + BOOT_TIMEOUT)
        console = (tmp_path / "console.log").read_text(errors="replace")
    assert m.group(1) == "i-0000002a"
    assert "guest-tiny: user-data is not a script (no #! line): not run" in console
    assert "user-data exit" not in console
