"""KVM or TCG for libvirt domains: KVM only when a short probe boot shows it works.

`/dev/kvm` existing is not enough: under nested virtualisation guests can hang at kernel
start with no output at all. So the probe boots a real Linux kernel under `-accel kvm`
(no disk, no initramfs, no network) and waits for the point where it gives up looking for
a root file system, "VFS: Unable to mount root fs", on the serial console: every early
boot step lies before it. qemu is killed at once after (or at PROBE_TIMEOUT). The answer
is cached per machine in the image builder's cache ($UNDERCLOUD_CACHE/accel.json), keyed
by the host kernel and the qemu version, so the probe runs once. `UNDERCLOUD_ACCEL=kvm|qemu`
overrides it all. Returns libvirt domain types: "kvm", or "qemu" (TCG).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from undercloud.agent.files import write_atomic
from undercloud.errors import UndercloudError

log = logging.getLogger("undercloud.accel")

QEMU = "qemu-system-x86_64"
KVM_DEVICE = "/dev/kvm"
PROBE_TIMEOUT = 15.0  # a TCG boot reaches the marker in ~1.5 s here; a working KVM faster
MARKER = b"VFS: Unable to mount root fs"
_logged: set[tuple[str, str]] = set()


class Accel(NamedTuple):
    type: str  # libvirt domain type: "kvm" | "qemu"
    reason: str


def accelerator() -> Accel:
    """The libvirt domain type to use on this machine, and why."""
    override = os.environ.get("UNDERCLOUD_ACCEL")
    if override is not None:
        if override not in ("kvm", "qemu"):
            raise UndercloudError(f"must be kvm or qemu, got {override!r}", "UNDERCLOUD_ACCEL")
        return _say(Accel(override, "set by UNDERCLOUD_ACCEL"))
    if not os.path.exists(KVM_DEVICE):
        return _say(Accel("qemu", f"no {KVM_DEVICE}"))
    if not os.access(KVM_DEVICE, os.R_OK | os.W_OK):
        return _say(Accel("qemu", f"{KVM_DEVICE} is not readable and writable by this user"))
    qemu = shutil.which(QEMU)
    if not qemu:
        return _say(Accel("qemu", f"{QEMU} is not installed"))
    key = {"host_kernel": os.uname().release, "qemu": _qemu_version(qemu)}
    cache = _cache_dir()
    with open(cache / "accel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one probe at a time; the others then read its answer
        found = cached(key)
        if found:
            return _say(found)
        kernel = probe_kernel()
        if kernel is None:  # not cached: a kernel may be built later
            return _say(Accel("qemu", "no kernel to probe KVM with (build the deploy-ramdisk image, "
                                      "or install one in /boot)"))
        ok, why, seconds = probe(qemu, kernel)
        result = Accel("kvm" if ok else "qemu", why)
        write_atomic(cache / "accel.json", json.dumps({"key": key, "type": result.type, "reason": result.reason,
                                                       "kernel": str(kernel), "seconds": round(seconds, 2),
                                                       "at": time.time()}), 0o644)
        return _say(result)


def cached(key: dict | None = None) -> Accel | None:
    """The cached probe answer (for `key`, or whatever is cached), without probing."""
    try:
        data = json.loads((_cache_dir() / "accel.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or (key is not None and data.get("key") != key):
        return None
    return Accel(data["type"], f"{data['reason']}; probed {time.strftime('%Y-%m-%d', time.gmtime(data['at']))}")


def probe_kernel() -> Path | None:
    """A Linux kernel to boot: the newest the image builder made (deploy ramdisk), else the host's."""
    found: list[tuple[float, Path]] = []
    for manifest in (_cache_dir() / "outputs").glob("*/manifest.json"):
        try:
            data = json.loads(manifest.read_text())
            arts = data.get("artifacts", []) if isinstance(data, dict) else []
        except (OSError, ValueError):
            continue
        for a in arts:
            path = manifest.parent / str(a.get("file"))
            if a.get("role") == "kernel" and path.is_file():
                found.append((manifest.stat().st_mtime, path))
    if found:
        return max(found)[1]
    host = sorted(p for p in Path("/boot").glob("vmlinuz-*") if os.access(p, os.R_OK))
    return host[-1] if host else None


def probe(qemu: str, kernel: Path, timeout: float | None = None, accel: str = "kvm") -> tuple[bool, str, float]:
    """Boot `kernel` under `accel`; (reached the marker, why, seconds). qemu never outlives it."""
    timeout = PROBE_TIMEOUT if timeout is None else timeout
    name = accel.upper()
    argv = [qemu, "-accel", accel, "-m", "256", "-nodefaults", "-nic", "none", "-display", "none",
            "-monitor", "none", "-serial", "stdio", "-no-reboot", "-kernel", str(kernel),
            "-append", "console=ttyS0 panic=-1"]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return False, f"{name} probe: cannot start {qemu}: {exc}", 0.0
    out = b""
    try:
        with selectors.DefaultSelector() as sel:
            assert proc.stdout is not None
            sel.register(proc.stdout, selectors.EVENT_READ)
            while MARKER not in out:
                left = start + timeout - time.monotonic()
                if left <= 0:
                    return False, f"{name} probe boot did not reach the kernel's root mount within {timeout:.0f} s", \
                        time.monotonic() - start
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:  # qemu exited before the marker
                    last = out.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                    return False, f"{name} probe: qemu exited early: {last[0][:200]}", time.monotonic() - start
                out = out[-4096:] + chunk
        took = time.monotonic() - start
        return True, f"{name} probe boot reached the kernel's root mount in {took:.1f} s", took
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _say(result: Accel) -> Accel:
    if (result.type, result.reason) not in _logged:  # once per process: in the service log
        _logged.add((result.type, result.reason))
        log.info("libvirt domain type %s: %s", result.type, result.reason)
    return result


def _cache_dir() -> Path:
    from undercloud.config import cache_dir  # the machine's one cache

    return cache_dir()


def _qemu_version(qemu: str) -> str:
    try:
        r = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (r.stdout.strip().splitlines() or ["unknown"])[0]
