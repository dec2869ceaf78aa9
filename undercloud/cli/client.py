"""The CLI's client of the undercloud API; starts the service when none answers.

Standard library only (http.client): the CLI starts in a fraction of the time an HTTP
library's import takes, and talks to one local service. A connection per request: the
service closes idle ones, and a fresh local connection costs far less than a retry rule."""

from __future__ import annotations

import http.client
import json as jsonlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from undercloud import daemon
from undercloud.cli.output import note
from undercloud.config import Home, connection
from undercloud.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable, UndercloudError, by_status

# an answer's status -> the error raised (its class's status, errors.py); any other: UndercloudError
ERRORS = by_status(NotFound, Conflict, InvalidInput, ServiceUnavailable)


def _query(params: Mapping[str, Any] | None) -> str:
    if not params:
        return ""
    # as HTTP libraries write them: true/false, and None as empty
    text = {k: ("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)) for k, v in params.items()}
    return "?" + urlencode(text)


class Client:
    def __init__(self, home: Home | None = None, timeout: float = 60.0, start: bool = True):
        """`start`: start the service when none answers (False: the service's own workflows,
        which call its API over loopback)."""
        self.home = home or Home.current()
        if start:
            h, started = daemon.start(self.home, details=False)  # h['pid'] only when it started
            if started:
                note(f"undercloud: started the service in the background (pid {h['pid']}, {daemon.url(self.home)})")
        self.base_url = daemon.url(self.home)
        self.ca_file = self.home.ca_file  # the service's CA: this home's, whatever `home` becomes
        self.token = self.home.admin_token()
        self.timeout = timeout

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None,
                content: bytes | Iterable[bytes] | None = None, headers: Mapping[str, str] | None = None) -> Any:
        head = dict(headers or {})
        body = content
        if json is not None:
            body = jsonlib.dumps(json).encode()
            head["Content-Type"] = "application/json"
        with self.stream(method, path + _query(params), body=body, headers=head) as r:
            data = self.io(r.read)
        if r.status >= 400:
            try:
                body = jsonlib.loads(data)
                msg, where = body.get("error") or body.get("detail"), body.get("where")
            except (ValueError, AttributeError):
                msg, where = data.decode(errors="replace").strip() or r.reason, None
            if not isinstance(msg, str):
                msg = str(msg)
            raise ERRORS.get(r.status, UndercloudError)(msg, where)
        if r.status == 204 or not data:
            return None
        return jsonlib.loads(data)

    @contextmanager
    def stream(self, method: str, path: str, *, body: Any = None,
               headers: Mapping[str, str] | None = None) -> Iterator[http.client.HTTPResponse]:
        """The response with its body unread (read it in chunks), the connection closed after."""
        conn = connection(self.base_url, self.ca_file, self.timeout)
        try:
            self.io(lambda: conn.request(method, path, body=body,
                                            headers={"X-Undercloud-Token": self.token, **(headers or {})}))
            yield self.io(conn.getresponse)
        finally:
            conn.close()

    def io(self, step: Callable[[], Any]) -> Any:
        """One network step (send, or read a response): a failure is ServiceUnavailable."""
        try:
            return step()
        except (OSError, http.client.HTTPException) as exc:
            raise ServiceUnavailable(f"undercloud service at {self.base_url}: {exc or type(exc).__name__}") from None

    def get(self, path: str, **kw) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw) -> Any:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw) -> Any:
        return self.request("PUT", path, **kw)

    def patch(self, path: str, **kw) -> Any:
        return self.request("PATCH", path, **kw)

    def delete(self, path: str, **kw) -> Any:
        return self.request("DELETE", path, **kw)
