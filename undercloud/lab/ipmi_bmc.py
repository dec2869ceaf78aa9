"""`python -m undercloud.lab.ipmi_bmc CONFIG`: IPMI BMCs for the lab's libvirt domains.

One process serves every node of a lab, each on its own UDP port on 127.0.0.1, using
virtualbmc's `VirtualBMC` (a pyghmi BMC in front of a libvirt domain). We run it
ourselves instead of `vbmcd` so one lab is one process with one config file and no
extra ZeroMQ control port to collide with another home.

pyghmi's BMC answers every RMCP+ open-session request with cipher suite 3 (HMAC-SHA1)
even when the client asked for SHA-256 (what pyghmi's own client asks for first), and
the client then fails on the hash length. A real BMC that lacks SHA-256 refuses the
request instead, which makes the client retry with SHA-1: we do the same.

A client (pyghmi's own) talks to every BMC from one UDP port. When a new login from that port
reaches a session, pyghmi's server drops the client's sessions with *every* BMC of the process,
not only this one: the others' next packets went unanswered (a wrong password then timed out
instead of being refused; a boot-device change found its session gone), and a packet queued for
a dropped session reached `sessionless_data`, which only the server has: the AttributeError
ended the whole BMC process. We drop only the session that saw the login, and hand a late
packet to the server, as pyghmi does for one that arrives after its session is gone.
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


def _route_late_packets() -> None:
    import pyghmi.ipmi.private.serversession as ss
    from pyghmi.ipmi.private import session

    def sessionless_data(self, data, sockaddr):
        server = session.Session.bmc_handlers.get(self.socket, {}).get(0)
        if server is not None:
            server.sessionless_data(data, sockaddr)

    ss.ServerSession.sessionless_data = sessionless_data
    original = ss.ServerSession._handle_ipmi_packet

    def _handle_ipmi_packet(self, data, sockaddr=None, qent=None):
        # An IPMI 1.5 packet with sequence number and session id 0 opens a new login
        if len(data) >= 13 and data[4] in (0, 2) and bytes(data[5:13]) == bytes(8):
            handlers = session.Session.bmc_handlers.get(sockaddr, {})
            if handlers.get(self.bmc.port) is self:
                del handlers[self.bmc.port]
                if not handlers:
                    session.Session.bmc_handlers.pop(sockaddr, None)
            self.bmc.sessionless_data(data, sockaddr)
            return None
        return original(self, data, sockaddr=sockaddr, qent=qent)

    ss.ServerSession._handle_ipmi_packet = _handle_ipmi_packet


def main(path: str) -> None:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints every thread's stack to bmc.log
    cfg = json.loads(Path(path).read_text())
    _refuse_sha256_sessions()
    _route_late_packets()
    from virtualbmc.vbmc import VirtualBMC

    bmcs = [VirtualBMC(cfg["username"], cfg["password"], b["port"], "127.0.0.1", b["domain"], cfg["libvirt_uri"])
            for b in cfg["bmcs"]]
    Path(cfg["ready_file"]).write_text(f"{len(bmcs)} BMCs\n")
    VirtualBMC.listen(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1])
