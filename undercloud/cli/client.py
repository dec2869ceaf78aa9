"""The CLI's client of the undercloud API; starts the service when none answers."""

from __future__ import annotations

from typing import Any

import httpx

from undercloud.api import daemon
from undercloud.api.context import admin_token
from undercloud.cli.output import note
from undercloud.config import Home
from undercloud.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable, UndercloudError

ERRORS = {404: NotFound, 409: Conflict, 400: InvalidInput, 503: ServiceUnavailable}


class Client:
    def __init__(self, home: Home | None = None, timeout: float = 60.0):
        self.home = home or Home.current()
        h, started = daemon.start(self.home)
        if started:
            note(f"undercloud: started the service in the background (pid {h['pid']}, {daemon.url(self.home)})")
        self.http = httpx.Client(
            base_url=daemon.url(self.home),
            headers={"X-Undercloud-Token": admin_token(self.home)},
            timeout=timeout,
        )

    def request(self, method: str, path: str, **kwargs) -> Any:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"undercloud service at {self.http.base_url}: {exc}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
                msg, where = body.get("error") or body.get("detail"), body.get("where")
            except ValueError:
                msg, where = r.text.strip() or r.reason_phrase, None
            if not isinstance(msg, str):
                msg = str(msg)
            raise ERRORS.get(r.status_code, UndercloudError)(msg, where)
        if r.status_code == 204 or not r.content:
            return None
        return r.json()

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
