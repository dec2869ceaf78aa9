"""DHCP and TFTP for network boot: one dnsmasq (Debian's `dnsmasq-base`, never its system
service) per provisioning network, run in that network's namespace on its interface.

It answers only the MACs it is given: the nodes being booted get their fixed address and
boot file; any other machine on the wire gets no lease (`dhcp-ignore=tag:!known`, and the
range is `static`, so even a forgotten ignore hands out nothing): a MAC's address is
exactly its hosts-file address, never a pool one, which the network-boot routes rely on
(they answer only that address: baremetal_netboot.py). The known hosts live in
a file dnsmasq re-reads on SIGHUP, so adding or removing a node never restarts it. No DNS
(`port=0`).

Boot: a plain PXE ROM is sent `chain_file` (iPXE itself, over TFTP from `tftp_root`;
`chain_file_efi` for UEFI firmware, DHCP client architecture 7 or 9); iPXE
(DHCP option 175 set) is sent `script_url`, where `${mac}` is left for iPXE to fill in,
so one URL serves every node its own script.
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.host.libvirt import HostError, pid_alive
from undercloud.host.run import require, run

MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
LEASE_TIME = "10m"
START_TIMEOUT = 10.0


@dataclass(frozen=True)
class BootHost:
    """A machine the server answers: its MAC, the address it gets and its host name."""
    mac: str
    address: str
    name: str


@dataclass
class DhcpServer:
    state_dir: Path            # config, hosts file, leases, log, pid
    interface: str             # the provisioning network's interface (the lab's bridge)
    subnet: str                # its CIDR: every host address must be inside it
    netns: str | None = None   # path of the namespace the interface lives in (None: this one)
    tftp_root: Path | None = None
    chain_file: str | None = None   # what a BIOS PXE ROM loads over TFTP (e.g. undionly.kpxe)
    chain_file_efi: str | None = None   # the same for x86-64 UEFI firmware (e.g. snponly.efi)
    script_url: str | None = None   # what iPXE loads (e.g. http://<undercloud>/v1/boot/${mac})
    gateway: str | None = None      # the router the nodes are told, if any

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "dnsmasq.pid"

    @property
    def hosts_file(self) -> Path:
        return self.state_dir / "hosts"

    @property
    def lease_file(self) -> Path:
        return self.state_dir / "leases"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "dnsmasq.log"

    def config(self) -> str:
        net = ipaddress.ip_network(self.subnet, strict=False)
        lines = [
            "# written by undercloud (host/dnsmasq.py); rewritten at each start",
            "port=0",
            f"interface={self.interface}",
            "bind-interfaces",
            "except-interface=lo",
            f"dhcp-range={net.network_address},static,{net.netmask},{LEASE_TIME}",
            f"dhcp-hostsfile={self.hosts_file}",
            "dhcp-ignore=tag:!known",
            f"dhcp-leasefile={self.lease_file}",
            "log-dhcp",
            f"log-facility={self.log_file}",
            f"pid-file={self.pid_file}",
            "user=root",   # it re-reads the hosts file from the home, which only root may read
        ]
        if self.gateway:
            lines.append(f"dhcp-option=option:router,{self.gateway}")
        else:
            lines.append("dhcp-option=option:router")   # no default route: the network stays local
        if self.tftp_root:
            lines += ["enable-tftp", f"tftp-root={self.tftp_root}", "tftp-secure"]
        if self.script_url:
            lines += ["dhcp-match=set:ipxe,175", f"dhcp-boot=tag:ipxe,{self.script_url}"]
        if self.chain_file_efi:
            lines += ["dhcp-match=set:efi64,option:client-arch,7", "dhcp-match=set:efi64,option:client-arch,9",
                      f"dhcp-boot=tag:efi64,tag:!ipxe,{self.chain_file_efi}"]
        if self.chain_file:
            lines.append(f"dhcp-boot=tag:!ipxe,tag:!efi64,{self.chain_file}")
        return "\n".join(lines) + "\n"

    def running(self) -> bool:
        pid = self._pid()
        return pid_alive(pid) and "dnsmasq" in _comm(pid)  # not a stale pid reused by another process

    def start(self, hosts: list[BootHost] = ()) -> None:
        """dnsmasq answering `hosts`, started if it does not run (idempotent)."""
        self._write_hosts(hosts)
        if self.running():
            self._reload()
            return
        dnsmasq = require("dnsmasq", "dnsmasq-base")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        conf = self.state_dir / "dnsmasq.conf"
        conf.write_text(self.config())
        self.pid_file.unlink(missing_ok=True)
        argv = [dnsmasq, f"--conf-file={conf}"]
        if self.netns:
            argv = ["nsenter", f"--net={self.netns}", *argv]
        proc = run(argv, check=False, timeout=30)   # it daemonises once its socket is bound
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no error output"])[-1]
            raise HostError(f"dnsmasq on {self.interface} did not start: {tail}")
        deadline = time.monotonic() + START_TIMEOUT
        while not self.running():
            if time.monotonic() > deadline:
                raise HostError(f"dnsmasq on {self.interface} wrote no pid within {START_TIMEOUT:.0f} s "
                                f"(see {self.log_file})")
            time.sleep(0.05)

    def set_hosts(self, hosts: list[BootHost]) -> None:
        """Answer exactly `hosts` from now on (dnsmasq re-reads them; no restart)."""
        self._write_hosts(hosts)
        if self.running():
            self._reload()

    def stop(self) -> None:
        stop(self.state_dir)

    def leases(self) -> dict[str, str]:
        """MAC -> address of the leases handed out (dnsmasq's lease file)."""
        if not self.lease_file.exists():
            return {}
        out = {}
        for line in self.lease_file.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                out[parts[1].lower()] = parts[2]
        return out

    def _write_hosts(self, hosts: list[BootHost]) -> None:
        net = ipaddress.ip_network(self.subnet, strict=False)
        lines, seen = [], {}
        for h in hosts:
            mac = h.mac.strip().lower()
            if not MAC.match(mac):
                raise HostError(f"boot host {h.name}: {h.mac!r} is not a MAC address (like 52:54:00:12:34:56)")
            try:
                inside = ipaddress.ip_address(h.address) in net
            except ValueError:
                inside = False
            if not inside:
                raise HostError(f"boot host {h.name}: address {h.address!r} is not in {net}")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}", h.name):
                raise HostError(f"boot host {h.name!r}: a host name is letters, digits and '-' (at most 63)")
            for key in (mac, h.address):
                if key in seen:
                    raise HostError(f"boot hosts {seen[key]} and {h.name} both have {key}")
                seen[key] = h.name
            lines.append(f"{mac},{h.address},{h.name}")
        write_atomic(self.hosts_file, "".join(f"{line}\n" for line in lines))  # dnsmasq never reads half a file

    def _reload(self) -> None:
        pid = self._pid()
        if pid_alive(pid):
            os.kill(pid, signal.SIGHUP)

    def _pid(self) -> int | None:
        return _pid(self.pid_file)


def stop(state_dir: Path) -> bool:
    """Stop the dnsmasq whose state is in `state_dir` (idempotent); whether one ran."""
    pid_file = state_dir / "dnsmasq.pid"
    pid = _pid(pid_file)
    ran = pid_alive(pid) and "dnsmasq" in _comm(pid)
    if ran:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    pid_file.unlink(missing_ok=True)
    return ran


def running_pid(state_dir: Path) -> int | None:
    """The pid of the dnsmasq whose state is in `state_dir`, if it runs."""
    pid = _pid(state_dir / "dnsmasq.pid")
    return pid if pid_alive(pid) and "dnsmasq" in _comm(pid) else None


def _pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
