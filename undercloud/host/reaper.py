"""`python -m undercloud.host.reaper CMD...`: run CMD as a child and reap every orphan below it.

libvirtd starts qemu with -daemonize (for its capability probe and for every domain), so
those processes are re-parented when their launcher exits. On machines whose PID 1 reaps
slowly (this one), a dead qemu stays a zombie, and libvirtd waits for it to vanish before
it carries on: `define` then hangs behind a capability probe. Made a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), this process adopts them instead and reaps them at once.

`--hide PATH` first covers PATH (in a mount namespace of its own, made by the caller) with
an empty file nobody may open: see Lab._ensure_libvirtd for why /dev/kvm is hidden.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


HIDDEN = "/run/undercloud-hidden"  # the empty, mode-000 file laid over what is hidden


def hide(path: str) -> None:
    fd = os.open(HIDDEN, os.O_CREAT | os.O_WRONLY, 0)
    os.close(fd)
    subprocess.run(["mount", "--bind", HIDDEN, path], check=True)


QEMU_CONF = "/etc/libvirt/qemu.conf"


def no_domain_namespaces() -> None:
    """libvirt's qemu.conf with `namespaces = []`, laid over the real one: a domain's private
    /dev would carry the hidden file over as a mount, which libvirt cannot move there."""
    text = open(QEMU_CONF).read() if os.path.exists(QEMU_CONF) else ""
    path = HIDDEN + "-qemu.conf"
    with open(path, "w") as f:
        f.write(text + "\n# undercloud lab: no per-domain mount namespace\nnamespaces = []\n")
    subprocess.run(["mount", "--bind", path, QEMU_CONF], check=True)


def main(argv: list[str]) -> int:
    while argv[:1] == ["--hide"]:
        if os.path.exists(argv[1]):
            hide(argv[1])
            no_domain_namespaces()
        argv = argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("reaper: prctl(PR_SET_CHILD_SUBREAPER) failed", file=sys.stderr)
    child = subprocess.Popen(argv)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    status = 0
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            return status
        except InterruptedError:
            continue
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(st)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
