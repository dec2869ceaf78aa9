"""A booted server's first boot: apply its config drive before the agent starts.

Standard library only (runs on a bare python3, like the rest of the agent).

    python3 -m undercloud.agent.first_boot   # an ExecStartPre of the agent's unit

First-boot data is an OpenStack config drive (ISO 9660 labelled `config-2`): a VM gets it as
a CD, a bare-metal node as a partition the deploy ramdisk (ramdisk.py) wrote at the end of
its disk.
    openstack/latest/meta_data.json      uuid, hostname, name, meta
    openstack/latest/network_data.json   links (MACs) and networks (static addresses)
    openstack/latest/user_data           the server's user_data (kept, not run)
    openstack/latest/vendor_data2.json   {"undercloud": agent configuration: url, server_id, token, ...}
A server of another OpenStack cloud (`openstack:<cloud>`) has the agent configuration as its
user_data instead, `{"undercloud": {...}}`, since that cloud's Nova writes its own vendor data.
`firstboot` sets the hostname, the static addresses and writes the agent's configuration,
before the agent starts, so that the agent finds its undercloud and token from the first run.

The deploy ramdisk (ramdisk.py) builds on this module: the error it calls back, its output,
its commands, mounting media and setting a static address are the ones here.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from undercloud.agent import files
from undercloud.agent.settings import DEFAULT_STATE

CONFIG_DRIVE_LABEL = "config-2"
AGENT_CONFIG = Path("/etc/undercloud-agent/config.json")


class DeployError(Exception):
    """One line that goes back to the undercloud as the node's last error (the ramdisk calls
    it back; the first boot prints it)."""


def say(msg: str) -> None:
    print(f"undercloud-deploy: {msg}", flush=True)


def sh(*argv: str, input: bytes | None = None, timeout: float = 600) -> str:
    try:
        r = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise DeployError(f"{argv[0]} is missing on this node") from None
    except subprocess.TimeoutExpired:
        raise DeployError(f"`{' '.join(argv[:2])}` did not finish within {timeout:.0f} s") from None
    if r.returncode != 0:
        err = (r.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise DeployError(f"`{' '.join(argv[:2])}` failed: {err[:200]}")
    return r.stdout.decode(errors="replace")


# ---- reading media -----------------------------------------------------------------
class Mounted:
    """A read-only mount of a block device on a temporary directory."""

    def __init__(self, device: str):
        self.device, self.dir = device, Path(tempfile.mkdtemp(prefix="uc-media-"))

    def __enter__(self) -> Path:
        sh("mount", "-o", "ro", self.device, str(self.dir), timeout=60)
        return self.dir

    def __exit__(self, *exc) -> None:
        subprocess.run(["umount", str(self.dir)], capture_output=True)
        try:
            self.dir.rmdir()
        except OSError:
            pass


def find_config_drive() -> str | None:
    link = Path(f"/dev/disk/by-label/{CONFIG_DRIVE_LABEL}")
    if link.exists():
        return str(link.resolve())
    try:
        out = subprocess.run(["blkid", "-t", f"LABEL={CONFIG_DRIVE_LABEL}", "-o", "device"],
                             capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        out = []
    return out[0] if out else None


def read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def read_attr(path: Path) -> str:
    """A small file's text, stripped (a sysfs attribute, /proc/cmdline); "" if unreadable."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


# ---- network -----------------------------------------------------------------------
def interfaces() -> dict[str, str]:
    """MAC (lower case) -> interface name."""
    out = {}
    for dev in Path("/sys/class/net").iterdir():
        try:
            mac = (dev / "address").read_text().strip().lower()
        except OSError:
            continue
        if dev.name != "lo" and mac and mac != "00:00:00:00:00:00":
            out[mac] = dev.name
    return out


def set_address(mac: str, address: str, prefix: int, persist: bool, gateway: str | None = None) -> str:
    """Put `address/prefix` on the interface with `mac`, and the default route through
    `gateway` if one is given; returns the interface name."""
    deadline = time.monotonic() + 30  # NICs may still be probing at first boot
    while (dev := interfaces().get(mac.lower())) is None:
        if time.monotonic() > deadline:
            raise DeployError(f"no network interface with MAC {mac} (have {', '.join(interfaces()) or 'none'})")
        time.sleep(1)
    networkd = persist and Path("/etc/systemd/network").is_dir() and shutil.which("systemctl")
    if shutil.which("ip"):  # the ramdisk has iproute2; node images may have only networkd
        sh("ip", "link", "set", "dev", dev, "up")
        sh("ip", "addr", "replace", f"{address}/{prefix}", "dev", dev)
        if gateway:
            sh("ip", "route", "replace", "default", "via", gateway, "dev", dev)
    elif not networkd:
        raise DeployError(f"cannot set {address} on {dev}: neither ip (iproute2) nor systemd-networkd here")
    if networkd:
        # Kept across reboots; and networkd stops asking DHCP on it (80-undercloud-dhcp.network).
        unit = Path(f"/etc/systemd/network/10-undercloud-{dev}.network")
        text = (f"[Match]\nMACAddress={mac.lower()}\n\n[Network]\nAddress={address}/{prefix}\n"
                + (f"Gateway={gateway}\n" if gateway else "")
                + "DHCP=no\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n")
        if read_attr(unit) != text.strip() or not has_address(address):
            files.write_atomic(unit, text, 0o644)
            # `networkctl reload` needs D-Bus, which minimal images lack: restart networkd instead.
            subprocess.run(["systemctl", "restart", "systemd-networkd.service"], capture_output=True, timeout=60)
    wait_address(address, 30)
    return dev


def has_address(address: str) -> bool:
    """Whether `address` is assigned here (binding to it succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((address, 0))
            return True
        except OSError:
            return False


def wait_address(address: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not has_address(address):
        if time.monotonic() > deadline:
            raise DeployError(f"address {address} did not come up within {timeout:.0f} s")
        time.sleep(0.5)


def apply_network_data(data: dict, persist: bool = True) -> list[str]:
    links = {link.get("id"): link for link in data.get("links") or []}
    done = []
    for net in data.get("networks") or []:
        if net.get("type") not in ("ipv4", "ipv4_static") or not net.get("ip_address"):
            continue
        mac = (links.get(net.get("link")) or {}).get("ethernet_mac_address")
        if not mac:
            continue
        prefix = ipaddress.ip_network(f"0.0.0.0/{net.get('netmask', '255.255.255.0')}").prefixlen
        # the default route, as Nova writes it: network and netmask 0.0.0.0
        gateway = next((r.get("gateway") for r in net.get("routes") or []
                        if r.get("network") == "0.0.0.0" and r.get("netmask") == "0.0.0.0" and r.get("gateway")), None)
        dev = set_address(mac, net["ip_address"], prefix, persist, gateway)
        done.append(f"{net['ip_address']}/{prefix} on {dev}" + (f" via {gateway}" if gateway else ""))
    return done


# ---- first boot --------------------------------------------------------------------
def firstboot(root: Path = Path("/")) -> int:
    device = find_config_drive()
    if device is None:
        say(f"no config drive (label {CONFIG_DRIVE_LABEL}); keeping the current configuration")
        return 0
    with Mounted(device) as media:
        base = media / "openstack" / "latest"
        meta = read_json(base / "meta_data.json", {}) or {}
        network = read_json(base / "network_data.json", {}) or {}
        vendor = read_json(base / "vendor_data2.json", {}) or {}
        user_data = (base / "user_data").read_bytes() if (base / "user_data").exists() else None
    agent = vendor.get("undercloud")
    if not isinstance(agent, dict) and user_data is not None:
        # A real Nova passes no vendor data of ours: the agent configuration comes as the
        # server's user data, {"undercloud": {...}}, with the server's own user data inside.
        try:
            agent = json.loads(user_data).get("undercloud")
        except (ValueError, UnicodeDecodeError, AttributeError):
            agent = None
        if isinstance(agent, dict):
            own = agent.get("user_data")
            user_data = own.encode() if isinstance(own, str) and own else None
    # The undercloud's name for it first: another Nova's hostname has its domain (.novalocal).
    hostname = (agent.get("hostname") if isinstance(agent, dict) else None) or meta.get("hostname") or meta.get("name")
    if hostname:
        files.write_atomic(root / "etc" / "hostname", hostname + "\n", 0o644)
        hosts = root / "etc" / "hosts"
        lines = [x for x in (hosts.read_text().splitlines() if hosts.exists() else []) if "# undercloud" not in x]
        files.write_atomic(hosts, "\n".join([*lines, f"127.0.1.1 {hostname} # undercloud"]) + "\n", 0o644)
        subprocess.run(["hostname", hostname], capture_output=True)
    if isinstance(agent, dict) and agent.get("server_id"):
        files.write_atomic(root / AGENT_CONFIG.relative_to("/"), json.dumps(agent))
    if user_data is not None:
        state = root / DEFAULT_STATE.relative_to("/")
        files.write_atomic(state / "user_data", user_data)  # 0600: user data may hold secrets
    try:  # last: a network problem must not keep the agent from its configuration
        for line in apply_network_data(network):
            say(f"address {line}")
    except DeployError as exc:
        say(f"network: {exc}")
    say(f"first boot of {hostname or 'this server'} ({meta.get('uuid', '?')}) applied from {device}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python3 -m undercloud.agent.first_boot", file=sys.stderr)
        return 2
    try:
        return firstboot()
    except DeployError as exc:
        say(f"first boot: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
