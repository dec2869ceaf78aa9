"""On the node, around the agent: first-boot data and the deploy ramdisk's image writing.

Standard library only (runs on a bare python3).

    python3 -m undercloud.agent.deploy firstboot   # a booted server: apply its config drive
    python3 -m undercloud.agent.deploy ramdisk     # the deploy ramdisk: write the image, if asked

First-boot data is an OpenStack config drive (ISO 9660 labelled `config-2`): a VM gets it as
a CD, a bare-metal node as a partition the ramdisk wrote at the end of its disk.
    openstack/latest/meta_data.json      uuid, hostname, name, meta
    openstack/latest/network_data.json   links (MACs) and networks (static addresses)
    openstack/latest/user_data           the server's user_data (kept, not run)
    openstack/latest/vendor_data2.json   {"undercloud": agent configuration: url, server_id, token, ...}
A server of another OpenStack cloud (`openstack:<cloud>`) has the agent configuration as its
user_data instead, `{"undercloud": {...}}`, since that cloud's Nova writes its own vendor data.
`firstboot` sets the hostname, the static addresses and writes the agent's configuration,
before the agent starts (an ExecStartPre of its unit).

The deploy ramdisk (Ironic's direct deploy) finds `undercloud/deploy.json` on
the CD it booted from (or, booted from the network, at the URL of its kernel command line:
`request_from_cmdline`) (the undercloud made that ISO for this deploy and inserted it through
the BMC's virtual media): it sets its address, picks the root device by the hints,
downloads the image from the undercloud's image store (resuming with Range), verifies the
sha256, writes it, adds the config drive as a last partition, and calls back; the
undercloud then ejects the media, sets boot to disk and reboots the node. Any failure is
called back as one line (never the token), and the node waits to be powered off.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from undercloud.agent import files
from undercloud.agent.settings import DEFAULT_STATE

CONFIG_DRIVE_LABEL = "config-2"
AGENT_CONFIG = Path("/etc/undercloud-agent/config.json")
REQUEST = "undercloud/deploy.json"      # on the deploy CD
CONFIG_DRIVE_FILE = "undercloud/configdrive.iso"
MIN_ROOT_BYTES = 4 * 1024 ** 3          # Ironic's default: the smallest disk of at least 4 GiB
CHUNK = 1 << 20
REQUEST_WAIT = 90.0                     # seconds to wait for the CD with the request to show


class DeployError(Exception):
    """One line that goes back to the undercloud as the node's last error."""


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


def cdroms() -> list[str]:
    return sorted(f"/dev/{p.name}" for p in Path("/sys/block").glob("sr*"))


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
        if _attr(unit) != text.strip() or not has_address(address):
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


# ---- root device -------------------------------------------------------------------
def _attr(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def block_devices() -> list[dict]:
    out = []
    for d in sorted(Path("/sys/block").iterdir()):
        if re.match(r"(loop|ram|sr|zram|dm-|fd|nbd)", d.name) or _attr(d / "removable") == "1":
            continue
        size = int(_attr(d / "size") or 0) * 512
        if size == 0:
            continue
        out.append({"name": f"/dev/{d.name}", "size": size, "model": _attr(d / "device" / "model"),
                    "vendor": _attr(d / "device" / "vendor"),
                    "serial": _attr(d / "serial") or _attr(d / "device" / "serial"),
                    "wwn": _attr(d / "wwid") or _attr(d / "device" / "wwid"),
                    "rotational": _attr(d / "queue" / "rotational") == "1"})
    return out


def _size_matches(hint, size_bytes: int) -> bool:
    gib = size_bytes // 1024 ** 3
    m = re.fullmatch(r"\s*(>=|<=|==|!=|>|<|s==)?\s*(\d+)\s*", str(hint))
    if not m:
        raise DeployError(f"root_device: size: cannot read {hint!r} (an integer in GiB, or '>= N')")
    op, n = m.group(1) or "==", int(m.group(2))
    return {">=": gib >= n, "<=": gib <= n, "==": gib == n, "s==": gib == n, "!=": gib != n,
            ">": gib > n, "<": gib < n}[op]


def pick_root_device(hints: dict, devices: list[dict] | None = None) -> dict:
    """The device matching every hint (Ironic's root_device semantics); without hints the
    smallest disk of at least 4 GiB."""
    devices = block_devices() if devices is None else devices
    known = {"name", "size", "model", "vendor", "serial", "wwn", "rotational"}
    unknown = sorted(set(hints) - known)
    if unknown:
        raise DeployError(f"root_device: unsupported hint(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    fits = []
    for dev in devices:
        ok = True
        for key, want in hints.items():
            if key == "size":
                ok = _size_matches(want, dev["size"])
            elif key == "rotational":
                ok = dev["rotational"] == (str(want).lower() in ("1", "true", "yes"))
            elif key == "name":
                ok = dev["name"] == (want if str(want).startswith("/dev/") else f"/dev/{want}")
            else:
                ok = str(want).strip().lower() == str(dev[key]).strip().lower()
            if not ok:
                break
        if ok and (hints or dev["size"] >= MIN_ROOT_BYTES):
            fits.append(dev)
    if not fits:
        seen = "; ".join(f"{d['name']} {d['size'] // 1024 ** 3} GiB" for d in devices) or "none"
        wanted = f"matching root_device hints {json.dumps(hints, sort_keys=True)}" if hints \
            else "of at least 4 GiB"
        raise DeployError(f"no disk {wanted} (disks: {seen})")
    return min(fits, key=lambda d: d["size"])


# ---- the image ---------------------------------------------------------------------
def download(url: str, dest: Path, size: int, checksum: str, attempts: int = 6) -> float:
    """Fetch `url` into `dest`, resuming after a broken transfer; verify size and sha256
    (files.download); returns the seconds it took."""
    t0 = time.monotonic()
    try:
        # written to the disk, then removed: no fsync (the ramdisk's /tmp is memory anyway)
        files.download(url, dest, checksum, size, attempts=attempts, say=say, durable=False)
    except urllib.error.HTTPError as exc:
        raise DeployError(f"image download refused: HTTP {exc.code}") from None
    except files.VerifyError as exc:
        if exc.field == "sha256":
            raise DeployError(f"image checksum mismatch: the {exc.got} bytes downloaded have sha256 {exc.digest}, "
                              f"expected {checksum}") from None
        raise DeployError(f"image download {exc}") from None
    except OSError as exc:
        raise DeployError(f"image download failed: {exc}") from None
    return time.monotonic() - t0


def write_image(image: Path, disk_format: str, device: str) -> None:
    if disk_format == "qcow2":
        sh("qemu-img", "convert", "-f", "qcow2", "-O", "raw", "-n", str(image), device, timeout=3600)
    elif disk_format == "raw":
        with open(image, "rb") as src, open(device, "r+b") as dst:
            while chunk := src.read(CHUNK * 4):
                dst.write(chunk)
    else:
        raise DeployError(f"cannot write an image of disk format {disk_format!r} (qcow2 or raw)")
    sh("sync")


def write_config_drive(iso: Path, device: str) -> int:
    """The config drive as a new partition at the very end of `device` (as Ironic puts it),
    so the root partition before it can still grow to fill the disk; returns its start
    sector."""
    sectors = -(-iso.stat().st_size // 512)
    sectors = -(-sectors // 2048) * 2048  # whole MiB
    with open(device, "rb") as f:
        disk = f.seek(0, os.SEEK_END) // 512  # a block device or an image file
    start = (disk - 1 - sectors) // 2048 * 2048  # MiB-aligned; the last sector stays free (GPT backup)
    sh("sfdisk", "--append", "--no-reread", "--no-tell-kernel", "-q", device,
       input=f"start={start}, size={sectors}, type=83\n".encode(), timeout=60)
    table = json.loads(sh("sfdisk", "--json", device, timeout=60))["partitiontable"]
    if start not in [p["start"] for p in table["partitions"]]:
        raise DeployError(f"config drive partition: sfdisk did not place it at sector {start} of {device}")
    with open(iso, "rb") as src, open(device, "r+b") as dst:
        dst.seek(start * 512)
        while chunk := src.read(CHUNK):
            dst.write(chunk)
    sh("sync")
    return start


# ---- calling back ------------------------------------------------------------------
def trust(req: dict, where: Path | None = None) -> None:
    """The undercloud's CA from the request (`ca`, PEM): its https URL (call-back, image
    download) is verified against it alone (files.undercloud_tls)."""
    if req.get("ca"):
        where = where or Path(tempfile.gettempdir()) / "undercloud-ca.pem"
        files.write_atomic(where, req["ca"], 0o644)
        os.environ["UNDERCLOUD_CA_FILE"] = str(where)



def call_back(req: dict, ok: bool, error: str | None = None, attempts: int = 10,
              inventory: dict | None = None) -> None:
    body = json.dumps({"ok": ok, "error": error, **({"inventory": inventory} if inventory else {})}).encode()
    url = f"{req['url'].rstrip('/')}/v1/deploy/servers/{req['server_id']}/callback"
    for attempt in range(attempts):
        r = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-Deploy-Token": req["token"]})
        try:
            with urllib.request.urlopen(r, timeout=30, context=files.undercloud_tls(url)):
                say("called back: " + ("done" if ok else "failed"))
                return
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500:
                detail = exc.read().decode(errors="replace")[:300]
                say(f"the undercloud refused the call-back (HTTP {exc.code}): {detail}")
                return
            reason = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            reason = str(getattr(exc, "reason", exc))
        say(f"call-back failed ({reason}); retrying")
        time.sleep(min(2 ** attempt, 15))
    say("giving up calling back; the undercloud's timeout will fail this deploy")


def find_request() -> tuple[dict, bytes | None] | None:
    """(deploy request, config drive bytes) from the CD this ramdisk booted from, or None."""
    for dev in cdroms():
        try:
            with Mounted(dev) as media:
                req = read_json(media / REQUEST)
                if isinstance(req, dict):
                    cd = media / CONFIG_DRIVE_FILE
                    return req, (cd.read_bytes() if cd.exists() else None)
        except DeployError:
            continue  # an empty drive
    return None


def cmdline_args(cmdline: str) -> dict[str, str]:
    """The `key=value` words of a kernel command line (the last of a key wins, as the kernel's)."""
    return dict(w.split("=", 1) for w in cmdline.split() if "=" in w)


def boot_mac(args: dict[str, str]) -> str | None:
    """The MAC of `BOOTIF=`, as iPXE (`52:54:00:..`) or pxelinux (`01-52-54-00-..`) write it."""
    raw = args.get("BOOTIF", "").lower()
    if re.fullmatch(r"01-([0-9a-f]{2}-){5}[0-9a-f]{2}", raw):
        raw = raw[3:]
    mac = raw.replace("-", ":")
    return mac if re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", mac) else None


def request_from_cmdline(cmdline: str, attempts: int = 5) -> tuple[dict, bytes | None] | None:
    """(deploy request, config drive bytes) for a ramdisk booted from the network, or None.

    iPXE booted it with `undercloud.request=URL` (the request, served by the undercloud
    for this deploy only), `BOOTIF=MAC` (the NIC it booted from) and, where the request is
    reached on a static address, `undercloud.ip=ADDRESS/PREFIX`. The request carries the
    config drive as base64 (`config_drive`): a CD holds it as a file.

    The undercloud hands the request out once, and only to this node's DHCP address (it
    holds the deploy and agent tokens): a refusal (HTTP 403/410...) is final and named. A
    transfer broken after the undercloud answered is retried too, and that retry is
    refused and fails the deploy at once (rather than a timeout much later)."""
    args = cmdline_args(cmdline)
    url = args.get("undercloud.request")
    if not url:
        return None
    if args.get("undercloud.ip"):
        address, _, prefix = args["undercloud.ip"].partition("/")
        mac = boot_mac(args) or (sorted(interfaces()) or [""])[0]
        dev = set_address(mac, address, int(prefix or 24), persist=False)
        say(f"address {address}/{prefix or 24} on {dev}")
    body = b""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = resp.read()
            break
        except urllib.error.HTTPError as exc:
            raise DeployError(f"the undercloud refused the deploy request (HTTP {exc.code}): {_said(exc)}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # also a body cut short
            reason = str(getattr(exc, "reason", exc)) or type(exc).__name__
            if attempt == attempts - 1:
                raise DeployError(f"the deploy request could not be fetched ({reason})") from None
            time.sleep(min(2 ** attempt, 10))  # a link that just came up may still be negotiating
    try:
        req = json.loads(body)
        drive = req.pop("config_drive", None)
        return req, (base64.b64decode(drive, validate=True) if drive else None)
    except (ValueError, AttributeError, TypeError) as exc:
        raise DeployError(f"the deploy request is not a JSON object with a base64 config drive: {exc}") from None


def _said(exc: urllib.error.HTTPError) -> str:
    """The one-line error of an undercloud's refusal ({"error": ...}), else its reason."""
    try:
        said = json.loads(exc.read(4096)).get("error")
    except (ValueError, AttributeError, OSError):
        said = None
    return " ".join(str(said or exc.reason).split())[:300]


def deploy(req: dict, config_drive: bytes | None, workdir: Path = Path("/tmp")) -> dict:
    """Write the image described by `req`; returns timings. Raises DeployError."""
    t0 = time.monotonic()
    root = pick_root_device(req.get("root_device") or {})
    say(f"root device {root['name']} ({root['size'] // 1024 ** 3} GiB)")
    image = req["image"]
    dest = workdir / "image"
    url = f"{req['url'].rstrip('/')}/v1/images/{image['id']}/file"
    try:
        took = download(url, dest, int(image["size"]), image["checksum"])
        say(f"downloaded {image['size']} bytes in {took:.1f} s; sha256 verified")
        write_image(dest, image.get("disk_format", "qcow2"), root["name"])
    finally:
        dest.unlink(missing_ok=True)
    say(f"image written to {root['name']}")
    if config_drive:
        iso = workdir / "configdrive.iso"
        files.write_atomic(iso, config_drive)  # it holds the agent token: 0600, gone on every path
        try:
            start = write_config_drive(iso, root["name"])
        finally:
            iso.unlink(missing_ok=True)
        say(f"config drive written at sector {start}")
    return {"seconds": round(time.monotonic() - t0, 1), "root_device": root["name"]}


def coldplug(rounds: int = 3) -> None:
    """Load the drivers of the devices present (the ramdisk has no udev): NICs, disks, CDs.
    A few rounds, since bus drivers (virtio_pci) reveal more devices."""
    for _ in range(rounds):
        aliases = set()
        for p in Path("/sys/bus").glob("*/devices/*/modalias"):
            alias = _attr(p)
            if alias:
                aliases.add(alias)
        if aliases:
            subprocess.run(["modprobe", "-q", "-a", "-b", *sorted(aliases)], capture_output=True, timeout=120)
        time.sleep(0.5)
    for mod in ("sr_mod", "isofs"):  # the CD and its file system, whatever the controller
        subprocess.run(["modprobe", "-q", mod], capture_output=True, timeout=60)


def inventory() -> dict:
    """What inspection reports (Ironic's basics): CPUs, memory, arch, disks, NICs, local_gb."""
    mem_kb = 0
    for line in _attr(Path("/proc/meminfo")).splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    disks = block_devices()
    big = [d for d in disks if d["size"] >= MIN_ROOT_BYTES]
    return {
        "cpus": os.cpu_count() or 1,
        "memory_mb": -(-mem_kb // 1024 // 256) * 256,  # the kernel keeps some: round up to 256 MiB
        "cpu_arch": os.uname().machine,
        # Ironic's local_gb: the root disk (smallest of at least 4 GiB) less 1 GiB for partitioning.
        "local_gb": (min(d["size"] for d in big) // 1024 ** 3 - 1) if big else 0,
        "disks": [{k: d[k] for k in ("name", "size", "model", "serial", "rotational")} for d in disks],
        "macs": sorted(interfaces()),
    }


def _network(req: dict) -> None:
    net = req.get("network") or {}
    if net.get("address"):
        mac = net.get("mac") or (sorted(interfaces()) or [""])[0]  # inspection may not know it yet
        dev = set_address(mac, net["address"], int(net.get("prefix", 24)), persist=False)
        say(f"address {net['address']}/{net.get('prefix', 24)} on {dev}")


def wait_for_request(timeout: float = REQUEST_WAIT) -> tuple[dict, bytes | None] | None:
    """find_request, polling: an emulated IDE controller (Nova rescue's CD) shows its drive
    only after the bus scan, seconds after its driver loaded."""
    deadline = time.monotonic() + timeout
    while (found := find_request()) is None and time.monotonic() < deadline:
        if not cdroms():
            coldplug(rounds=1)
        time.sleep(2)
    return found


def ramdisk() -> int:
    coldplug()
    try:
        found = request_from_cmdline(_attr(Path("/proc/cmdline"))) or wait_for_request()
    except DeployError as exc:
        say(f"no deploy request: {exc}")  # nothing to call back to: the undercloud's timeout tells
        found = None
    if found is None:
        return 0  # booted without a request: the agent loop follows
    req, config_drive = found
    trust(req)
    if req.get("mode") == "inspect":
        say(f"inspecting node {req.get('node')}")
        try:
            _network(req)
            inv = inventory()
        except DeployError as exc:
            say(f"inspection failed: {exc}")
            call_back(req, False, f"inspection: {exc}")
        else:
            say(f"found {inv['cpus']} CPUs, {inv['memory_mb']} MB, disks {[d['name'] for d in inv['disks']]}, "
                f"MACs {inv['macs']}")
            call_back(req, True, inventory=inv)
        say("waiting for the undercloud to power off this machine")
        while True:
            time.sleep(3600)
    say(f"deploying server {req.get('server_id')}")
    try:
        _network(req)
        done = deploy(req, config_drive)
    except DeployError as exc:
        say(f"deploy failed: {exc}")
        call_back(req, False, str(exc))
    except Exception as exc:  # noqa: BLE001 - any bug must still reach the undercloud
        say(f"deploy failed: {type(exc).__name__}: {exc}")
        call_back(req, False, f"deploy ramdisk error: {type(exc).__name__}: {str(exc)[:200]}")
    else:
        say(f"deploy done in {done['seconds']} s")
        call_back(req, True)
    say("waiting for the undercloud to reboot or power off this machine")
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["firstboot"]:
        try:
            return firstboot()
        except DeployError as exc:
            say(f"first boot: {exc}")
            return 1
    if args == ["ramdisk"]:
        return ramdisk()
    print("usage: python3 -m undercloud.agent.deploy firstboot|ramdisk", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
