"""The network-boot DHCP server (host/dnsmasq.py) with the real dnsmasq, asked by a real
DHCP client (busybox udhcpc) across a veth pair between two namespaces of this test: a
known MAC gets its fixed address, an unknown one gets nothing, and hosts change without a
restart."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import need, need_root
from undercloud.errors import UndercloudError
from undercloud.host.dnsmasq import BootHost, DhcpServer

pytestmark = pytest.mark.integration

SUBNET = "192.168.253.0/24"
KNOWN = "52:54:00:aa:00:01"
OTHER = "52:54:00:aa:00:02"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture
def wire(tmp_path):
    """(server namespace path, client namespace path, server link, client link)."""
    need_root()
    need("dnsmasq")
    need("busybox")
    tag = f"{os.getpid() % 100000}"
    srv_ns, cli_ns = f"ucdhcp-s{tag}", f"ucdhcp-c{tag}"
    srv_if, cli_if = f"dhs{tag}", f"dhc{tag}"
    sh("ip", "netns", "add", srv_ns)
    sh("ip", "netns", "add", cli_ns)
    try:
        sh("ip", "link", "add", srv_if, "netns", srv_ns, "type", "veth", "peer", "name", cli_if, "netns", cli_ns)
        sh("ip", "-n", srv_ns, "addr", "add", "192.168.253.1/24", "dev", srv_if)
        sh("ip", "-n", srv_ns, "link", "set", srv_if, "up")
        sh("ip", "-n", cli_ns, "link", "set", cli_if, "address", KNOWN)
        sh("ip", "-n", cli_ns, "link", "set", cli_if, "up")
        yield f"/run/netns/{srv_ns}", f"/run/netns/{cli_ns}", srv_if, cli_if
    finally:
        sh("ip", "netns", "del", srv_ns, check=False)
        sh("ip", "netns", "del", cli_ns, check=False)


def ask_for_lease(cli_ns: str, cli_if: str, mac: str) -> subprocess.CompletedProcess:
    """One DHCP exchange from `mac` (3 discovers, 1 s apart); the lease is not applied."""
    sh("nsenter", f"--net={cli_ns}", "ip", "link", "set", cli_if, "address", mac)
    return sh("nsenter", f"--net={cli_ns}", "busybox", "udhcpc", "-i", cli_if, "-f", "-n", "-q",
              "-t", "3", "-T", "1", "-s", "/bin/true", check=False)


@pytest.mark.timeout(120)
def test_dhcp_answers_only_the_macs_it_boots(wire, tmp_path):
    srv_ns, cli_ns, srv_if, cli_if = wire
    server = DhcpServer(state_dir=tmp_path / "dhcp", interface=srv_if, subnet=SUBNET, netns=srv_ns)
    server.start([BootHost(KNOWN, "192.168.253.10", "node-0")])
    try:
        pid = server.pid_file.read_text()
        got = ask_for_lease(cli_ns, cli_if, KNOWN)
        assert got.returncode == 0, got.stderr
        assert "lease of 192.168.253.10 obtained" in got.stdout + got.stderr
        assert server.leases() == {KNOWN: "192.168.253.10"}

        # A machine it was not told about: no offer at all, and no lease recorded.
        got = ask_for_lease(cli_ns, cli_if, OTHER)
        assert got.returncode != 0
        assert "obtained" not in got.stdout + got.stderr
        assert OTHER not in server.leases()
        assert f"{OTHER} ignored" in server.log_file.read_text()

        # Told about it now: answered by the same dnsmasq (re-read, not restarted).
        server.set_hosts([BootHost(KNOWN, "192.168.253.10", "node-0"), BootHost(OTHER, "192.168.253.11", "node-1")])
        got = ask_for_lease(cli_ns, cli_if, OTHER)
        assert "lease of 192.168.253.11 obtained" in got.stdout + got.stderr, got.stderr
        assert server.pid_file.read_text() == pid

        # Bad hosts are refused in one line, and what it answers stays as it was.
        before = server.hosts_file.read_text()
        for bad, says in ((BootHost("52:54:00:zz:00:01", "192.168.253.12", "node-2"), "is not a MAC address"),
                          (BootHost("52:54:00:aa:00:03", "10.0.0.5", "node-2"), "is not in 192.168.253.0/24"),
                          (BootHost(KNOWN.upper(), "192.168.253.13", "node-2"), f"both have {KNOWN}")):
            with pytest.raises(UndercloudError, match=says):
                server.set_hosts([BootHost(KNOWN, "192.168.253.10", "node-0"), bad])
        assert server.hosts_file.read_text() == before

        server.start([BootHost(KNOWN, "192.168.253.10", "node-0")])   # again: the same process
        assert server.pid_file.read_text() == pid
    finally:
        server.stop()
    assert not server.running()


@pytest.mark.timeout(60)
def test_tftp_serves_the_chain_loader_and_ipxe_gets_the_script_url(wire, tmp_path):
    srv_ns, cli_ns, srv_if, cli_if = wire
    tftp = tmp_path / "tftp"
    tftp.mkdir()
    (tftp / "undionly.kpxe").write_bytes(b"ipxe stand-in" * 100)
    server = DhcpServer(state_dir=tmp_path / "dhcp", interface=srv_if, subnet=SUBNET, netns=srv_ns, tftp_root=tftp,
                        chain_file="undionly.kpxe", chain_file_efi="snponly.efi",
                        script_url="http://192.168.253.1:8080/v1/deploy/boot/${mac}")
    conf = server.config()
    assert "dhcp-boot=tag:ipxe,http://192.168.253.1:8080/v1/deploy/boot/${mac}" in conf
    assert "dhcp-boot=tag:efi64,tag:!ipxe,snponly.efi" in conf and "dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe" in conf
    server.start([BootHost(KNOWN, "192.168.253.10", "node-0")])
    try:
        sh("nsenter", f"--net={cli_ns}", "ip", "addr", "add", "192.168.253.10/24", "dev", cli_if)
        got = sh("nsenter", f"--net={cli_ns}", "busybox", "tftp", "-g", "-r", "undionly.kpxe",
                 "-l", str(tmp_path / "fetched"), "192.168.253.1", check=False)
        assert got.returncode == 0, got.stderr
        assert (tmp_path / "fetched").read_bytes() == (tftp / "undionly.kpxe").read_bytes()
        got = sh("nsenter", f"--net={cli_ns}", "busybox", "tftp", "-g", "-r", "../dhcp/hosts",
                 "-l", str(tmp_path / "escaped"), "192.168.253.1", check=False)
        assert got.returncode != 0  # nothing outside the TFTP root
    finally:
        server.stop()
