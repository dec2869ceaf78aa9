"""Network boot of the deploy ramdisk (Ironic's `pxe` boot interface), for BMCs without
virtual media (IPMI) or where it is asked.

While a node is being deployed or inspected, it is *armed*: DHCP on the provisioning
network (provisioning/network.py: the lab's, or undercloud.conf's)
answers its MAC (and only the armed MACs: host/dnsmasq.py), with its address and, for
iPXE, the URL of its boot script on the undercloud's API (`/v1/deploy/boot/<mac>`). The
script loads the ramdisk's kernel and initramfs (taken once from the deploy ISO) and
passes the request's URL on the kernel command line, where the ramdisk finds it
(agent/ramdisk.request_from_cmdline); disarming (call-back, undeploy, abort) removes it all.

The request holds the deploy token and the config drive (whose vendor data holds the
server's agent token), and all of it travels over plain HTTP (firmware's iPXE speaks
nothing else). So, as Ironic hands out its agent token: every boot route answers only the
address DHCP gives that MAC (dnsmasq hands out exactly the armed address, never a pool
one), and the request is handed out once, to the first caller, then dropped from disk; a
second request is refused and fails the deploy or inspection loudly (the realiser's
`boot_request`), never silently. The secret in the URLs only tells one arming from the
next: it is not what protects the request.

Firmware without iPXE (real PXE ROMs) gets `undionly.kpxe` (BIOS) or `snponly.efi` (UEFI)
over TFTP, from Debian's `ipxe` package; the lab's QEMU NICs boot iPXE themselves.

State, under <home>/netboot/ (root only): `armed/<mac>.json` per armed node, `files/<iso
sha256>/` the kernel and initramfs, `dhcp/` dnsmasq's config, hosts, leases and log.
"""

from __future__ import annotations

import base64
import fcntl
import hmac
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.errors import UndercloudError
from undercloud.host import dnsmasq
from undercloud.host.dnsmasq import BootHost, DhcpServer
from undercloud.host.run import require, run
from undercloud.provisioning.network import ProvisioningNetwork
from undercloud.provisioning.servers.base import RealiserError

# iPXE for firmware without it, from Debian's `ipxe` package: BIOS PXE ROMs, UEFI (SNP).
IPXE_CHAIN = Path("/usr/lib/ipxe/undionly.kpxe")
IPXE_CHAIN_EFI = Path("/usr/lib/ipxe/snponly.efi")
FILES = ("vmlinuz", "initrd")
log = logging.getLogger("undercloud.servers.netboot")


class BootRefused(UndercloudError):
    """A boot route asked from an address DHCP did not give the MAC (403), or a request asked
    again after it was handed out (`second`, 410: the realiser fails the deploy)."""

    def __init__(self, message: str, entry: dict, second: bool = False):
        super().__init__(message)
        self.entry, self.second = entry, second

    @property
    def status(self) -> int:
        return 410 if self.second else 403


class NetBoot:
    def __init__(self, home, api_port: int, network: Callable[[], ProvisioningNetwork]):
        """`network()`: the provisioning network (the lab's is made when missing); asked
        only when DHCP must answer."""
        self.root = Path(home.path) / "netboot"
        self.api_port = api_port
        self.network = network
        self._lock = threading.Lock()

    # ---- arming ------------------------------------------------------------------------
    def arm(self, *, mac: str, ident: str, node: str, address: str, prefix: int, base_iso: Path,
            iso_sha256: str, request: dict, config_drive: Path | None, kernel_args: str) -> None:
        """Answer `mac` from now on with `request` (a deploy's or an inspection's)."""
        with self._lock:  # nodes deployed at once would otherwise unpack the ISO into one place together
            files = self._files(base_iso, iso_sha256)
        gateway = self.network().address
        body = dict(request)
        if config_drive is not None:
            body["config_drive"] = base64.b64encode(config_drive.read_bytes()).decode()
        entry = {"mac": mac.lower(), "ident": ident, "node": node, "address": address, "prefix": prefix,
                 "gateway": gateway, "secret": secrets.token_urlsafe(24), "files": str(files),
                 "kernel_args": kernel_args, "request": body}
        with self._lock:
            self._write_private(self._armed_file(mac), json.dumps(entry))
            self._dhcp().start(self._hosts())

    def disarm(self, macs: list[str]) -> None:
        """Stop answering `macs` (idempotent); dnsmasq stops with the last armed node."""
        with self._lock:
            for mac in macs:
                self._armed_file(mac).unlink(missing_ok=True)
            hosts = self._hosts()
            if hosts:
                self._dhcp().set_hosts(hosts)
            else:
                self.stop()

    def stop(self) -> None:
        """dnsmasq stopped (it needs no lab network for that)."""
        dnsmasq.stop(self.root / "dhcp")

    def armed(self, mac: str) -> dict | None:
        try:
            return json.loads(self._armed_file(mac).read_text())
        except (OSError, ValueError, RealiserError):
            return None

    def resume(self) -> None:
        """At the service's start: DHCP for the nodes still armed (a deploy that outlived a
        restart), or none."""
        with self._lock:
            hosts = self._hosts()
            if hosts:
                self._dhcp().start(hosts)
            else:
                self.stop()

    # ---- what the API serves (api/ramdisk_callback.py) --------------------------------------------
    # `client`: the address the call came from (through the lab's relay: its peer's).
    def script(self, mac: str, client: str) -> str | None:
        """The iPXE script of an armed MAC, for the address DHCP gives it; None otherwise."""
        entry = self._from(self.armed(mac), client, "boot script")
        if entry is None:
            return None
        base = f"http://{entry['gateway']}:{self.api_port}/v1/deploy/boot/{entry['mac']}/{entry['secret']}"
        args = (f"initrd=initrd {entry['kernel_args']} undercloud.request={base}/request "
                f"undercloud.ip={entry['address']}/{entry['prefix']} BOOTIF={entry['mac']}")
        return (f"#!ipxe\necho undercloud: network boot of node {entry['node']} ({entry['ident']})\n"
                f"kernel {base}/vmlinuz {args}\ninitrd --name initrd {base}/initrd\nboot\n")

    def request(self, mac: str, secret: str, client: str) -> bytes | None:
        """The request of an armed MAC (None: not armed, or a wrong secret), handed out once,
        only to the address DHCP gives that MAC, then dropped from disk. Raises BootRefused
        from another address, and (`second`) when it was handed out already."""
        with self._lock, self._file_lock():  # of two requests at once, one gets it
            entry = self._entry(mac, secret)
            if entry is None:
                return None
            if client != entry["address"]:
                raise BootRefused(f"the boot request of node {entry['node']} is served only to the address DHCP "
                                  f"gives it, not to {client[:45] or 'an unknown address'}", entry)
            if "request" not in entry:
                given = entry.get("handed_out") or {}
                when = time.strftime("%H:%M:%S UTC", time.gmtime(given.get("at", 0)))
                raise BootRefused(f"a second request for the boot credentials of node {entry['node']} was refused "
                                  f"(handed out once, to {given.get('to', '?')} at {when}): its "
                                  f"{'inspection' if entry['ident'].startswith('inspect-') else 'deploy'} "
                                  f"is failed", entry, second=True)
            body = json.dumps(entry.pop("request")).encode()
            entry["handed_out"] = {"to": client, "at": time.time()}
            self._write_private(self._armed_file(mac), json.dumps(entry))  # before it leaves: once, even after a crash
        log.info("node %s: boot request handed out to %s", entry["node"], client)
        return body

    def file(self, mac: str, secret: str, name: str, client: str) -> Path | None:
        if name not in FILES:
            return None
        entry = self._from(self._entry(mac, secret), client, name)
        if entry is None:
            return None
        path = Path(entry["files"]) / name
        return path if path.exists() else None

    def _entry(self, mac: str, secret: str) -> dict | None:
        entry = self.armed(mac)
        if entry is None or not hmac.compare_digest(entry["secret"].encode(), secret.encode("utf-8", "surrogateescape")):
            return None
        return entry

    @staticmethod
    def _from(entry: dict | None, client: str, what: str) -> dict | None:
        """`entry` if `client` is the address DHCP gives its MAC (else None, logged: a
        stranger on the network, or a NAT between the node and the undercloud)."""
        if entry is not None and client != entry["address"]:
            log.warning("node %s: %s asked from %s, not from the address DHCP gives it (%s): refused",
                        entry["node"], what, client[:45] or "an unknown address", entry["address"])
            return None
        return entry

    # ---- helpers -------------------------------------------------------------------------
    def _armed_file(self, mac: str) -> Path:
        name = mac.lower().replace(":", "-")
        if len(name) != 17 or not all(c in "0123456789abcdef-" for c in name):
            raise RealiserError(f"{mac[:40]!r} is not a MAC address")
        return self.root / "armed" / f"{name}.json"

    def _hosts(self) -> list[BootHost]:
        out = []
        for p in sorted((self.root / "armed").glob("*.json")):
            try:
                e = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out.append(BootHost(e["mac"], e["address"], _hostname(e["node"])))
        return out

    def _dhcp(self) -> DhcpServer:
        net = self.network()
        tftp = self.root / "tftp"
        chains = {}
        for which, path in (("bios", IPXE_CHAIN), ("efi", IPXE_CHAIN_EFI)):
            if path.exists():
                tftp.mkdir(parents=True, exist_ok=True)
                if not (tftp / path.name).exists():
                    shutil.copyfile(path, tftp / path.name)
                chains[which] = path.name
        return DhcpServer(state_dir=self.root / "dhcp", interface=net.interface, subnet=net.cidr, netns=net.netns,
                          tftp_root=tftp if chains else None, chain_file=chains.get("bios"),
                          chain_file_efi=chains.get("efi"), gateway=net.gateway,
                          script_url=f"http://{net.address}:{self.api_port}/v1/deploy/boot/${{mac}}")

    def _files(self, base_iso: Path, sha256: str) -> Path:
        """The ramdisk's kernel and initramfs, read once out of the deploy ISO."""
        out = self.root / "files" / sha256[:32]
        if all((out / f).exists() for f in FILES):
            return out
        require("xorriso", "xorriso")
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        argv = ["xorriso", "-osirrox", "on", "-indev", str(base_iso)]
        for f in FILES:
            argv += ["-extract", f"/{f}", str(tmp / f)]
        run(argv, timeout=300)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out

    @contextmanager
    def _file_lock(self):
        """Held while a request is handed out: other processes serving this home wait."""
        path = self.root / "armed" / ".lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_private(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        write_atomic(path, text)


def _hostname(label: str) -> str:
    """A DHCP host name from a node's label (letters, digits, '-')."""
    name = "".join(c if c.isalnum() else "-" for c in label).strip("-")[:63]
    return name or "node"
