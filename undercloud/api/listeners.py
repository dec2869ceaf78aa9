"""The API's listeners on guest networks (Context.listeners).

Guests on a lab network cannot reach the service's loopback address, so realisers ask it
to also listen on an address of theirs (`Env.listen`, e.g. the container network's
gateway). Each such listener is one more uvicorn server over the same app and Context,
bound with IP_FREEBIND so it may be opened before its address exists (a bridge that
netavark makes and removes with the containers) and keeps working when it comes back.
Admin routes still need the admin token there; agents use their own server tokens.
"""

from __future__ import annotations

import logging
import socket
import threading

from undercloud.errors import InvalidInput

log = logging.getLogger("undercloud.api.listeners")
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


class Listeners:
    """Extra addresses the API is served on (same port as on loopback)."""

    def __init__(self, ctx):  # api.context.Context
        self.ctx = ctx
        self._lock = threading.Lock()
        self._servers: dict[str, object] = {}

    def listen(self, host: str) -> None:
        with self._lock:
            if host in self._servers or host in ("127.0.0.1", "localhost") or self.ctx.listen == "0.0.0.0":
                return  # served already (`serve --listen 0.0.0.0`: on every address, present or not)
            import uvicorn

            from undercloud.api.app import create_app

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
            server = uvicorn.Server(uvicorn.Config(create_app(self.ctx), log_level="warning", access_log=False))
            threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                             name=f"api-{host}").start()
            self._servers[host] = server
            log.info("serving the API on %s:%s for guests", host, port)

    def addresses(self) -> list[str]:
        return sorted(self._servers)

    def stop(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.should_exit = True  # type: ignore[attr-defined]
            self._servers.clear()
