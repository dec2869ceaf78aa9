"""`python -m undercloud.lab.reaper CMD...`: run CMD as a child and reap every orphan below it.

libvirtd starts qemu with -daemonize (for its capability probe and for every domain), so
those processes are re-parented when their launcher exits. On machines whose PID 1 reaps
slowly (this one), a dead qemu stays a zombie, and libvirtd waits for it to vanish before
it carries on: `define` then hangs behind a capability probe. Made a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), this process adopts them instead and reaps them at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
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
