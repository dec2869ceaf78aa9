"""This host's libvirt: the one libvirtd per machine, virsh, and what both the virtual lab
and the VM and bare-metal servers need of it.

When no libvirtd runs, `ensure_libvirtd` creates a network namespace and starts virtlogd
and libvirtd inside it with `nsenter --net=/run/netns/NAME` (not `ip netns exec`, which
remounts /sys), libvirtd under host/reaper.py so the qemus it daemonizes are reaped at
once. When one runs already, it is used, and its namespace gets the name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from undercloud.errors import UndercloudError
from undercloud.host.accel import KVM_DEVICE, accelerator
from undercloud.host.run import run

LIBVIRT_URI = "qemu:///system"
IMAGES = Path("/var/lib/libvirt/images")
START_TIMEOUT = 30.0
# A libvirtd with no capabilities cache (its first start on a machine) probes qemu before it
# answers anyone: 70 s measured on a 2-core host.
LIBVIRTD_FIRST_ANSWER = 240.0
LIBVIRTD_LOG = Path("/var/log/libvirt/undercloud-libvirtd.log")  # one libvirtd per machine
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")
# Held while libvirtd is looked for and started: two labs coming up at once (two homes, two
# test workers) otherwise both start a virtlogd, and the second fails on its pidfile.
START_LOCK = Path("/run/undercloud-libvirtd.lock")
NETNS_DIR = Path("/run/netns")  # where `ip netns` names namespaces


class HostError(UndercloudError):
    pass


def available() -> str | None:
    """None when libvirt VMs (and the lab around them) can be made here, else why not."""
    if os.geteuid() != 0:
        return "the virtual lab needs root (network namespaces, libvirtd)"
    for tool, pkg in (("libvirtd", "libvirt-daemon-system"), ("virsh", "libvirt-clients"),
                      ("qemu-system-x86_64", "qemu-system-x86"), ("qemu-img", "qemu-utils"),
                      ("ip", "iproute2"), ("nsenter", "util-linux")):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install {pkg})"
    for mod, pkg in (("sushy_tools", "sushy-tools"), ("virtualbmc", "virtualbmc"), ("libvirt", "libvirt-python")):
        try:
            __import__(mod)
        except ImportError:
            return f"python module {mod} is missing (pip install {pkg})"
    return None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def libvirtd_pid() -> int | None:
    for pidfile in (Path("/run/libvirtd.pid"), Path("/var/run/libvirtd.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if pid_alive(pid) and "libvirtd" in cmdline(pid):
            return pid
    return None


def virtlogd_running(path: Path = VIRTLOGD_SOCKET) -> bool:
    """The host's virtlogd answers on its socket (libvirtd needs it to start domains). A
    virtlogd process seen in /proc may be another's: an overcloud's nova_libvirt container
    runs one with its own /run/libvirt, which this host's libvirtd cannot use."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def wait_for(what: str, check, timeout: float = START_TIMEOUT, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    hint = f"; see {log}" if log else ""
    raise HostError(f"{what} did not come up within {timeout:.0f} s{hint}")


def virsh(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    return run(["virsh", "-c", LIBVIRT_URI, *args], check=check, timeout=timeout)


def _libvirtd_answers() -> bool:
    try:
        return virsh("version", check=False, timeout=30).returncode == 0
    except UndercloudError:  # still busy: a timeout is an answer of "not yet"
        return False


def nsenter(path: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `argv` in the network namespace at `path`."""
    return run(["nsenter", f"--net={path}", *argv], check=check, timeout=60)


@contextlib.contextmanager
def _start_lock() -> Iterator[None]:
    with open(START_LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure_libvirtd(netns: str, record: Callable[[str, Any], None] = lambda key, value: None) -> str:
    """libvirtd (and virtlogd) answering, in the namespace `netns` unless one runs already;
    returns the path of libvirtd's namespace, named `netns` either way. `record(key, value)`
    is told each thing made (netns_created, libvirtd_started, libvirtd_netns) as it is made,
    so that whoever asked can remove exactly that. One caller at a time on this machine."""
    with _start_lock():
        return _ensure_libvirtd(netns, record)


def _ensure_libvirtd(netns: str, record: Callable[[str, Any], None]) -> str:
    path = str(NETNS_DIR / netns)
    pid = libvirtd_pid()
    if pid is None:
        if not Path(path).exists():
            run(["ip", "netns", "add", netns])
        record("netns_created", True)
        nsenter(path, "ip", "link", "set", "lo", "up")
        if not virtlogd_running():
            nsenter(path, "virtlogd", "-d")
        # libvirtd in the foreground under our reaper (see host/reaper.py), detached
        LIBVIRTD_LOG.parent.mkdir(parents=True, exist_ok=True)
        # With guests on TCG, libvirtd does not see /dev/kvm: where it exists but its qemu
        # user may not open it (here: root:ssl-cert 0660), libvirt found its capability cache
        # "outdated" at every lookup (KVM at probe time, not now) and probed qemu again:
        # 1 s for each define or start, 10 s on a busy host, long enough for a lab BMC's
        # client to give up. In a mount namespace of its own, nothing else is touched.
        hide = ["unshare", "--mount", "--propagation", "private"] if accelerator().type == "qemu" else []
        with open(LIBVIRTD_LOG, "ab") as out:
            subprocess.Popen([*hide, "nsenter", f"--net={path}", sys.executable, "-m", "undercloud.host.reaper",
                              *(["--hide", KVM_DEVICE] if hide else []), "libvirtd"],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, cwd="/")
        wait_for("libvirtd", lambda: libvirtd_pid() is not None and _libvirtd_answers(),
                 timeout=LIBVIRTD_FIRST_ANSWER, log=LIBVIRTD_LOG)
        pid = libvirtd_pid()
        record("libvirtd_started", pid)
    else:
        wait_for("libvirtd", _libvirtd_answers, timeout=LIBVIRTD_FIRST_ANSWER, log=LIBVIRTD_LOG)
        if not virtlogd_running():  # it died, or never ran beside a libvirtd started elsewhere
            run(["virtlogd", "-d"], timeout=60)
    wait_for("virtlogd", virtlogd_running)
    record("libvirtd_netns", f"/proc/{pid}/ns/net")
    # Keep a name on libvirtd's namespace: /proc/PID paths vanish with the process.
    if not Path(path).exists():
        NETNS_DIR.mkdir(exist_ok=True)
        Path(path).touch()
        run(["mount", "--bind", f"/proc/{pid}/ns/net", path])
        record("netns_created", True)
    return path


def media_pool(instance: str) -> tuple[str, Path]:
    """(name, directory) of the storage pool the lab's Redfish emulator uploads inserted
    virtual media into (a copy per media and domain)."""
    return f"{instance}-media", IMAGES / f"{instance}-media"
