"""The API port speaks TLS, and plain HTTP where the guard allows it (api/guard.py).

Every listener of the service serves one port, and what arrives there is told apart by its
first byte: a TLS handshake (0x16, no HTTP method starts so) is answered with the service's
certificate, anything else is plain HTTP. Plain HTTP stays for what carries no secret and
cannot speak TLS (iPXE fetching its boot files) and for agents configured before TLS (their
settings hold an http:// URL); the guard refuses it for the rest.

The certificate (`ServerTLS`) is signed by the undercloud's CA (undercloud/tls.py) and
covers every address clients are given: loopback, the host's name, the addresses realisers
hand to nodes (`serve_name`). A new address issues it again and loads it into the one
SSLContext every listener shares: the next handshake presents it, open connections keep
theirs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from asyncio import sslproto
from pathlib import Path

log = logging.getLogger("undercloud.api.tls")

TLS_HANDSHAKE = 0x16  # a TLS record of type handshake: the first byte of every ClientHello
# Seconds a closing connection waits for the client's close_notify: a client idling on a
# kept-alive connection never sends it, and the service's stop would wait asyncio's 30 s.
SHUTDOWN_TIMEOUT = 1.0


class ServerTLS:
    """The service's certificate and its SSLContext, for every listener."""

    def __init__(self, tls_dir: Path, names: list[str], seed: bytes | None = None):
        """`seed`: what the CA derives from (the store's key: every worker the same CA)."""
        self.tls_dir = tls_dir
        self.names = set(names)
        self._seed = seed
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._lock = threading.Lock()
        with self._lock:
            self._load()

    @property
    def ca_file(self) -> Path:
        from undercloud import tls

        return self.tls_dir / tls.CA_CERT

    @property
    def ca_pem(self) -> str:
        """The CA certificate (PEM) clients verify the service with: nodes get it."""
        return self.ca_file.read_text()

    def serve_name(self, name: str) -> None:
        """Clients will reach the service at `name` (an address or host name): covered from
        the next handshake on."""
        if name in self.names:
            return
        with self._lock:
            if name not in self.names:
                self.names.add(name)
                self._load()
                log.info("the service's certificate now covers %s", name)

    def renew(self, now=None) -> bool:
        """Issue the certificate again when it ends within tls.RENEW_WITHIN of `now` (the
        service's daily check, STARTUP): True when it did."""
        from undercloud import tls

        with self._lock:
            before = (self.tls_dir / tls.SERVICE_CERT).read_bytes()
            self._load(now)
            renewed = (self.tls_dir / tls.SERVICE_CERT).read_bytes() != before
        if renewed:
            log.info("the service's certificate was issued again (it ended within %d days)", tls.RENEW_WITHIN.days)
        return renewed

    @property
    def expires(self) -> str:
        """When the certificate in use ends (ISO 8601, UTC)."""
        from undercloud import tls

        return tls.expiry((self.tls_dir / tls.SERVICE_CERT).read_bytes()).isoformat()

    def _load(self, now=None) -> None:
        from undercloud import tls

        cert, key = tls.ensure_server_cert(self.tls_dir, sorted(self.names), seed=self._seed, now=now)
        self.context.load_cert_chain(cert, key)


RENEW_CHECK = 6 * 3600.0  # seconds between the running service's checks of its certificate's end


def startup(ctx):
    """An app.STARTUP hook: a service that runs for months renews its certificate in time."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(RENEW_CHECK) and not ctx.stopping.is_set():
            try:
                ctx.tls.renew()
            except Exception:  # noqa: BLE001 - the next check tries again; the log says why
                log.exception("renewing the service's certificate failed")

    threading.Thread(target=loop, name="tls-renew", daemon=True).start()
    return stop.set


def protocol(inner: type, server_tls: ServerTLS) -> type:
    """A uvicorn protocol class (Config(http=...)) that serves `inner` (uvicorn's HTTP
    protocol) over TLS or plain, from the connection's first byte."""

    class EitherProtocol(asyncio.Protocol):
        def __init__(self, **kw):
            self._kw = kw
            self._loop = kw.get("_loop") or asyncio.get_event_loop()
            self._transport: asyncio.Transport | None = None

        def connection_made(self, transport) -> None:
            self._transport = transport
            # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and the ones
            # uvicorn and the listeners make say 0: without it a response's second record
            # waits for the client's delayed ACK (40 ms a request over TLS).
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data: bytes) -> None:
            transport, http = self._transport, inner(**self._kw)
            if data[0] == TLS_HANDSHAKE:
                # what loop.create_server(ssl=...) makes, over the bytes read already
                tls = sslproto.SSLProtocol(self._loop, http, server_tls.context, None, server_side=True,
                                           ssl_shutdown_timeout=SHUTDOWN_TIMEOUT)
                transport.set_protocol(tls)
                tls.connection_made(transport)
                view = memoryview(data)
                while view:
                    buf = tls.get_buffer(len(view))
                    n = min(len(buf), len(view))
                    buf[:n] = view[:n]
                    tls.buffer_updated(n)
                    view = view[n:]
            else:
                transport.set_protocol(http)
                http.connection_made(transport)
                http.data_received(data)

        def connection_lost(self, exc) -> None:  # closed before its first byte: nothing began
            pass

    return EitherProtocol


def http_protocol(server_tls: ServerTLS) -> type:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return protocol(AutoHTTPProtocol, server_tls)
