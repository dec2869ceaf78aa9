"""The deploy (and inspection) ramdisk's program: write a node's image, or report its hardware.

Standard library only (runs on a bare python3, like the rest of the agent).

    python3 -m undercloud.agent.ramdisk   # run by the ramdisk's /init, before the agent loop

The deploy ramdisk (Ironic's direct deploy) finds `undercloud/deploy.json` on
the CD it booted from (or, booted from the network, at the URL of its kernel command line:
`request_from_cmdline`) (the undercloud made that ISO for this deploy and inserted it through
the BMC's virtual media): it sets its address, picks the root device by the hints,
downloads the image from the undercloud's image store (resuming with Range), verifies the
sha256, writes it, adds the config drive as a last partition (read at the node's first
boot: first_boot.py), and calls back; the undercloud then ejects the media, sets boot to
disk and reboots the node. A request in `inspect` mode instead calls back the node's
inventory (CPUs, memory, disks, MACs). Any failure is called back as one line (never the
token), and the node waits to be powered off. Booted without a request, it returns at once
and the agent loop follows.

What it shares with the first boot (the error, the output, commands, media, addresses) is
in first_boot.py.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from undercloud.agent import files
from undercloud.agent.first_boot import (
    DeployError,
    Mounted,
    interfaces,
    read_attr,
    read_json,
    say,
    set_address,
    sh,
)

REQUEST = "undercloud/deploy.json"      # on the deploy CD
CONFIG_DRIVE_FILE = "undercloud/configdrive.iso"
MIN_ROOT_BYTES = 4 * 1024 ** 3          # Ironic's default: the smallest disk of at least 4 GiB
CHUNK = 1 << 20
REQUEST_WAIT = 90.0                     # seconds to wait for the CD with the request to show


# ---- the boot CD -------------------------------------------------------------------
def cdroms() -> list[str]:
    return sorted(f"/dev/{p.name}" for p in Path("/sys/block").glob("sr*"))


# ---- root device -------------------------------------------------------------------
def block_devices() -> list[dict]:
    out = []
    for d in sorted(Path("/sys/block").iterdir()):
        if re.match(r"(loop|ram|sr|zram|dm-|fd|nbd)", d.name) or read_attr(d / "removable") == "1":
            continue
        size = int(read_attr(d / "size") or 0) * 512
        if size == 0:
            continue
        out.append({"name": f"/dev/{d.name}", "size": size, "model": read_attr(d / "device" / "model"),
                    "vendor": read_attr(d / "device" / "vendor"),
                    "serial": read_attr(d / "serial") or read_attr(d / "device" / "serial"),
                    "wwn": read_attr(d / "wwid") or read_attr(d / "device" / "wwid"),
                    "rotational": read_attr(d / "queue" / "rotational") == "1"})
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
            alias = read_attr(p)
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
    for line in read_attr(Path("/proc/meminfo")).splitlines():
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
        found = request_from_cmdline(read_attr(Path("/proc/cmdline"))) or wait_for_request()
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
    if args:
        print("usage: python3 -m undercloud.agent.ramdisk", file=sys.stderr)
        return 2
    return ramdisk()


if __name__ == "__main__":
    sys.exit(main())
