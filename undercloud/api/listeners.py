"""The API's listeners on guest networks (Context.listeners).

Guests on a lab network cannot reach the service's loopback address, so realisers ask it
to also listen on an address of theirs (`Env.listen`, e.g. the container network's
gateway). Each such listener is one more uvicorn server over the same app and Context,
bound with IP_FREEBIND so it may be opened before its address exists (a bridge that
netavark makes and removes with the containers) and keeps working when it comes back.

Such an address serves guests only: the public routes (agent, deploy, stack signals, image
downloads by id, a minimal health), 404 for the rest even with the admin token
(api/guard.py decides from the address the connection came in on). Not so the operator's
own `serve --listen ADDRESS` (`guests=False`: other workers and the operator reach the
whole API there), loopback, or, when the service listens on every address (0.0.0.0), the
address other workers reach it at (`Context.api_url`). Under 0.0.0.0 nothing is bound here:
a guest address is only recorded, so connections that arrive on it are treated as guests'.
The lab namespaces' relays (provisioning/servers/vm_net.py) lead to its GUEST_RELAY, a
loopback address (127.0.0.2) served for guests the same way.
"""

from __future__ import annotations

import logging
import socket
import threading
from urllib.parse import urlsplit

from undercloud.errors import InvalidInput

log = logging.getLogger("undercloud.api.listeners")
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
LOOPBACK = ("127.0.0.1", "localhost")
EVERY = ("0.0.0.0", "")


class Listeners:
    """Extra addresses the API is served on (same port as on loopback)."""

    def __init__(self, ctx):  # api.context.Context
        self.ctx = ctx
        self._lock = threading.Lock()
        self._servers: dict[str, object] = {}
        self._guests: set[str] = set()  # addresses that serve guests only

    def listen(self, host: str, guests: bool = True) -> None:
        """Serve the API on `host` too: for guests (a realiser's lab address), or the whole of
        it (`guests=False`: the operator's `serve --listen`)."""
        with self._lock:
            if not guests:  # the operator's: whole, even if a realiser's start-up asked for it first
                self._guests.discard(host)
            if host in self._servers or host in self._guests or host in LOOPBACK:
                return  # served already (an address the operator gave stays whole)
            if self.ctx.listen in EVERY:  # served on every address already, present or not
                if guests and host != urlsplit(self.ctx.api_url).hostname:
                    self._guests.add(host)
                self.ctx.tls.serve_name(host)
                return
            import uvicorn

            from undercloud.api.app import create_app
            from undercloud.api.tls_port import http_protocol

            port = self.ctx.home.api_port()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                sock.close()
                raise InvalidInput(f"cannot serve the API on {host}:{port}: {exc.strerror}", "listen") from None
            sock.listen(256)
            self.ctx.tls.serve_name(host)
            server = uvicorn.Server(uvicorn.Config(create_app(self.ctx), log_level="warning", access_log=False,
                                                   http=http_protocol(self.ctx.tls)))
            threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                             name=f"api-{host}").start()
            self._servers[host] = server
            if guests:
                self._guests.add(host)
            log.info("serving the API on %s:%s%s", host, port, " for guests" if guests else "")

    def for_guests(self, server: tuple | None) -> bool:
        """The connection came in on an address served for guests (ASGI scope["server"])."""
        return bool(server) and server[0] in self._guests

    def addresses(self) -> list[str]:
        return sorted(self._servers)

    def stop(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.should_exit = True  # type: ignore[attr-defined]
            self._servers.clear()
