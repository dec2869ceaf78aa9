"""`python -m undercloud.lab.ipmi_bmc CONFIG`: IPMI BMCs for the lab's libvirt domains.

One process serves every node of a lab, each on its own UDP port on 127.0.0.1, using
virtualbmc's `VirtualBMC` (a pyghmi BMC in front of a libvirt domain). We run it
ourselves instead of `vbmcd` so one lab is one process with one config file and no
extra ZeroMQ control port to collide with another home.

pyghmi's BMC answers every RMCP+ open-session request with cipher suite 3 (HMAC-SHA1)
even when the client asked for SHA-256 (what pyghmi's own client asks for first), and
the client then fails on the hash length. A real BMC that lacks SHA-256 refuses the
request instead, which makes the client retry with SHA-1: we do the same.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
from pathlib import Path


def _refuse_sha256_sessions() -> None:
    import pyghmi.ipmi.private.serversession as ss

    original = ss.ServerSession.create_open_session_response

    def create_open_session_response(self, request):
        if len(request) > 12 and request[12] != 1:  # authentication algorithm other than HMAC-SHA1
            self.clientsessionid = request[4:8]
            return bytearray([request[0], 0x11, 0, 0]) + request[4:8]  # 0x11: invalid auth algorithm
        return original(self, request)

    ss.ServerSession.create_open_session_response = create_open_session_response


def main(path: str) -> None:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints every thread's stack to bmc.log
    cfg = json.loads(Path(path).read_text())
    _refuse_sha256_sessions()
    from virtualbmc.vbmc import VirtualBMC

    bmcs = [VirtualBMC(cfg["username"], cfg["password"], b["port"], "127.0.0.1", b["domain"], cfg["libvirt_uri"])
            for b in cfg["bmcs"]]
    Path(cfg["ready_file"]).write_text(f"{len(bmcs)} BMCs\n")
    VirtualBMC.listen(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1])
