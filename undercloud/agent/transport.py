"""HTTP to the undercloud (urllib): fetch this server's metadata, send signals.

The per-server token goes in the X-Server-Token header (never in a URL we log). An https
URL is verified against the undercloud's CA only (`ca`, PEM), never the system's: a
certificate another CA signed, for whatever name, is refused.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass


def context(ca: str) -> ssl.SSLContext | None:
    """A TLS context trusting the undercloud's CA (PEM) alone, host names checked; None
    without one (an http:// undercloud)."""
    return ssl.create_default_context(cadata=ca) if ca else None


class Unreachable(Exception):
    """The undercloud did not answer (down, restarting, network): retry later."""


class Refused(Exception):
    """The undercloud answered with a client error (4xx): retrying will not help."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class Fetched:
    changed: bool
    metadata: dict | None
    etag: str | None


class Undercloud:
    def __init__(self, url: str, server_id: str, token: str, timeout: float = 10.0, ca: str = ""):
        self.base = url.rstrip("/")
        self.server_id = server_id
        self.token = token
        self.timeout = timeout
        self.context = context(ca)

    @property
    def metadata_url(self) -> str:
        return f"{self.base}/v1/agent/servers/{self.server_id}/metadata"

    def signal_url(self, deployment_id: str) -> str:
        return f"{self.base}/v1/agent/servers/{self.server_id}/deployments/{deployment_id}/signal"

    def _open(self, req: urllib.request.Request, timeout: float):
        req.add_header("X-Server-Token", self.token)
        try:
            return urllib.request.urlopen(req, timeout=timeout, context=self.context)
        except urllib.error.HTTPError as exc:
            if exc.code == 304:
                return exc
            body = exc.read().decode("utf-8", "replace")
            try:
                body = json.loads(body).get("error") or body
            except (ValueError, AttributeError):
                pass
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                raise Refused(exc.code, str(body)[:300]) from None
            raise Unreachable(f"HTTP {exc.code}: {str(body)[:200]}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise Unreachable(str(getattr(exc, "reason", exc))) from None

    def fetch(self, etag: str | None, wait: float = 0) -> Fetched:
        url = self.metadata_url + (f"?wait={wait:g}" if wait else "")
        req = urllib.request.Request(url)
        if etag:
            req.add_header("If-None-Match", etag)
        resp = self._open(req, self.timeout + wait)
        with resp:
            if resp.status == 304:
                return Fetched(False, None, etag)
            try:
                data = json.loads(resp.read())
            except (ValueError, OSError) as exc:
                raise Unreachable(f"bad metadata document: {exc}") from None
            return Fetched(True, data, resp.headers.get("ETag"))

    def signal(self, deployment_id: str, body: dict) -> None:
        """Returns when the undercloud acknowledged the signal (2xx)."""
        data = json.dumps(body).encode()
        req = urllib.request.Request(self.signal_url(deployment_id), data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with self._open(req, self.timeout + len(data) / 1e6):
            pass

    def report_health(self, body: dict) -> None:
        """The watchdog's view of this node's Pods (kept by the undercloud for `overcloud status`)."""
        req = urllib.request.Request(f"{self.base}/v1/agent/servers/{self.server_id}/health",
                                     data=json.dumps(body).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
        with self._open(req, self.timeout):
            pass
